"""``queuelog work``: the worker runner's command line (click, the client and the runner only).

Its own module so that the console script (``queuelog.cli``) and the server's ``app.cli``
(``flask --app app work``) both offer it without importing each other.
"""
from __future__ import annotations

import gc
import os
import shutil
import sys
from typing import Any

import click


@click.command("work", context_settings={"allow_interspersed_args": False})
@click.option("--url", envvar="QUEUELOG_URL", metavar="URL",
              help="The queuelog server (else $QUEUELOG_URL).")
@click.option("--token-file", metavar="PATH",
              help="File holding the worker key (else $QUEUELOG_TOKEN_FILE, else "
                   "$QUEUELOG_TOKEN); never the token itself, which every user could read.")
@click.option("--types", default=None, help="Comma-separated job types to claim.")
@click.option("--concurrency", type=click.IntRange(1, 100), default=1, show_default=True,
              help="Jobs run at once.")
@click.option("--lease", type=click.FloatRange(1, 43_200), default=None,
              help="Lease in seconds (default: the server's for the job's type).")
@click.option("--timeout", type=click.FloatRange(0, min_open=True), default=None,
              help="Seconds a job's command may run before its process group is killed "
                   "(with --post: a request's, default 30).")
@click.option("--grace", type=click.FloatRange(0), default=30, show_default=True,
              help="Seconds running commands get to finish after SIGTERM or SIGINT.")
@click.option("--max-error-bytes", envvar="QUEUELOG_MAX_ERROR_BYTES",
              type=click.IntRange(1, 2**31 - 1), default=8192, show_default=True,
              help="The server's MAX_ERROR_BYTES (else $QUEUELOG_MAX_ERROR_BYTES): a failed "
                   "command's error carries the end of its standard error, this size in all.")
@click.option("--post", "post_url", metavar="URL",
              help="Deliver each job as POST URL (the payload as JSON) instead of running "
                   "a command: a 2xx answer completes it.")
@click.option("--secret-file", metavar="PATH",
              help="With --post: sign each request with this Standard Webhooks secret "
                   "(whsec_...).")
@click.option("--with-job", is_flag=True,
              help='With --post: send {"job": <the claimed job>} instead of the payload.')
@click.option("--ca-file", metavar="PATH",
              help="With --post: trust this CA bundle for the target's TLS certificate.")
@click.argument("command", nargs=-1, metavar="-- COMMAND [ARG...]")
def work(url: str | None, token_file: str | None, types: str | None, concurrency: int,
         lease: float | None, timeout: float | None, grace: float, max_error_bytes: int,
         post_url: str | None,
         secret_file: str | None, with_job: bool, ca_file: str | None,
         command: tuple[str, ...]) -> None:
    """Run COMMAND for every job claimed: payload on stdin, exit 0 completes it.

    With --post URL instead, each job is an HTTP request to URL: a 2xx answer completes it.
    It speaks HTTP to the server at URL, and loads no app and writes no file here.
    """
    from queuelog.client import Client
    from queuelog.worker.linux import make_not_dumpable, scrub_environ
    from queuelog.worker.runner import Runner
    if not url:
        raise click.UsageError("no server: give --url or set QUEUELOG_URL")
    check_url("--url", url)
    if bool(post_url) == bool(command):
        raise click.UsageError("give either --post URL or -- COMMAND (one of the two)")
    if not post_url and (secret_file or with_job or ca_file):
        raise click.UsageError("--secret-file, --with-job and --ca-file go with --post")
    target = _target(post_url, secret_file, with_job, ca_file, timeout, concurrency) \
        if post_url else None
    try:
        token = read_token(token_file or os.environ.get("QUEUELOG_TOKEN_FILE"),
                           os.environ.get("QUEUELOG_TOKEN"))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    # The token now lives in this process only: out of its environment (for anything it
    # starts), and /proc/PID/environ and memory unreadable to its commands (same user).
    if not scrub_environ("QUEUELOG_TOKEN"):
        print("queuelog work: warning: QUEUELOG_TOKEN stays readable in /proc/PID/environ "
              "here; prefer --token-file", file=sys.stderr, flush=True)
    make_not_dumpable()
    if command and shutil.which(command[0]) is None:
        raise click.UsageError(f"cannot run {command[0]!r}: not found or not executable")
    type_list = [t.strip() for t in types.split(",") if t.strip()] if types else None
    client = Client(url, token)  # url and token checked above: httpx takes them as they are
    runner = Runner(client, list(command), types=type_list, concurrency=concurrency,
                    lease=lease, timeout=target.timeout if target else timeout, grace=grace,
                    target=target, error_bytes=max_error_bytes)
    # What is loaded now lives as long as the runner: out of the collector's full walks,
    # which would otherwise land between a claim and its command.
    gc.collect()
    gc.freeze()
    sys.exit(runner.run())


def _target(url: str, secret_file: str | None, with_job: bool, ca_file: str | None,
            timeout: float | None, concurrency: int) -> Any:
    """The ``--post`` target, its options checked (a usage error says what is wrong)."""
    from queuelog.worker.push import DEFAULT_TIMEOUT, PushTarget, SecretError, read_secret
    check_url("--post", url)
    signer = None
    if secret_file:
        try:
            signer = read_secret(secret_file)
            _warn_if_shared(secret_file, os.stat(secret_file).st_mode)
        except (OSError, SecretError) as exc:
            raise click.UsageError(f"--secret-file: {exc}") from None
    try:
        return PushTarget(url, signer=signer, with_job=with_job, ca_file=ca_file,
                          timeout=timeout or DEFAULT_TIMEOUT, concurrency=concurrency)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise click.UsageError(f"--ca-file: {exc}") from None


def check_url(option: str, url: str) -> None:
    """A usage error unless ``url`` is an http(s) URL httpx can send to.

    Else ``--url`` without a scheme was retried for ever, and one httpx cannot parse (a bad
    port, an unclosed ``[``, bytes that are not UTF-8) was a traceback at start.
    """
    import httpx
    if not url.lower().startswith(("http://", "https://")):
        raise click.UsageError(f"{option} needs an http:// or https:// URL, not {url!r}")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise click.UsageError(f"{option}: {url!r} is not a URL: {exc}") from None
    if not parsed.host:
        raise click.UsageError(f"{option}: {url!r} names no host")


def _warn_if_shared(path: str, mode: int) -> None:
    if mode & 0o077:
        print(f"queuelog work: warning: {path} is readable by other users; chmod 600 it",
              file=sys.stderr, flush=True)


def read_token(token_file: str | None, token: str | None) -> str:
    """The worker key: from the token file if one is named, else the given value."""
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as fh:
                mode = os.fstat(fh.fileno()).st_mode
                text = fh.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read the token file: {exc}") from None
        if not text:
            raise ValueError(f"the token file {token_file} is empty")
        _warn_if_shared(token_file, mode)
        return _key_text(text, f"the token file {token_file}")
    if token and token.strip():
        return _key_text(token.strip(), "QUEUELOG_TOKEN")
    raise ValueError("no token: give --token-file, or set QUEUELOG_TOKEN_FILE or QUEUELOG_TOKEN")


def _key_text(token: str, where: str) -> str:
    """``token`` if it can be a key (printable ASCII, no space); else ValueError naming
    ``where``. A byte-order mark or a second line was a traceback from httpx's header
    encoding (or a claim retried for ever), not a word about the file."""
    if token.isascii() and token.isprintable() and not any(c.isspace() for c in token):
        return token
    raise ValueError(f"{where} holds characters no API key has (a key is one line of "
                     "printable ASCII; a byte-order mark or a second line?)")

"""The client-only install (client/pyproject.toml) in a fresh venv: httpx, click, no server.

The wheels are built once from a copy of the tree (the checkout stays untouched), then a new
``python -m venv`` installs from those wheels alone (``--no-index``): what it can import is
exactly what a worker or producer host gets from ``pip install ./client``.
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from helpers import copy_source, once_per_run
from queuelog.client import Client
from server_process import Server, make_keys

# The distribution's own interpreter (Debian's python3.11 is a non-PIE executable, unlike the
# pyenv one the suite runs under): a worker host's likeliest Python.
DISTRIBUTION_PYTHON = pathlib.Path("/usr/bin/python3")

# The whole dependency closure of httpx and click: nothing of the server's may be in it.
CLIENT_CLOSURE = {"queuelog_client", "httpx", "httpcore", "h11", "anyio", "sniffio", "idna",
                  "certifi", "click", "typing_extensions", "exceptiongroup",
                  "standardwebhooks"}  # --post --secret-file: pure Python, no dependencies
SERVER_ONLY = ("flask", "sqlalchemy", "psycopg", "gunicorn", "alembic", "werkzeug", "jinja2")

# A producer on the client-only host: enqueue one job, print its id and the modules loaded.
PRODUCE = """
import sys
from queuelog.client import Client
with Client(sys.argv[1], sys.argv[2]) as c:
    job = c.enqueue("email", {"to": "ada@example.com"}, idempotency_key="from-client-host")
print(job["id"], job["status"], job["payload"]["to"])
"""
# A job's command: what the runner handed it (the payload, and no token in its environment).
HANDLER = """
import json, os, sys
payload = json.load(sys.stdin)
print(json.dumps({"to": payload["to"], "token_seen": "QUEUELOG_TOKEN" in os.environ}))
"""
IMPORTABLE = """
import importlib.util
print(sorted(m for m in {mods!r} if importlib.util.find_spec(m) is not None))
"""


def _run(args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A fresh venv with queuelog-client installed from a wheelhouse alone (the client's
    wheel and its dependencies', from pip's cache, else the package index); made once per
    test run."""
    def build(folder: pathlib.Path) -> None:
        src = copy_source(folder / "src", "queuelog", "client")
        wheelhouse, where = folder / "wheels", folder / "v"
        # No build isolation: setuptools and wheel come from this venv (the test extra), so
        # the build itself needs no index.
        proc = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation",
                     "-w", str(wheelhouse), str(src / "client")])
        assert proc.returncode == 0, proc.stderr
        # Without its own pip (ensurepip costs seconds): this venv's pip installs into it.
        assert _run([sys.executable, "-m", "venv", "--without-pip", str(where)]).returncode == 0
        proc = _run([sys.executable, "-m", "pip", "--python", str(where / "bin" / "python"),
                     "install", "-q", "--no-index", "--find-links", str(wheelhouse),
                     "queuelog-client"])
        assert proc.returncode == 0, proc.stderr
    return once_per_run(tmp_path_factory, "client-venv", build) / "v"


@pytest.fixture(scope="module")
def wheelhouse(venv: pathlib.Path) -> pathlib.Path:
    """The wheels ``venv`` was installed from, and only those."""
    return venv.parent / "wheels"


@pytest.fixture(scope="module")
def system_venv(wheelhouse: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
                ) -> pathlib.Path:
    """A venv of the distribution's ``/usr/bin/python3`` with the same client-only wheels
    (no index); made once per test run."""
    if not DISTRIBUTION_PYTHON.exists():
        pytest.skip(f"{DISTRIBUTION_PYTHON} does not exist on this host: no distribution "
                    "Python to run the worker under")

    def build(folder: pathlib.Path) -> None:
        where = folder / "v"
        made = _run([str(DISTRIBUTION_PYTHON), "-m", "venv", "--without-pip", str(where)])
        assert made.returncode == 0, made.stderr
        proc = _run([sys.executable, "-m", "pip", "--python", str(where / "bin" / "python"),
                     "install", "-q", "--no-index", "--find-links", str(wheelhouse),
                     "queuelog-client"])
        assert proc.returncode == 0, proc.stderr
    return once_per_run(tmp_path_factory, "system-client-venv", build) / "v"


def _env() -> dict[str, str]:
    """The environment without this checkout on the path: the venv's own install is used."""
    return {k: v for k, v in os.environ.items()
            if k != "PYTHONPATH" and not k.startswith("QUEUELOG_")}


def test_the_client_pulls_httpx_and_click_only(wheelhouse):
    names = {w.name.split("-")[0].lower() for w in wheelhouse.glob("*.whl")}
    assert {"queuelog_client", "httpx", "click", "standardwebhooks"} <= names
    (signer,) = wheelhouse.glob("standardwebhooks-*.whl")
    assert signer.name.endswith("-py3-none-any.whl")  # pure Python: any host's interpreter
    assert names <= CLIENT_CLOSURE, sorted(names - CLIENT_CLOSURE)


def test_the_server_is_not_importable_there(venv, tmp_path):
    code = IMPORTABLE.format(mods=SERVER_ONLY + ("queuelog.server", "queuelog.client"))
    proc = _run([str(venv / "bin" / "python"), "-c", code], env=_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['queuelog.client']"


def test_queuelog_work_help_and_the_server_commands_say_what_they_need(venv, tmp_path):
    queuelog = str(venv / "bin" / "queuelog")
    work = _run([queuelog, "work", "--help"], env=_env(), cwd=tmp_path)
    assert work.returncode == 0 and "--token-file" in work.stdout, work.stderr
    listed = _run([queuelog, "--help"], env=_env(), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    commands, server = listed.stdout.split("Server commands:")
    assert "\n  work " in commands and "\n  run " not in commands
    assert "need the full queuelog package" in " ".join(server.split())
    assert "\n  run " in server and "\n  init-db " in server
    run = _run([queuelog, "run"], env=_env(), cwd=tmp_path)
    assert run.returncode == 1 and "queuelog-client" in run.stderr
    assert "Traceback" not in run.stderr
    version = _run([queuelog, "--version"], env=_env(), cwd=tmp_path)
    assert version.stdout.strip() == "queuelog, version 0.1.0", version.stderr
    assert list(tmp_path.iterdir()) == []  # no instance folder, no database, no secret


def test_a_producer_enqueues_from_the_client_only_install(venv, tmp_path):
    db_url = f"sqlite:///{tmp_path / 'q.sqlite3'}"
    token = make_keys(db_url, {"billing": "producer"})["billing"]["Authorization"].split()[1]
    server = Server(db_url, str(tmp_path / "server.log"), workers=1, threads=2).start()
    try:
        url = f"http://127.0.0.1:{server.port}"
        proc = _run([str(venv / "bin" / "python"), "-c", PRODUCE, url, token],
                    env=_env(), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        job_id, status, to = proc.stdout.split()
        assert (status, to) == ("pending", "ada@example.com")
        again = _run([str(venv / "bin" / "python"), "-c", PRODUCE, url, token],
                     env=_env(), cwd=tmp_path)
        assert again.stdout.split()[0] == job_id  # the idempotent replay: one job
    finally:
        server.stop()


def test_queuelog_work_runs_a_job_under_the_distribution_python(system_venv, tmp_path):
    """Issue 35: under Debian's /usr/bin/python3, ``queuelog work`` exited 1 at every start
    (``ValueError: NULL pointer access`` scrubbing the token from its environment)."""
    config = (system_venv / "pyvenv.cfg").read_text()
    assert f"home = {DISTRIBUTION_PYTHON.parent}" in config, config
    db_url = f"sqlite:///{tmp_path / 'q.sqlite3'}"
    keys = make_keys(db_url, {"billing": "producer", "mailer": "worker"})
    tokens = {name: h["Authorization"].split()[1] for name, h in keys.items()}
    server = Server(db_url, str(tmp_path / "server.log"), workers=1, threads=4, env={
        "QUEUELOG_JOB_TYPES": json.dumps({"email": {}})}).start()
    url = f"http://127.0.0.1:{server.port}"
    log_path = tmp_path / "work.log"
    runner: subprocess.Popen[bytes] | None = None
    try:
        with Client(url, tokens["billing"]) as producer:
            job = producer.enqueue("email", {"to": "ada@example.com"})
            with open(log_path, "wb") as log:
                runner = subprocess.Popen(
                    [str(system_venv / "bin" / "queuelog"), "work", "--url", url, "--types",
                     "email", "--", str(system_venv / "bin" / "python"), "-c", HANDLER],
                    env={**_env(), "QUEUELOG_TOKEN": tokens["mailer"]}, cwd=tmp_path,
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
            deadline = time.monotonic() + 20
            while (now := producer.get(job["id"]))["status"] != "completed":
                assert runner.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, (now, log_path.read_text())
                time.sleep(0.05)
        assert now["result"] == {"to": "ada@example.com", "token_seen": False}
        try:  # root may read it despite PR_SET_DUMPABLE: the token's bytes are gone all the same
            seen = pathlib.Path(f"/proc/{runner.pid}/environ").read_bytes()
        except OSError:
            seen = b""
        assert tokens["mailer"].encode() not in seen
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=10) == 0, log_path.read_text()
        lines = log_path.read_text()
        assert f"job={job['id']} type=email attempt=1 outcome=completed" in lines, lines
        assert "Traceback" not in lines and "warning" not in lines, lines
    finally:
        if runner is not None and runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait(timeout=10)
        server.stop()


class _Hook:
    """A push target for the test below: records the one request, verifies its signature."""

    def __init__(self, secret: str) -> None:
        import http.server
        import threading

        from standardwebhooks import Webhook
        self.got: list[Any] = []
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.got.append((Webhook(secret).verify(body, dict(self.headers)),
                                 self.headers.get("Authorization")))
                out = b'{"delivered": true}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_queuelog_work_post_signs_under_the_distribution_python(system_venv, tmp_path):
    """Issue 38: ``--post --secret-file`` from the client-only install, Debian's python3."""
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    (tmp_path / "secret").write_text(secret)
    (tmp_path / "secret").chmod(0o600)
    db_url = f"sqlite:///{tmp_path / 'q.sqlite3'}"
    keys = make_keys(db_url, {"billing": "producer", "hooks": "worker"})
    tokens = {name: h["Authorization"].split()[1] for name, h in keys.items()}
    server = Server(db_url, str(tmp_path / "server.log"), workers=1, threads=4, env={
        "QUEUELOG_JOB_TYPES": json.dumps({"hook": {}})}).start()
    hook = _Hook(secret)
    url = f"http://127.0.0.1:{server.port}"
    runner: subprocess.Popen[bytes] | None = None
    try:
        with Client(url, tokens["billing"]) as producer:
            job = producer.enqueue("hook", {"to": "ada@example.com"})
            with open(tmp_path / "work.log", "wb") as log:
                runner = subprocess.Popen(
                    [str(system_venv / "bin" / "queuelog"), "work", "--url", url, "--types",
                     "hook", "--post", hook.url, "--secret-file", str(tmp_path / "secret")],
                    env={**_env(), "QUEUELOG_TOKEN": tokens["hooks"]}, cwd=tmp_path,
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
            deadline = time.monotonic() + 20
            while (now := producer.get(job["id"]))["status"] != "completed":
                assert runner.poll() is None, (tmp_path / "work.log").read_text()
                assert time.monotonic() < deadline, now
                time.sleep(0.05)
        assert now["result"] == {"delivered": True}
        assert hook.got == [({"to": "ada@example.com"}, None)]  # verified; no token sent
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=10) == 0
    finally:
        hook.server.shutdown()
        server.stop()
        if runner is not None and runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)

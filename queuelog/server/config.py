"""Configuration defaults and the loading order: defaults, instance/config.py, QUEUELOG_* env."""
from __future__ import annotations

import difflib
import json
import os
import secrets
import sys
import tempfile
from typing import Any

from flask import Flask

from queuelog.model import limits as flow
from queuelog.model.problems import ConfigError
from queuelog.server.requests.check import FieldErrors
from queuelog.server.requests.parse import is_name

__all__ = ["DEFAULTS", "check", "load", "require_number", "type_limits"]

DEFAULTS: dict[str, Any] = {
    "JOB_TYPES": {"email": {}, "pdf": {}, "sync": {}},
    "SCHEDULES": {},             # recurring jobs (schedules.py); each checked at start
    "MAX_PAYLOAD_BYTES": 65536,
    "MAX_CONTENT_LENGTH": 1048576,
    "MAX_ERROR_BYTES": 8192,
    "LEASE_SECONDS": 300,
    "RETRY_BACKOFF_SECONDS": 2,
    "RETRY_BACKOFF_MAX_SECONDS": 3600,
    "SQLITE_SYNCHRONOUS": "FULL",
    "WRITE_LOCK_WAIT_SECONDS": 5,  # SQLite: a write waits this long for the lock, then 503
    "DEFAULT_MAX_RETRIES": 3,
    "COUNT_CAP": 10000,          # dashboard counts stop here ("10,000+")
    "AUTH_CACHE_SECONDS": 5,     # how long a checked password is trusted
    "BOOTSTRAP_ADMIN": True,     # create user admin when there is no user
    "PASSWORD_HASH_SLOTS": 1,    # password hashes one process computes at once
    "PASSWORD_HASH_WAIT_SECONDS": 0.1,  # a sign-in waits this long for a slot, then 429
    "PROXY_COUNT": 0,            # reverse proxies in front whose X-Forwarded-For/-Proto count
    "LONG_POLL_SLOTS": 4,        # claims that may wait at once, per process
    "LONG_POLL_LOOK_SECONDS": 1,  # a waiting claim's safety-net look (wake-ups come first)
    "MAX_BATCH": 500,            # items in one batch request
    # Automatic retention (retention.py): off until a status is given a duration.
    "RETENTION_COMPLETED": None,
    "RETENTION_FAILED": None,
    "RETENTION_CANCELLED": None,
    "RETENTION_INTERVAL_SECONDS": 60,  # at most one purge round per process this often
    "RETENTION_BATCH": 500,            # jobs per status deleted in one round
}


# QUEUELOG_* variables that are not settings: the worker runner's, its jobs' and the tests'.
NOT_SETTINGS = frozenset({"QUEUELOG_URL", "QUEUELOG_TOKEN", "QUEUELOG_TOKEN_FILE",
                          "QUEUELOG_TEST_DATABASE_URL", "QUEUELOG_JOB_ID", "QUEUELOG_JOB_TYPE",
                          "QUEUELOG_JOB_ATTEMPT", "QUEUELOG_JOB_PRIORITY",
                          # queuelog/worker/progress.py: a command's files, when it has them
                          "QUEUELOG_JOB_PARENTS_FILE", "QUEUELOG_PROGRESS_FILE"})


# Settings that are whole numbers, with the range each must fall in.
WHOLE_NUMBERS: dict[str, tuple[int, int]] = {
    "MAX_PAYLOAD_BYTES": (1, 2**31 - 1),
    "MAX_CONTENT_LENGTH": (1, 2**40),
    "MAX_ERROR_BYTES": (1, 2**31 - 1),
    "LEASE_SECONDS": (1, 43_200),           # the range a claim's lease_seconds has
    "DEFAULT_MAX_RETRIES": (0, 25),         # the range a request's max_retries has
    "COUNT_CAP": (1, 10**9),
    "PASSWORD_HASH_SLOTS": (1, 1024),
    "PROXY_COUNT": (0, 10),
    "LONG_POLL_SLOTS": (0, 10_000),         # 0: no claim waits (each answers at once)
    "LONG_POLL_LOOK_SECONDS": (1, 3600),
    "MAX_BATCH": (1, 100_000),
}


def load(app: Flask, test_config: dict[str, Any] | None) -> None:
    """Fill ``app.config`` in order: defaults, instance config, environment, test config."""
    app.config.from_mapping(DEFAULTS)
    app.config["DATABASE_URL"] = "sqlite:///" + os.path.join(app.instance_path,
                                                            "queuelog.sqlite3")
    if test_config is None:
        app.config.from_pyfile("config.py", silent=True)
        app.config.from_prefixed_env("QUEUELOG")
        secret_as_text(app.config, os.environ)
        warn_unknown_variables(os.environ)
    else:
        app.config.from_mapping(test_config)
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = instance_secret(app.instance_path)
    if not isinstance(app.config["SECRET_KEY"], (str, bytes)):
        # Signing (sessions, CSRF, the password cache) takes text or bytes; anything else
        # failed every sign-in with a 500 instead of stopping the start.
        raise ConfigError("SECRET_KEY must be a string (or bytes), not "
                          f"{type(app.config['SECRET_KEY']).__name__}")
    check(app.config)


def secret_as_text(config: Any, environ: Any) -> None:
    """``QUEUELOG_SECRET_KEY`` as the text it is, when JSON made it something else.

    ``from_prefixed_env`` reads every value as JSON where it can: a key of digits (or
    ``true``) became a number, and every Basic sign-in and form then failed with a 500.
    A JSON string (``"..."``) stays as Flask reads it.
    """
    raw = environ.get("QUEUELOG_SECRET_KEY")
    if raw is not None and not isinstance(config.get("SECRET_KEY"), str):
        config["SECRET_KEY"] = raw


def known_settings() -> set[str]:
    """Every setting name queuelog, Flask or Flask-WTF reads."""
    return {*DEFAULTS, *Flask.default_config, "DATABASE_URL", "SECRET_KEY"}


def unknown_variables(environ: Any) -> list[tuple[str, str | None]]:
    """QUEUELOG_* variables naming no setting, each with the closest setting's variable."""
    known = known_settings()
    out = []
    for name in sorted(environ):
        if not name.startswith("QUEUELOG_") or name in NOT_SETTINGS:
            continue
        key = name[len("QUEUELOG_"):].split("__", 1)[0]  # QUEUELOG_JOB_TYPES__email: nested
        if key in known or key.startswith("WTF_"):
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
        out.append((name, "QUEUELOG_" + close[0] if close else None))
    return out


def warn_unknown_variables(environ: Any) -> None:
    """Say so on standard error: a typo like QUEUELOG_LEASE_SECOND is otherwise ignored."""
    for name, close in unknown_variables(environ):
        hint = f" (did you mean {close}?)" if close else ""
        print(f"queuelog: warning: {name} is not a queuelog setting; it is ignored{hint}",
              file=sys.stderr, flush=True)


def instance_secret(instance_path: str) -> str:
    """Read the instance's secret key, creating it once (race-free across processes)."""
    path = os.path.join(instance_path, "secret_key")
    if not os.path.exists(path):
        # Written whole to a temporary file, then hard-linked into place: link() fails if
        # the name exists, so the first process wins and no process ever reads a file that
        # exists but is not yet written (O_CREAT|O_EXCL then write() left that window open).
        fd, tmp = tempfile.mkstemp(prefix=".secret_key.", dir=instance_path)  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(secrets.token_hex(32) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another process won; read its key below
        finally:
            os.unlink(tmp)
    with open(path, encoding="ascii") as fh:
        key = fh.read().strip()
    if key:
        return key
    raise ConfigError(f"{path} is empty; delete it to have a new key generated")


def check(config: Any) -> None:
    """Fail at start-up, not at the first request, on a config that cannot work."""
    types = config["JOB_TYPES"]
    if not isinstance(types, dict) or not types:
        raise ConfigError("JOB_TYPES must be a non-empty mapping of type name to options")
    allowed = {"max_retries", "lease_seconds", "max_payload_bytes", *flow.FIELDS}
    for name, opts in types.items():
        if not isinstance(opts, dict) or set(opts) - allowed:
            raise ConfigError(f"JOB_TYPES[{name!r}] may set only {sorted(allowed)}")
    for key, (lo, hi) in WHOLE_NUMBERS.items():
        require_number(key, config[key], lo, hi)
    require_number("AUTH_CACHE_SECONDS", config["AUTH_CACHE_SECONDS"], 0, 3600, whole=False)
    require_number("WRITE_LOCK_WAIT_SECONDS", config["WRITE_LOCK_WAIT_SECONDS"], 0, 3600,
                   whole=False)
    require_number("PASSWORD_HASH_WAIT_SECONDS", config["PASSWORD_HASH_WAIT_SECONDS"], 0, 60,
                   whole=False)
    # Per-type options: (whole numbers only, lowest, highest); checked here so that a typo in
    # the config stops start-up instead of turning every enqueue of that type into a 500.
    limits = {"lease_seconds": (False, 1, 43_200), "max_retries": (True, 0, 25),
              "max_payload_bytes": (True, 1, 2**31 - 1)}
    for name, opts in types.items():
        if not is_name(name):
            raise ConfigError(f"JOB_TYPES: {name!r} is not a type name (1 to 100 characters)")
        for option, value in opts.items():
            if option in limits:
                whole, lo, hi = limits[option]
                require_number(f"JOB_TYPES[{name!r}][{option!r}]", value, lo, hi, whole=whole)
        type_limits(name, opts)
    # QUEUELOG_BOOTSTRAP_ADMIN=no is the string "no", which is true: the admin it refused
    # was made and its password printed. Only JSON's true and false (or 1 and 0) say which.
    if config["BOOTSTRAP_ADMIN"] not in (True, False):
        raise ConfigError("BOOTSTRAP_ADMIN must be true or false, not "
                          f"{config['BOOTSTRAP_ADMIN']!r}")
    # A zero or negative backoff would retry at once, in lockstep: the contract forbids both.
    base, cap = config["RETRY_BACKOFF_SECONDS"], config["RETRY_BACKOFF_MAX_SECONDS"]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in (base, cap)) \
            or not 0 < base <= cap:
        raise ConfigError("RETRY_BACKOFF_SECONDS must be > 0 and at most RETRY_BACKOFF_MAX_SECONDS")
    check_schedules(config)


SCHEDULE_OPTIONS = frozenset({"cron", "type", "payload", "priority", "max_retries", "timezone",
                              "catch_up"})
JOB_FIELDS = ("type", "payload", "priority", "max_retries")  # what a tick's job is made of
MAX_SCHEDULE_NAME = 100 - len("schedule:")  # its jobs' producer is "schedule:<name>"


def check_schedules(config: Any) -> None:
    """Each of ``SCHEDULES``: a name, a cron and zone, and a job ``POST /jobs`` would take."""
    from queuelog.server import cron
    from queuelog.server.requests.bodies import new_job
    from queuelog.server.requests.check import declared
    schedules = config["SCHEDULES"]
    if not isinstance(schedules, dict):
        raise ConfigError("SCHEDULES must be a mapping of schedule name to options")
    job = declared(new_job(config)) if schedules else None
    for name, opts in schedules.items():
        at = f"SCHEDULES[{name!r}]"
        if not is_name(name) or len(name) > MAX_SCHEDULE_NAME or "/" in name:
            raise ConfigError(f"{at}: a schedule name is 1 to {MAX_SCHEDULE_NAME} characters, "
                              "without '/'")
        if not isinstance(opts, dict) or not {"cron", "type"} <= set(opts) \
                or set(opts) - SCHEDULE_OPTIONS:
            raise ConfigError(f"{at} must set cron and type, and may set only "
                              f"{sorted(SCHEDULE_OPTIONS)}")
        try:
            cron.parse(opts["cron"], opts.get("timezone", "UTC"))
        except ValueError as exc:
            raise ConfigError(f"{at}: {exc}") from None
        if not isinstance(opts.get("catch_up", False), bool):
            raise ConfigError(f"{at}: catch_up must be true or false")
        errors = FieldErrors()
        assert job is not None
        job.check({k: opts[k] for k in JOB_FIELDS if k in opts}, errors)
        if not errors and len(json.dumps(opts.get("payload", {}), separators=(",", ":"))
                              .encode()) > _payload_limit(config, opts["type"]):
            errors.add("payload", "Larger than the type's payload limit as compact JSON.")
        for error in errors:
            raise ConfigError(f"{at}: its job would be refused: {error['field']}: "
                              f"{error['detail']}")


def _payload_limit(config: Any, job_type: str) -> int:
    return int(config["JOB_TYPES"][job_type].get("max_payload_bytes", config["MAX_PAYLOAD_BYTES"]))


def type_limits(name: str, opts: dict[str, Any]) -> flow.Limits:
    """The flow-control limits a type's options set; ConfigError with one line naming it."""
    try:
        return flow.from_options(opts)
    except ValueError as exc:
        raise ConfigError(f"JOB_TYPES[{name!r}]: {exc}") from None


def require_number(name: str, value: Any, lo: float, hi: float, *, whole: bool = True) -> None:
    """ConfigError unless ``value`` is a number (a whole one if ``whole``) in [lo, hi]."""
    kinds = (int,) if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not lo <= value <= hi:
        kind = "a whole number" if whole else "a number"
        raise ConfigError(f"{name} must be {kind} from {lo} to {hi}, not {value!r}")

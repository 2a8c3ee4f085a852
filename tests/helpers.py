"""Assertions and builders shared by the test modules."""
from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import pathlib
import shutil
import time
from typing import Any, Callable, Iterator

import pytest
from werkzeug.security import generate_password_hash

# For tests of request parsing and checks made before any SQL: running them on PostgreSQL too
# would only repeat them.
SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"])


def copy_source(dest: pathlib.Path, *folders: str) -> pathlib.Path:
    """The checkout's ``pyproject.toml``, ``README.md`` and ``folders`` (without bytecode)
    copied into a new ``dest``, to build a wheel from without touching the checkout."""
    root = pathlib.Path(__file__).resolve().parents[1]
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, dest / name)
    for name in folders:
        shutil.copytree(root / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str,
                 build: Callable[[pathlib.Path], None]) -> pathlib.Path:
    """A folder ``build`` fills once per test run, shared by every pytest-xdist worker.

    A session or module fixture runs once in each worker that needs it: the walk-through
    and the wheels took 6-11 s apiece (their setup in the suite), two or three times a
    run. The first worker builds under a lock, the others wait for it and read the result;
    nothing writes to it afterwards. Outside xdist the folder is this run's own.
    """
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    base = tmp_path_factory.getbasetemp()
    root = base.parent / f"shared-{run}" if run else base / "shared"
    root.mkdir(exist_ok=True)
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a worker's build that failed
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


def problem(resp: Any, status: int, slug: str | None = None) -> dict[str, Any]:
    """Assert an RFC 9457 answer with this status (and type suffix); return its body."""
    assert resp.status_code == status, resp.get_data(as_text=True)
    assert resp.mimetype == "application/problem+json"
    body = resp.get_json(force=True)
    assert set(body) >= {"type", "title", "status", "detail"}
    assert body["status"] == status and body["title"] and body["detail"] and body["type"]
    if slug is not None:
        assert body["type"].endswith(slug), body["type"]
    return body


def basic(username: str, password: str) -> dict[str, str]:
    """An HTTP Basic Authorization header."""
    raw = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"Authorization": f"Basic {raw}"}


def quick_hash(password: str) -> str:
    """A cheap salted hash, so tests do not spend their time in scrypt."""
    return generate_password_hash(password, "pbkdf2:sha256:1000")


def hash_checks(app: Any, cheap_dummy: bool = True) -> list[str]:
    """Give ``app`` hash slots that record every hash a password is checked against (the
    list returned); with ``cheap_dummy``, names that are no user are checked against a
    cheap dummy hash: the server's is scrypt (0.12-0.3 s apiece), which tests sending many
    made-up names spend most of their time in. tests/api/test_auth.py keeps the real one."""
    from queuelog.server.throttle import HashSlots

    class Recording(HashSlots):
        """The app's slots, recording each check's hash."""

        def check(self, password_hash: str, password: str) -> bool | None:
            checked.append(password_hash)
            return super().check(password_hash, password)

    checked: list[str] = []
    app.extensions["queuelog.hash_slots"] = Recording(
        app.config["PASSWORD_HASH_SLOTS"], app.config["PASSWORD_HASH_WAIT_SECONDS"],
        quick_hash("queuelog-timing-equalizer") if cheap_dummy else None)
    return checked


def password_clock(app: Any, start: float = 1000.0) -> list[float]:
    """Give ``app`` a password cache that keeps time by the returned one-item list (seconds),
    which the test moves: ``now[0] += AUTH_CACHE_SECONDS``."""
    from queuelog.server import auth
    now = [start]
    app.extensions["queuelog.password_cache"] = auth.password_cache(app, timer=lambda: now[0])
    return now


REFUSED = "refused by the test"


@contextlib.contextmanager
def refused_writes(store: Any, table: str, op: str = "INSERT",
                   conflict: bool = False) -> Iterator[None]:
    """While open, the database refuses every ``op`` on ``table`` (a trigger raising
    ``REFUSED``, both backends): a fault in the database itself, not in queuelog's code.
    SQLite's refusal is an IntegrityError; PostgreSQL's one too with ``conflict`` (as a
    unique key's), else a raised exception (an InternalError)."""
    name = f"test_refuse_{table}_{op.lower()}"
    if store.engine.dialect.name == "postgresql":
        code = " USING ERRCODE = 'unique_violation'" if conflict else ""
        make = [f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN RAISE EXCEPTION '{REFUSED}'{code}; END $$",
                f"CREATE TRIGGER {name} BEFORE {op} ON {table} FOR EACH ROW "
                f"EXECUTE FUNCTION {name}()"]
        drop = [f"DROP TRIGGER {name} ON {table}", f"DROP FUNCTION {name}()"]
    else:
        make = [f"CREATE TRIGGER {name} BEFORE {op} ON {table} "
                f"BEGIN SELECT RAISE(ABORT, '{REFUSED}'); END"]
        drop = [f"DROP TRIGGER {name}"]
    from sqlalchemy import text
    with store.engine.begin() as conn:
        for statement in make:
            conn.execute(text(statement))
    try:
        yield
    finally:
        with store.engine.begin() as conn:
            for statement in drop:
                conn.execute(text(statement))


@contextlib.contextmanager
def sent_statements(target: Any, match: str | Callable[[str, Any], bool],
                    then: Callable[[Any, str], None] | None = None, *,
                    before: bool = False) -> Iterator[list[str]]:
    """While open, each statement sent through ``target`` (an engine, or
    ``sqlalchemy.engine.Engine``: every engine) that ``match`` fits (a text it contains, or
    a predicate of its text and parameters) is recorded in the list yielded, and
    ``then(connection, statement)`` runs in the sending thread once it has run, or with
    ``before`` as it is about to be sent. SQLAlchemy's own event hook, which queuelog's
    prepared statements tell too: no queuelog code is patched."""
    from sqlalchemy import event
    seen: list[str] = []
    hook = "before_cursor_execute" if before else "after_cursor_execute"

    def watch(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if match in statement if isinstance(match, str) else match(statement, parameters):
            seen.append(statement)
            if then is not None:
                then(conn, statement)
    event.listen(target, hook, watch)
    try:
        yield seen
    finally:
        event.remove(target, hook, watch)


def failing_statements(target: Any, match: str) -> contextlib.AbstractContextManager[list[str]]:
    """While open, each statement containing ``match`` sent through ``target`` (as
    ``sent_statements``) fails as a database gone would, before it reaches the database:
    SQLite's "disk I/O error", PostgreSQL's lost connection (each driver's
    OperationalError); the list holds the statements failed."""
    import sqlite3

    from sqlalchemy import exc as sa_exc

    def fail(conn: Any, statement: str) -> None:
        if conn.dialect.name == "postgresql":
            import psycopg
            lost: Exception = psycopg.OperationalError("server closed the connection")
        else:
            lost = sqlite3.OperationalError("disk I/O error")
            lost.sqlite_errorcode = sqlite3.SQLITE_IOERR  # type: ignore[attr-defined]
        raise sa_exc.OperationalError(statement, {}, lost)
    return sent_statements(target, match, fail, before=True)


@contextlib.contextmanager
def lost_answer(app: Any, method: str, path: str) -> Iterator[list[int]]:
    """While open, the first request ``method path`` runs to its end (its view committed
    and answered, the status recorded in the list yielded) and its answer is dropped: the
    client gets ConnectionResetError, as when the connection breaks after the server's
    commit. A WSGI middleware around ``app.wsgi_app``, Flask's way to wrap an app."""
    inner = app.wsgi_app
    answered: list[int] = []

    def middleware(environ: dict[str, Any], start_response: Any) -> Any:
        if answered or (environ["REQUEST_METHOD"], environ["PATH_INFO"]) != (method, path):
            return inner(environ, start_response)
        status: list[str] = []
        body = inner(environ, lambda s, headers, exc_info=None: status.append(s))
        try:
            b"".join(body)  # the whole answer made, as a server would send it
        finally:
            getattr(body, "close", lambda: None)()
        answered.append(int(status[0].split()[0]))
        raise ConnectionResetError("the connection broke before the answer arrived")
    app.wsgi_app = middleware
    try:
        yield answered
    finally:
        app.wsgi_app = inner


def add_user(store: Any, username: str, role: str, password: str = "pw-123456") -> dict[str, str]:
    """Create a user with a cheap hash; return its Basic Authorization header."""
    store.accounts.create_user(username, quick_hash(password), role)
    return basic(username, password)


def post_job(client: Any, headers: dict[str, str], type: str = "email", **body: Any) -> Any:
    """POST /jobs (type email unless given); return the response, closed as a server closes it."""
    with client.post("/jobs", json={"type": type, **body}, headers=headers) as resp:
        resp.get_data()  # read it before the close, so .json still works afterwards
        return resp


def enqueue(client: Any, headers: dict[str, str], type: str = "email", *, expect: int = 201,
            **body: Any) -> dict[str, Any]:
    """POST /jobs, assert the status (201: created) and return the job."""
    resp = post_job(client, headers, type, **body)
    assert resp.status_code == expect, resp.get_data(as_text=True)
    return resp.json  # type: ignore[no-any-return]


# -- jobs straight through the store, and the API's claim -------------------------------
def add_job(store: Any, type: str = "email", *, producer: str = "billing", priority: int = 0,
            max_retries: int = 3, payload: dict[str, Any] | str | None = None,
            delay: float | None = None, run_at: int | None = None,
            key: str | None = None) -> Any:
    """Enqueue one new job straight through the store; return the Job."""
    from queuelog.server.store import NewJob
    text = payload if isinstance(payload, str) else json.dumps(
        {"n": 1} if payload is None else payload)
    job, created = store.enqueue(NewJob(producer=producer, type=type, payload_json=text,
                                        priority=priority, max_retries=max_retries,
                                        run_at=run_at, delay_seconds=delay,
                                        idempotency_key=key,
                                        request_hash="h" if key else None))
    assert created
    return job


def add(store: Any, type: str = "email", **fields: Any) -> int:
    """Enqueue one new job straight through the store (``add_job``'s fields); return its id."""
    return add_job(store, type, **fields).id  # type: ignore[no-any-return]


def failed(store: Any, type: str = "email", *, error: str = "boom", worker: str = "mailer-1",
           **fields: Any) -> int:
    """A job claimed by ``worker`` and failed for good with ``error``; return its id."""
    job_id = add(store, type, **fields)
    job = store.claim(worker, types=[type])
    assert job is not None and job.id == job_id
    store.fail(job_id, worker, job.attempt, error, retry=False)
    return job_id


def claim(client: Any, headers: dict[str, str], **body: Any) -> Any:
    """POST /jobs/claim with an optional body; return the response."""
    return client.post("/jobs/claim", json=body or None, headers=headers)


def until(check: Callable[[], bool], timeout: float = 10) -> None:
    """Wait (real time: other threads are working) until ``check`` holds."""
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert check(), "condition not reached in time"


def minute_rows(store: Any) -> dict[tuple[int, str, str], tuple[int, int]]:
    """The per-minute rollup of ended attempts (migration 0015): (minute_at, type, worker)
    -> (completed, failed), every shard added up."""
    from sqlalchemy import func, select

    from queuelog.server.store.tables import attempt_minutes
    m = attempt_minutes.c
    with store.engine.connect() as conn:
        return {(int(at), t, w): (int(c), int(f)) for at, t, w, c, f in conn.execute(
            select(m.minute_at, m.type, m.worker_id, func.sum(m.completed), func.sum(m.failed))
            .group_by(m.minute_at, m.type, m.worker_id))}

"""Database faults: 503 unavailable with Retry-After, never a 500; nothing half-written; healing."""
from __future__ import annotations

import collections
import http.client
import logging
import os
import sqlite3
import threading
import time
from typing import Any, Iterator

import psycopg
import pytest
from sqlalchemy import event, exc as sa_exc
from sqlalchemy.engine import make_url

from helpers import SQLITE_ONLY, failing_statements, lost_answer, problem
from queuelog.server.errors import is_unavailable
from queuelog.server.store.tables import metadata
from server_process import Server, make_keys, request, table_rows
from tcp_proxy import TcpProxy

PG_ONLY = pytest.mark.parametrize("backend", [pytest.param("postgresql",
                                                           marks=pytest.mark.postgresql)])
TABLES = [t.name for t in metadata.sorted_tables]


# -- which errors mean "the database is unavailable" -------------------------------------
def _sqlite_error(sql: str, *setup: str) -> sqlite3.Error:
    conn = sqlite3.connect(":memory:")
    for statement in setup:
        conn.execute(statement)
    try:
        conn.execute(sql)
    except sqlite3.Error as err:
        return err
    finally:
        conn.close()
    raise AssertionError(f"{sql!r} did not fail")


@pytest.mark.parametrize("err, expected", [
    (psycopg.OperationalError("server closed the connection unexpectedly"), True),
    (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), True),
    (psycopg.errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"),
     True),
    (psycopg.errors.UniqueViolation("duplicate key"), False),
    (psycopg.errors.UndefinedTable("relation does not exist"), False),
    (sa_exc.TimeoutError("QueuePool limit reached"), True),
    (sqlite3.OperationalError("database is locked"), True),
    (sqlite3.OperationalError("disk I/O error"), True),
    (sqlite3.OperationalError("database or disk is full"), True),
    (sqlite3.OperationalError("unable to open database file"), True),
    (sqlite3.OperationalError("attempt to write a readonly database"), True),
    (ValueError("database is locked"), False),
    (RuntimeError("boom"), False),
])
def test_errors_that_mean_the_database_is_unavailable(err, expected):
    assert is_unavailable(err) is expected
    wrapped = sa_exc.OperationalError("SELECT 1", {}, err) if isinstance(
        err, (sqlite3.Error, psycopg.Error)) else err
    assert is_unavailable(wrapped) is expected


def test_sqlite_errors_are_told_apart_by_their_code():
    # Real errors carry sqlite_errorcode: a missing table or bad SQL is OperationalError too.
    assert not is_unavailable(_sqlite_error("SELECT * FROM nowhere"))
    assert not is_unavailable(_sqlite_error("SELEC 1"))
    assert is_unavailable(_sqlite_error("CREATE TABLE t (x)", "PRAGMA query_only=1"))
    disconnected = sa_exc.DBAPIError("SELECT 1", {}, Exception("gone"),
                                     connection_invalidated=True)
    assert is_unavailable(disconnected)


# -- SQLite: a database that cannot be written, or is gone --------------------------------
@pytest.fixture
def on_connect(store: Any) -> Iterator[Any]:
    """Run PRAGMAs on every new connection of the app's engine (the pool is emptied now)."""
    pragmas: list[str] = []

    def apply(dbapi_conn: Any, _record: Any) -> None:
        for pragma in pragmas:
            dbapi_conn.execute(pragma)

    event.listen(store.engine, "connect", apply)
    yield lambda *more: (pragmas.extend(more), store.engine.dispose())
    event.remove(store.engine, "connect", apply)
    store.engine.dispose()


def _snapshot(store: Any) -> dict[str, list[Any]]:
    """Every row of every table, to show that a failed request changed nothing."""
    with store.engine.connect() as conn:
        return {t: sorted(map(tuple, conn.exec_driver_sql(f"SELECT * FROM {t}").all()))
                for t in TABLES}


def _unavailable(resp: Any) -> dict[str, Any]:
    body = problem(resp, 503, "unavailable")
    assert resp.headers["Retry-After"] == "1"
    return body


@SQLITE_ONLY
def test_sqlite_database_full_is_503_and_writes_nothing(client, store, producer, worker,
                                                        on_connect, caplog):
    held = client.post("/jobs", json={"type": "email"}, headers=producer).json
    client.post("/jobs/claim", headers=worker)
    with store.engine.connect() as conn:
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
    before = _snapshot(store)
    on_connect(f"PRAGMA max_page_count={pages}")  # not one page more: SQLITE_FULL
    big = {"type": "email", "payload": {"blob": "x" * 60_000}}
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            _unavailable(client.post("/jobs", json=big, headers=producer))
        done = client.post(f"/jobs/{held['id']}/complete",
                           json={"attempt": 1, "result": {"blob": "y" * 60_000}},
                           headers=worker)
        _unavailable(done)
        assert _snapshot(store) == before  # nothing half-written: no job, no attempt row
        # Reads still work, and the first request that succeeds ends the incident.
        assert client.get(f"/jobs/{held['id']}", headers=worker).status_code == 200
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([m for m in warnings if "database unavailable" in m]) == 1, warnings
    assert "database or disk is full" in warnings[0]
    assert warnings[-1] == "database is back"
    assert not any(r.exc_info for r in caplog.records)  # no traceback per request


@SQLITE_ONLY
def test_sqlite_read_only_database_is_503_for_every_write(client, store, producer, worker,
                                                          admin, on_connect):
    pending = client.post("/jobs", json={"type": "email"}, headers=producer).json
    running = client.post("/jobs", json={"type": "pdf"}, headers=producer).json
    assert client.post("/jobs/claim", json={"types": ["pdf"]}, headers=worker).json[
        "id"] == running["id"]
    before = _snapshot(store)
    # query_only gives SQLITE_READONLY: what a read-only file or mount gives, even to root.
    on_connect("PRAGMA query_only=1")
    _unavailable(client.post("/jobs", json={"type": "email"}, headers=producer))
    _unavailable(client.post("/jobs/claim", headers=worker))
    _unavailable(client.post(f"/jobs/{running['id']}/heartbeat", json={"attempt": 1},
                             headers=worker))
    _unavailable(client.post(f"/jobs/{running['id']}/complete", json={"attempt": 1},
                             headers=worker))
    _unavailable(client.post(f"/jobs/{running['id']}/fail", json={"attempt": 1, "error": "e"},
                             headers=worker))
    _unavailable(client.post(f"/jobs/{pending['id']}/cancel", headers=producer))
    assert _snapshot(store) == before
    assert client.get("/jobs", headers=admin).status_code == 200


@SQLITE_ONLY
def test_sqlite_locked_past_the_busy_timeout_is_503(client, store, producer, on_connect,
                                                    db_url):
    on_connect("PRAGMA busy_timeout=50")
    path = make_url(db_url).database
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        before = _snapshot(store)
        body = _unavailable(client.post("/jobs", json={"type": "email"}, headers=producer))
        assert "idempotency key" in body["detail"]  # says what a producer should do
        assert _snapshot(store) == before
    finally:
        blocker.rollback()
        blocker.close()
    assert client.post("/jobs", json={"type": "email"}, headers=producer).status_code == 201


@SQLITE_ONLY
def test_sqlite_database_gone_answers_503_everywhere_then_heals(app, client, store, producer,
                                                                make_user, db_url, tmp_path,
                                                                caplog):
    viewer = make_user("vera", "viewer")
    path = make_url(db_url).database
    aside = tmp_path / "aside"
    aside.mkdir()
    store.engine.dispose()  # pooled connections would keep the moved file open
    files = [suffix for suffix in ("", "-wal", "-shm") if os.path.exists(path + suffix)]
    for suffix in files:
        os.rename(path + suffix, aside / f"db{suffix}")
    os.mkdir(path)  # a directory where the file was: opening it fails, even as root
    try:
        with caplog.at_level(logging.WARNING):
            _unavailable(client.post("/jobs", json={"type": "email"}, headers=producer))
            _unavailable(client.get("/healthz"))
            page = client.get("/ui/", headers=viewer)
            assert page.status_code == 503 and page.mimetype == "text/html"
            assert page.headers["Retry-After"] == "1"
            assert "Database unavailable" in page.get_data(as_text=True)
            assert page.headers["Content-Security-Policy"].startswith("default-src 'self'")
    finally:
        os.rmdir(path)
        for suffix in files:
            os.rename(aside / f"db{suffix}", path + suffix)
    with caplog.at_level(logging.WARNING):
        assert client.get("/healthz").json == {"status": "ok"}
        assert client.post("/jobs", json={"type": "email"}, headers=producer).status_code == 201
    lines = [r.getMessage() for r in caplog.records if r.name == app.logger.name]
    assert lines[0].startswith("database unavailable (OperationalError: unable to open"), lines
    assert lines[1:] == ["database is back"]
    assert not any(r.exc_info for r in caplog.records)


# -- PostgreSQL: connections dropped, the server refusing ---------------------------------
@pytest.fixture
def proxy(db_url: str) -> Iterator[TcpProxy]:
    """A TCP forwarder between the app and PostgreSQL."""
    url = make_url(db_url)
    forwarder = TcpProxy(url.host or "127.0.0.1", url.port or 5432).start()
    yield forwarder
    forwarder.close()


@pytest.fixture
def config(backend: str, db_url: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """On PostgreSQL the app reaches the database through the proxy."""
    if backend != "postgresql":
        return {}
    return {"DATABASE_URL": _through(db_url, request.getfixturevalue("proxy"))}


def _through(db_url: str, proxy: TcpProxy) -> str:
    return make_url(db_url).set(host="127.0.0.1", port=proxy.port).render_as_string(
        hide_password=False)


@PG_ONLY
def test_postgresql_dropped_connections_cost_no_503_the_pool_is_fresh(client, store, proxy,
                                                                     admin):
    # Four idle connections in the pool, then every one of them cut.
    held = [store.engine.connect() for _ in range(4)]
    for conn in held:
        conn.close()
    assert proxy.drop_all() >= 4
    statuses = [client.get("/jobs", headers=admin).status_code for _ in range(6)]
    # A connection closed while idle is seen closed at checkout, before anything is sent on
    # it (store/liveness.py, no pre-ping round trip), and replaced: no request meets it.
    assert statuses == [200] * 6, statuses


@PG_ONLY
def test_postgresql_down_is_503_everywhere_and_heals_by_itself(app, client, proxy, producer,
                                                               make_user, caplog):
    viewer = make_user("vera", "viewer")
    proxy.refusing = True
    proxy.drop_all()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            _unavailable(client.post("/jobs", json={"type": "email"}, headers=producer))
        assert client.get("/healthz").status_code == 503
        page = client.get("/ui/", headers=viewer)
        assert page.status_code == 503 and "Database unavailable" in page.get_data(as_text=True)
        proxy.refusing = False
        assert client.get("/healthz").json == {"status": "ok"}
        assert client.post("/jobs", json={"type": "email"}, headers=producer).status_code == 201
    lines = [r.getMessage() for r in caplog.records if r.name == app.logger.name]
    assert len(lines) == 2 and lines[0].startswith("database unavailable ("), lines
    assert lines[1] == "database is back"
    assert not any(r.exc_info for r in caplog.records)


# -- a live gunicorn on PostgreSQL whose connections keep being cut under load -------------
PRODUCERS, WORKERS = 4, 2
NETWORK_ERRORS = (OSError, http.client.HTTPException)


class _Load:
    """The clients' shared tally: every answer's status, acknowledged keys, worker checks."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.lock = threading.Lock()
        self.statuses: collections.Counter[tuple[str, int]] = collections.Counter()
        self.acked: dict[str, int] = {}          # idempotency key -> job id
        self.completed: list[int] = []
        self.checked_409: list[tuple[int, str]] = []   # (job id, outcome in attempts)
        self.crashed: list[str] = []
        self.stop = threading.Event()
        self.deadline = time.monotonic() + 60

    def call(self, conn: list[Any], what: str, method: str, path: str, body: Any,
             headers: dict[str, str]) -> tuple[int, Any]:
        """One request until answered (a dropped TCP connection to gunicorn is retried)."""
        while time.monotonic() < self.deadline:
            conn[0] = conn[0] or http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
            try:
                status, data = request(self.port, method, path, body, headers, conn=conn[0])
            except NETWORK_ERRORS:
                conn[0].close()
                conn[0] = None
                continue
            with self.lock:
                self.statuses[(what, status)] += 1
            return status, data
        raise AssertionError(f"{what}: no answer before the deadline")

    def read(self, conn: list[Any], job_id: int, headers: dict[str, str]) -> dict[str, Any]:
        """GET /jobs/{id}, retried through 503s."""
        while True:
            status, seen = self.call(conn, "read", "GET", f"/jobs/{job_id}", None, headers)
            if status == 200:
                return seen  # type: ignore[no-any-return]
            assert status == 503, (status, seen)
            time.sleep(0.05)

    def run(self, target: Any, *args: Any) -> threading.Thread:
        """A client thread whose exception fails the test instead of vanishing."""
        def guarded() -> None:
            try:
                target(*args)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                with self.lock:
                    self.crashed.append(repr(exc))
        return threading.Thread(target=guarded)

    def produce(self, c: int, headers: dict[str, str]) -> None:
        """Enqueue with a fresh key each time; retry each key until it is acknowledged."""
        conn: list[Any] = [None]
        n = 0
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            key = f"p{c}-{n}"
            n += 1
            while time.monotonic() < self.deadline:
                status, job = self.call(conn, "enqueue", "POST", "/jobs",
                                        {"type": "email", "idempotency_key": key}, headers)
                if status in (200, 201):
                    with self.lock:
                        self.acked[key] = job["id"]
                    break
                time.sleep(0.05 if status == 503 else 0)  # Retry-After, shortened for tests
                if status != 503:
                    return  # a 500 or another surprise: counted, and this client stops

    def work(self, headers: dict[str, str]) -> None:
        """Claim and complete; a complete that got 503 is retried until 200 or 409."""
        conn: list[Any] = [None]
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            status, job = self.call(conn, "claim", "POST", "/jobs/claim",
                                    {"wait": 0.5, "lease_seconds": 60}, headers)
            if status != 200:
                time.sleep(0.05 if status == 503 else 0)
                continue
            path = f"/jobs/{job['id']}/complete"
            while time.monotonic() < self.deadline:
                status, done = self.call(conn, "complete", "POST", path,
                                         {"attempt": job["attempt"]}, headers)
                if status == 200:
                    with self.lock:
                        self.completed.append(job["id"])
                    break
                if status == 409:
                    # An earlier try landed without its answer: the history says so.
                    assert done["type"].endswith("wrong-state"), done
                    seen = self.read(conn, job["id"], headers)
                    outcome = [a["outcome"] for a in seen["attempts"]
                               if a["attempt"] == job["attempt"]]
                    with self.lock:
                        self.checked_409.append((job["id"], outcome[0]))
                    break
                if status != 503:
                    return
                time.sleep(0.05)


@pytest.mark.slow
@PG_ONLY
def test_postgresql_connections_cut_under_load_lose_nothing_and_heal(db_url, proxy, tmp_path):
    """Producers and workers run while every database connection is cut, again and again."""
    keys = make_keys(db_url, {"producer": "producer", "w1": "worker", "w2": "worker"})
    server = Server(_through(db_url, proxy), str(tmp_path / "server.log"), workers=2,
                    threads=8).start()
    load = _Load(server.port)
    threads = [load.run(load.produce, c, keys["producer"]) for c in range(PRODUCERS)]
    threads += [load.run(load.work, keys[f"w{w + 1}"]) for w in range(WORKERS)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(1)
        for n in range(12):  # cut everything every 0.3 s; once, refuse for a second too
            time.sleep(0.3)
            proxy.drop_all()
            if n == 6:
                proxy.refusing = True
                time.sleep(1)
                proxy.refusing = False
        time.sleep(1)  # calm: the last requests get through
        load.stop.set()
        for thread in threads:
            thread.join(timeout=70)
        # Each process meets its cut connections once more (a 503), then serves again. Which
        # process takes a new connection is the kernel's choice, so a process the load did not
        # reach after the last cut may give its one 503 late: count them across every probe.
        health: list[int] = []
        while len(health) < 16 and health[-3:] != [200, 200, 200]:  # bounded: 16 probes
            health.append(request(server.port, "GET", "/healthz")[0])
        fresh: list[int] = []
        while len(fresh) < 16 and len(fresh) - fresh.count(503) < 4:  # 4 answers, 503s retried
            fresh.append(request(server.port, "POST", "/jobs", {"type": "email"},
                                 {**keys["producer"], "Idempotency-Key": "after"})[0])
    finally:
        load.stop.set()
        server.stop()
    rows = table_rows(db_url, "SELECT id, idempotency_key FROM jobs")
    per_key = collections.Counter(r.idempotency_key for r in rows)
    log = server.log()
    print(f"\n[faults pg] connections cut {proxy.dropped}, answers {dict(load.statuses)}, "
          f"acknowledged {len(load.acked)}, jobs {len(rows)}, completed {len(load.completed)}, "
          f"complete retried into 409 {len(load.checked_409)}, "
          f"log lines 'unavailable' {log.count('database unavailable')}")
    assert not load.crashed, load.crashed
    assert not any(status >= 500 and status != 503 for _, status in load.statuses), load.statuses
    assert sum(n for (_, status), n in load.statuses.items() if status == 503) > 0
    assert all(per_key[key] == 1 for key in load.acked)  # every acknowledged job, once
    assert {r.id for r in rows if r.idempotency_key in load.acked} == set(load.acked.values())
    assert max(per_key.values()) == 1  # no key twice
    assert all(outcome == "completed" for _, outcome in load.checked_409), load.checked_409
    # No restart needed: at most one 503 per process (its pool renewed), then answers.
    assert health[-3:] == [200] * 3, health
    assert health.count(503) + fresh.count(503) <= server.workers, (health, fresh)
    assert fresh[-1] == 200 and 201 in fresh and set(fresh) <= {200, 201, 503}, fresh
    assert per_key["after"] == 1
    assert "Traceback" not in log


@PG_ONLY
def test_a_server_starting_while_postgresql_restarts_waits_for_it(db_url, proxy):
    """A server (a gunicorn worker booting, or re-booting after a crash) whose database is
    down for a moment waits for it: giving up would make gunicorn stop every worker ("Worker
    failed to boot"; seen under load while connections were cut). A command still says at
    once that the database does not answer (test_config)."""
    from queuelog import create_app
    proxy.refusing = True  # every connection accepted and closed at once
    back = threading.Timer(1.0, lambda: setattr(proxy, "refusing", False))
    back.start()
    started = time.monotonic()
    app = create_app({"TESTING": True, "DATABASE_URL": _through(db_url, proxy),
                      "SECRET_KEY": "x", "BOOTSTRAP_ADMIN": False})
    try:
        assert time.monotonic() - started >= 1.0
        assert app.test_client().get("/healthz").status_code == 200
    finally:
        back.cancel()
        app.extensions["queuelog.store"].close()


# -- the command line -----------------------------------------------------------------------
def _cli(tmp_path: Any, db_url: str, *args: str) -> Any:
    from click.testing import CliRunner

    from queuelog.cli import main
    env = {"QUEUELOG_DATABASE_URL": db_url, "QUEUELOG_SECRET_KEY": "x",
           "QUEUELOG_BOOTSTRAP_ADMIN": "false"}
    return CliRunner().invoke(main, list(args), env=env)


@SQLITE_ONLY
def test_cli_database_failing_mid_command_is_one_line_and_exit_1(store, db_url, tmp_path):
    from sqlalchemy.engine import Engine

    # A real SQLite I/O error cannot be made on demand; its exception can, on the key
    # list's read (every engine: the command makes its own).
    with failing_statements(Engine, "FROM api_keys") as failed:
        result = _cli(tmp_path, db_url, "keys", "list")
    assert failed
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: the database is unavailable (OperationalError: disk I/O error); try again "
        "when it is back (a change may or may not have been made)"]


def test_cli_database_gone_at_start_is_one_line_and_exit_1(tmp_path):
    result = _cli(tmp_path, f"sqlite:///{tmp_path}/missing/dir/q.sqlite3", "keys", "list")
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "the database does not answer" in lines[0], result.output


# -- a commit that landed, its answer lost: the client's retry is safe -----------------------
def test_a_complete_that_landed_but_whose_answer_was_lost_is_retried_into_409(
        app, client, store, producer, worker):
    job = client.post("/jobs", json={"type": "email"}, headers=producer).json
    claimed = client.post("/jobs/claim", headers=worker).json
    body = {"attempt": claimed["attempt"], "result": {"sent": True}}
    path = f"/jobs/{job['id']}/complete"
    with lost_answer(app, "POST", path) as answered, pytest.raises(ConnectionResetError):
        client.post(path, json=body, headers=worker)
    assert answered == [200]  # the server committed and answered; the client never heard
    retry = client.post(path, json=body, headers=worker)
    assert problem(retry, 409, "wrong-state")
    seen = client.get(f"/jobs/{job['id']}", headers=worker).json
    assert [(a["attempt"], a["outcome"]) for a in seen["attempts"]] == [(1, "completed")]
    assert seen["status"] == "completed" and seen["result"] == {"sent": True}


def test_an_enqueue_that_landed_but_whose_answer_was_lost_is_replayed_by_its_key(
        app, client, store, producer):
    body = {"type": "email", "payload": {"n": 1}, "idempotency_key": "k-1"}
    with lost_answer(app, "POST", "/jobs") as answered, pytest.raises(ConnectionResetError):
        client.post("/jobs", json=body, headers=producer)
    assert answered == [201]
    again = client.post("/jobs", json=body, headers=producer)
    assert again.status_code == 200 and again.json["idempotency_key"] == "k-1"
    assert len(store.list_jobs().jobs) == 1

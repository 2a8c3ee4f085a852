"""Shared fixtures: every backend-dependent test runs on SQLite and on PostgreSQL."""
from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import sqlite3
import sys
from typing import Any, Callable, Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from helpers import add_user, once_per_run
from queuelog import create_app
from queuelog.model.jobs import Priority
from queuelog.server.store.tables import job_count_deltas, job_counts, metadata
from queuelog.server.store import Store

# PYTHONDONTWRITEBYTECODE (set on some machines, this project's CI among them) made every
# process compile queuelog's source anew: 0.15-0.2 s CPU of each of the suite's hundreds of
# server and command starts. The suite's processes and their children write bytecode once.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

PG_URL = os.environ.get("QUEUELOG_TEST_DATABASE_URL")
PG_SKIP = ("PostgreSQL tests need QUEUELOG_TEST_DATABASE_URL "
           "(e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test); CI sets it")
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "postgresql: needs a PostgreSQL server")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Give every PostgreSQL skip one location, so ``-ra`` folds them into one line."""
    report = yield
    # A skip from a fixture is reported at each test's own line, and -ra prints one line per
    # distinct (file, line, reason): two hundred identical lines. One shared location folds them
    # into "SKIPPED [N] tests/conftest.py: <why>"; -v still names each test.
    if (report.skipped and not PG_URL and item.get_closest_marker("postgresql") is not None
            and isinstance(report.longrepr, tuple)):
        report.longrepr = (__file__, None, PG_SKIP)
    return report


class FakeClock:
    """A clock the tests move by hand: epoch microseconds, starting at a fixed instant."""

    def __init__(self, start_us: int = 1_780_000_000_000_000) -> None:
        self.now = start_us

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += int(seconds * 1_000_000)


def worker_database(url: str) -> str:
    """The database this test process uses: under pytest-xdist, one per worker.

    Every test empties the tables it uses, so two processes sharing one database would
    empty each other's; worker ``gw1`` gets ``<name>_gw1``, created on first use.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return url
    base = make_url(url)
    name = f"{base.database}_{worker}"
    engine = create_engine(base, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with engine.connect() as conn:
            exists = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                  {"n": name}).first()
            if exists is None:
                # A database name cannot be a bound parameter; this one is ours: the
                # configured name plus xdist's worker id (gw0, gw1, ...).
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    finally:
        engine.dispose()
    return base.set(database=name).render_as_string(hide_password=False)


# Held by the test process that uses a database, for its whole session (pg_ready).
RUN_LOCK = 7262099


@pytest.fixture(scope="session")
def pg_ready() -> Iterator[str]:
    """The PostgreSQL URL, its schema rebuilt through the migrations once per session.

    Two test runs at once on one server would use the same databases and empty each
    other's tables, failing at random: the second run is refused, saying why.
    """
    if not PG_URL:
        pytest.skip(PG_SKIP)
    url = worker_database(PG_URL)
    holder = create_engine(url, poolclass=NullPool).connect()
    if not holder.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": RUN_LOCK}).scalar():
        holder.close()
        pytest.fail(f"Another test run is using the database {make_url(url).database} "
                    "(its tables would be emptied under it): wait for it to end.",
                    pytrace=False)
    holder.commit()  # the session lock outlives the transaction: nothing left open
    try:
        yield _rebuilt(url)
    finally:
        holder.close()


def _rebuilt(url: str) -> str:
    """``url``, its schema dropped and made again through the migrations.

    Its commits are not waited for on the disk (``synchronous_commit``, for every
    connection to it, the servers' too): no test restarts PostgreSQL itself, and a commit
    is still durable against a client or server process killed, which the crash tests do.
    Each test commits dozens of times: a one-row commit took 0.34 ms here, 0.14 without.
    """
    engine = create_engine(url)
    with engine.begin() as conn:
        metadata.drop_all(conn)
        conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
        conn.exec_driver_sql(f'ALTER DATABASE "{make_url(url).database}" '
                             "SET synchronous_commit TO off")
    engine.dispose()
    store = Store(url)
    store.create_schema()
    store.close()
    return url


# Every table the migrations made, emptied before each test, and every sequence restarted
# (tests count on ids from 1). DELETE, not TRUNCATE: a TRUNCATE of the twelve tables took
# 55 ms (new files for each, synced at commit), DELETE and ALTER SEQUENCE 5 ms, on tables
# that hold a test's few rows. alembic_version keeps its row: the database stays at head.
# Children before parents; the count tables last, since deleting jobs fires the (PostgreSQL)
# triggers that write to them.
_DELETES = [f"DELETE FROM {t.name}" for t in sorted(reversed(metadata.sorted_tables),
                                                     key=lambda t: t in (job_counts, job_count_deltas))]
_PG_EMPTYING: dict[str, tuple[Any, str]] = {}


def _empty_pg(url: str) -> None:
    found = _PG_EMPTYING.get(url)
    if found is None:
        # One connection kept for the session: a new one cost PostgreSQL about 15 ms of CPU
        # here (a backend started and its caches filled), a thousand times a run. Pinged
        # first, since a test may cut every connection to the database.
        engine = create_engine(url, pool_size=1, pool_pre_ping=True)
        with engine.connect() as conn:
            sequences = conn.execute(text(
                "SELECT sequencename FROM pg_sequences WHERE schemaname = current_schema()"
            )).scalars().all()
        found = _PG_EMPTYING[url] = (engine, "; ".join(
            _DELETES + [f"ALTER SEQUENCE {name} RESTART" for name in sequences]))
    engine, sql = found
    with engine.begin() as conn:
        conn.exec_driver_sql(sql)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A SQLite file at the newest revision, built once a run; each test gets a copy of it."""
    def build(folder: pathlib.Path) -> None:
        path = folder / "queuelog.sqlite3"
        store = Store(f"sqlite:///{path}")
        store.create_schema()
        store.close()
        # One self-contained file (no -wal beside it), so a plain copy is the whole
        # database; the app turns WAL back on when it connects to the copy.
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.execute("PRAGMA journal_mode=DELETE")
        assert not path.with_name(path.name + "-wal").exists()
    return once_per_run(tmp_path_factory, "sqlite-template", build) / "queuelog.sqlite3"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend name: 'sqlite' or 'postgresql'."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def db_url(backend: str, tmp_path: Any, request: pytest.FixtureRequest) -> str:
    """A fresh, empty database of the current backend, at the newest revision."""
    if backend == "sqlite":
        path = tmp_path / "queuelog.sqlite3"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        os.chmod(path, 0o600)
        return f"sqlite:///{path}"
    url = request.getfixturevalue("pg_ready")
    _empty_pg(url)
    return url


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock; the ``app`` and ``store`` fixtures read it."""
    return FakeClock()


@pytest.fixture
def config() -> dict[str, Any]:
    """Extra config for the app under test; override or update in a test module."""
    return {}


@pytest.fixture
def app(db_url: str, clock: FakeClock, config: dict[str, Any], tmp_path: Any) -> Iterator[Any]:
    """The app on a fresh database, its store reading the fake clock."""
    application = create_app({"TESTING": True, "DATABASE_URL": db_url,
                              "SECRET_KEY": "test-secret", "BOOTSTRAP_ADMIN": False,
                              "WTF_CSRF_ENABLED": True, **config})
    store: Store = application.extensions["queuelog.store"]
    store.clock = clock
    yield application
    store.close()


@pytest.fixture
def runner(app: Any) -> Any:
    """Flask's CLI runner, bound to the test app."""
    return app.test_cli_runner()


@pytest.fixture
def store(app: Any) -> Store:
    """The app's store."""
    return app.extensions["queuelog.store"]  # type: ignore[no-any-return]


@pytest.fixture
def client(app: Any) -> Any:
    """A Flask test client."""
    return app.test_client()


@pytest.fixture
def make_key(store: Store) -> Callable[..., dict[str, str]]:
    """Create an API key; return the Authorization header for it."""
    def make(name: str, role: str, types: list[str] | None = None,
             max_priority: str = "medium") -> dict[str, str]:
        _, token = store.accounts.create_key(name, role, types=types,
                                             max_priority=int(Priority.from_label(max_priority)))
        return {"Authorization": f"Bearer {token}"}
    return make


@pytest.fixture
def make_user(store: Store) -> Callable[..., dict[str, str]]:
    """Create a user; return the Authorization header (HTTP Basic) for it."""
    def make(username: str, role: str, password: str = "correct horse battery") -> dict[str, str]:
        return add_user(store, username, role, password)
    return make


@pytest.fixture
def producer(make_key: Callable[..., dict[str, str]]) -> dict[str, str]:
    """A producer key allowed every type, up to medium priority."""
    return make_key("billing", "producer")


@pytest.fixture
def worker(make_key: Callable[..., dict[str, str]]) -> dict[str, str]:
    """A worker key named mailer-1."""
    return make_key("mailer-1", "worker")


@pytest.fixture
def admin(make_key: Callable[..., dict[str, str]]) -> dict[str, str]:
    """An admin API key."""
    return make_key("root", "admin")

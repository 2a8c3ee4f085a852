"""Shared fixtures: every backend-dependent test runs on SQLite and on PostgreSQL."""
from __future__ import annotations

import os
from typing import Any, Callable, Iterator

import pytest
from sqlalchemy import create_engine, text

from helpers import add_user
from queuelog import create_app
from queuelog.jobs import Priority
from queuelog.schema import metadata
from queuelog.store import Store

PG_URL = os.environ.get("QUEUELOG_TEST_DATABASE_URL")
PG_SKIP = ("PostgreSQL tests need QUEUELOG_TEST_DATABASE_URL "
           "(e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test); CI sets it")
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "postgresql: needs a PostgreSQL server")


class FakeClock:
    """A clock the tests move by hand: epoch microseconds, starting at a fixed instant."""

    def __init__(self, start_us: int = 1_780_000_000_000_000) -> None:
        self.now = start_us

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += int(seconds * 1_000_000)


@pytest.fixture(scope="session")
def pg_ready() -> str:
    """The PostgreSQL URL, with queuelog's tables dropped once per session."""
    if not PG_URL:
        pytest.skip(PG_SKIP)
    engine = create_engine(PG_URL)
    metadata.drop_all(engine)
    engine.dispose()
    return PG_URL


def _truncate_pg(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        metadata.create_all(conn)
        conn.execute(text("TRUNCATE jobs, job_attempts, api_keys, users, audit_events, "
                          "paused_types RESTART IDENTITY CASCADE"))
    engine.dispose()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend name: 'sqlite' or 'postgresql'."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def db_url(backend: str, tmp_path: Any, request: pytest.FixtureRequest) -> str:
    """A fresh, empty database of the current backend."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path}/queuelog.sqlite3"
    url = request.getfixturevalue("pg_ready")
    _truncate_pg(url)
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

"""Engine set-up: the one place that knows SQLite from PostgreSQL at connect time."""
from __future__ import annotations

import contextlib
import contextvars
import time
from typing import Any, Callable, Iterator

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from queuelog.server.config import ConfigError

Clock = Callable[[], int]


def system_clock() -> int:
    """Now, as epoch microseconds: the only clock the store reads."""
    return time.time_ns() // 1_000


def make_engine(url: str, *, sqlite_synchronous: str = "FULL", echo: bool = False) -> Engine:
    """Create the engine; on SQLite turn on WAL, a busy timeout and real transactions."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend not in {"sqlite", "postgresql"}:
        hint = " (write postgresql+psycopg://)" if backend == "postgres" else ""
        raise ConfigError(f"DATABASE_URL: queuelog runs on sqlite or postgresql, "
                          f"not {backend!r}{hint}")
    if backend != "sqlite":
        # No pool_pre_ping: its extra round trip per checkout cost ~30% of claim throughput.
        # A connection that died meanwhile (a restart, a dropped socket) fails its request
        # with a disconnect error instead: that request answers 503 (errors.py), and
        # SQLAlchemy invalidates the whole pool on a disconnect, so later requests get fresh
        # connections. Nothing is retried blindly: the commit's outcome may be unknown.
        # connect_timeout: a database host that does not answer at all fails a request in
        # seconds, not after the kernel's TCP timeout.
        connect_args = {} if "connect_timeout" in parsed.query else {"connect_timeout": 10}
        return create_engine(url, echo=echo, pool_size=10, max_overflow=20,
                             connect_args=connect_args)
    synchronous = sqlite_synchronous.upper()
    if synchronous not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
        raise ConfigError("SQLITE_SYNCHRONOUS must be OFF, NORMAL, FULL or EXTRA, "
                          f"not {sqlite_synchronous!r}")
    engine = create_engine(url, echo=echo, pool_size=10, max_overflow=20,
                           connect_args={"timeout": 30, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # pysqlite's own transaction handling begins late and never IMMEDIATE;
        # turn it off and emit BEGIN ourselves (SQLAlchemy's documented recipe).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Writers take the write lock up front: a deferred transaction that later
        # upgrades gets SQLITE_BUSY at once instead of waiting on busy_timeout.
        immediate = conn.get_execution_options().get("sqlite_immediate", False)
        # Straight to the driver: this runs on every transaction, and the full
        # execution path (events, result set-up) costs more than the BEGIN itself.
        conn.connection.dbapi_connection.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def writer(engine: Engine) -> Engine:
    """The same engine (and pool), beginning write transactions IMMEDIATE on SQLite."""
    if engine.dialect.name == "sqlite":
        return engine.execution_options(sqlite_immediate=True)
    return engine


# ``queuelog db current`` must show the revision as it is, so the ``db`` commands load the
# app without the upgrade every start does (``db upgrade`` then runs it and reports it).
_START_UPGRADE_DEFERRED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "queuelog_start_upgrade_deferred", default=False)


@contextlib.contextmanager
def start_upgrade_deferred() -> Iterator[None]:
    """Within this block, an app being created does not upgrade the schema."""
    token = _START_UPGRADE_DEFERRED.set(True)
    try:
        yield
    finally:
        _START_UPGRADE_DEFERRED.reset(token)


def upgrade_on_start() -> bool:
    """Whether creating an app now upgrades the schema (always, but in ``queuelog db``)."""
    return not _START_UPGRADE_DEFERRED.get()


def create_schema(engine: Engine) -> None:
    """Create or upgrade the schema to the newest revision (safe from several processes)."""
    from queuelog.server.store.migrate import upgrade  # Alembic loads only where the schema is touched
    upgrade(engine)

"""Engine and pool set-up per database, and the store's clock.

SQLite: WAL, a busy timeout, foreign keys, BEGIN IMMEDIATE for writers in their turns
(turns.py). PostgreSQL: a connect timeout and no pre-ping. Both pools LIFO: the connection
used last is used next, so a quiet server works on one or two connections whose prepared
statements and server-side caches are warm.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import time
from typing import Any, Callable, Iterator

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from queuelog.model.problems import ConfigError
from queuelog.server.store import liveness
from queuelog.server.store.turns import WRITE_WAIT_SECONDS, WriteTurns
from queuelog.server.store.wal import WAL_SIZE_LIMIT

Clock = Callable[[], int]
POOL = {"pool_size": 10, "max_overflow": 20, "pool_use_lifo": True}
SYNCHRONOUS_MODES = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})
_TURNS = "_queuelog_turns"  # an SQLite engine's WriteTurns, in its __dict__


def system_clock() -> int:
    """Now, as epoch microseconds: the only clock the store reads."""
    return time.time_ns() // 1_000


def to_us(seconds: float) -> int:
    """Seconds as whole microseconds, the unit of every time the store keeps."""
    return int(seconds * 1_000_000)


def backend_name(url: str) -> str:
    """The database a DATABASE_URL names; ConfigError for one queuelog does not run on."""
    backend = make_url(url).get_backend_name()
    if backend not in _MAKERS:
        hint = " (write postgresql+psycopg://)" if backend == "postgres" else ""
        raise ConfigError(f"DATABASE_URL: queuelog runs on sqlite or postgresql, "
                          f"not {backend!r}{hint}")
    return backend


def make_engine(url: str, *, sqlite_synchronous: str = "FULL", echo: bool = False,
                write_wait: float = WRITE_WAIT_SECONDS) -> Engine:
    """A pooled engine for ``url``, set up for its database; a writer waits at most
    ``write_wait`` seconds for SQLite's write lock (turns.py)."""
    return _MAKERS[backend_name(url)](url, sqlite_synchronous, echo, write_wait)


def _sqlite_engine(url: str, sqlite_synchronous: str, echo: bool, write_wait: float) -> Engine:
    """WAL, a busy timeout, foreign keys and real transactions on every connection."""
    # Not only a string: QUEUELOG_SQLITE_SYNCHRONOUS=1 (the PRAGMA's number) arrives as an
    # int from the environment's JSON, and .upper() on it was a traceback at start.
    synchronous = sqlite_synchronous.upper() if isinstance(sqlite_synchronous, str) else None
    if synchronous not in SYNCHRONOUS_MODES:
        raise ConfigError("SQLITE_SYNCHRONOUS must be OFF, NORMAL, FULL or EXTRA, "
                          f"not {sqlite_synchronous!r}")
    engine = create_engine(url, echo=echo, **POOL,
                           connect_args={"timeout": 30, "check_same_thread": False})
    event.listen(engine, "connect", lambda dbapi_conn, _: _on_connect(dbapi_conn, synchronous))
    event.listen(engine, "begin", _on_begin)
    database = database_file(engine)
    engine.__dict__[_TURNS] = WriteTurns(
        engine.execution_options(sqlite_immediate=True), wake_folder(engine),
        wal=database + "-wal" if database and synchronous == "FULL" else None,
        wait=write_wait)
    return engine


def _postgresql_engine(url: str, sqlite_synchronous: str, echo: bool,
                       write_wait: float) -> Engine:
    """No pre-ping, a connect timeout, closed connections refused at checkout."""
    # No pool_pre_ping: its extra round trip on every checkout slows every claim.
    # One the server closed while idle (a restart) is refused at checkout, before anything
    # is sent (liveness.py); one that dies in use (a dropped socket) fails its request with
    # a disconnect error instead (503, errors.py), and SQLAlchemy invalidates the whole pool
    # on a disconnect. Nothing is retried blindly: the commit's outcome may be unknown.
    # connect_timeout: a host that does not answer fails a request in seconds.
    query = make_url(url).query
    connect_args = {} if "connect_timeout" in query else {"connect_timeout": 10}
    engine = create_engine(url, echo=echo, **POOL, connect_args=connect_args)
    event.listen(engine, "checkout", liveness.refuse_closed)  # closed by a restart
    return engine


_MAKERS: dict[str, Callable[[str, str, bool, float], Engine]] = {
    "sqlite": _sqlite_engine, "postgresql": _postgresql_engine}


def write_turns(engine: Engine) -> WriteTurns:
    """An SQLite engine's writer: its transactions IMMEDIATE, each in its turn."""
    return engine.__dict__[_TURNS]  # type: ignore[no-any-return]


def database_file(engine: Engine) -> str | None:
    """An SQLite database file's absolute path; None for an in-memory or URI database."""
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return os.path.abspath(database)


def wake_folder(engine: Engine) -> str | None:
    """``<database file>-wake``: the processes that share a file share its folder."""
    database = database_file(engine)
    return None if database is None else database + "-wake"


def _on_connect(dbapi_conn: Any, synchronous: str) -> None:
    # pysqlite's own transaction handling begins late and never IMMEDIATE;
    # turn it off and emit BEGIN ourselves (SQLAlchemy's documented recipe).
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute(f"PRAGMA synchronous={synchronous}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA wal_autocheckpoint=0")  # made out of the writers' turn: turns.py
    cur.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")  # WAL cut back when reused
    cur.close()


def _on_begin(conn: Any) -> None:
    # Writers take the write lock up front: a deferred transaction that later
    # upgrades gets SQLITE_BUSY at once instead of waiting on busy_timeout.
    immediate = conn.get_execution_options().get("sqlite_immediate", False)
    # Straight to the driver: this runs on every transaction, and the full
    # execution path (events, result set-up) costs more than the BEGIN itself.
    conn.connection.dbapi_connection.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")


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

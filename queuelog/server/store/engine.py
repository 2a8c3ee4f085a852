"""Engine set-up and the store's clock; what differs per database is in dialect.py."""
from __future__ import annotations

import contextlib
import contextvars
import os
import time
from typing import Callable, Iterator

from sqlalchemy import Engine, text

from queuelog.server.store.dialect import for_url as dialect_for_url
from queuelog.server.store.dialect import writer as dialect_writer
from queuelog.server.store.turns import WRITE_WAIT_SECONDS, WriteTurns

Clock = Callable[[], int]


def system_clock() -> int:
    """Now, as epoch microseconds: the only clock the store reads."""
    return time.time_ns() // 1_000


def to_us(seconds: float) -> int:
    """Seconds as whole microseconds, the unit of every time the store keeps."""
    return int(seconds * 1_000_000)


def make_engine(url: str, *, sqlite_synchronous: str = "FULL", echo: bool = False,
                write_wait: float = WRITE_WAIT_SECONDS) -> Engine:
    """Create the engine for ``url``, set up by its dialect (dialect.py); a writer waits
    at most ``write_wait`` seconds for SQLite's write lock (turns.py)."""
    engine = dialect_for_url(url).create_engine(url, sqlite_synchronous=sqlite_synchronous,
                                                echo=echo)
    turns = _turns(engine)
    if turns is not None:
        turns.wait = write_wait
    return engine


def dispose(engine: Engine) -> None:
    """Close the engine's pooled connections; SQLite's WAL is first copied back and cut to
    nothing, so that a clean stop leaves no WAL file to grow from."""
    turns = _turns(engine)
    if turns is not None:
        turns.finish()
    engine.dispose()


# How long /healthz's write probe waits for SQLite's write turn and lock.
PROBE_WAIT_SECONDS = 1.0
# Free space under which SQLite's writes are told impossible: a commit that cannot extend
# the WAL file fails ("database or disk is full"), while reads and /healthz's ping go on.
DISK_FULL_BYTES = 1 << 20


def write_problem(engine: Engine) -> str | None:
    """Why a write cannot be made now, or None: SQLite, a write turn taken and given back
    (BEGIN IMMEDIATE within ``PROBE_WAIT_SECONDS``, nothing written) and the disk's free
    space; PostgreSQL, whether the server takes writes (not a standby, not read-only)."""
    turns = _turns(engine)
    if turns is None:
        with engine.connect() as conn:
            row = conn.execute(_PG_WRITABLE).one()
        return None if row[0] else "the database is read-only (a standby, or read-only mode)"
    database = engine.url.database
    if database and database != ":memory:" and not database.startswith("file:"):
        stat = os.statvfs(os.path.dirname(os.path.abspath(database)))
        if stat.f_bavail * stat.f_frsize < DISK_FULL_BYTES:
            return "the disk holding the database is full"
    try:
        with turns.begin(wait=PROBE_WAIT_SECONDS):
            pass
    except Exception as e:  # noqa: BLE001 - the reason is the answer
        reason = (str(getattr(e, "orig", None) or e).strip().splitlines() or [""])[0]
        return f"no write lock within {PROBE_WAIT_SECONDS:g} s ({reason})"
    return None


_PG_WRITABLE = text("SELECT NOT pg_is_in_recovery() "
                    "AND current_setting('transaction_read_only') = 'off'")


def _turns(engine: Engine) -> WriteTurns | None:
    """The engine's SQLite writers' turns; None on a database without them."""
    writer = dialect_writer(engine)
    return writer if isinstance(writer, WriteTurns) else None


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

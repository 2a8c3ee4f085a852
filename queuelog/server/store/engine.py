"""Engine set-up and the store's clock; what differs per database is in dialect.py."""
from __future__ import annotations

import contextlib
import contextvars
import time
from typing import Callable, Iterator

from sqlalchemy import Engine

from queuelog.server.store.dialect import for_url as dialect_for_url

Clock = Callable[[], int]


def system_clock() -> int:
    """Now, as epoch microseconds: the only clock the store reads."""
    return time.time_ns() // 1_000


def to_us(seconds: float) -> int:
    """Seconds as whole microseconds, the unit of every time the store keeps."""
    return int(seconds * 1_000_000)


def make_engine(url: str, *, sqlite_synchronous: str = "FULL", echo: bool = False) -> Engine:
    """Create the engine for ``url``, set up by its dialect (dialect.py)."""
    return dialect_for_url(url).create_engine(url, sqlite_synchronous=sqlite_synchronous,
                                              echo=echo)


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

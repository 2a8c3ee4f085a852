"""The backends queuelog runs on, by name: each implements the store's verbs whole."""
from __future__ import annotations

from sqlalchemy import Engine

from queuelog.server.store.backends.base import MIGRATE_LOCK, NAMES_LOCK, Backend
from queuelog.server.store.backends.postgres import PostgresBackend
from queuelog.server.store.backends.sqlite import SQLiteBackend
from queuelog.server.store.engine import backend_name

__all__ = ["MIGRATE_LOCK", "NAMES_LOCK", "Backend", "PostgresBackend", "SQLiteBackend",
           "for_url", "of"]

_BY_NAME: dict[str, Backend] = {b.name: b for b in (SQLiteBackend(), PostgresBackend())}


def for_url(url: str) -> Backend:
    """The backend a DATABASE_URL names; ConfigError for a database queuelog does not run on."""
    return _BY_NAME[backend_name(url)]


def of(engine: Engine) -> Backend:
    """The backend of an engine made by ``engine.make_engine``."""
    return _BY_NAME[engine.dialect.name]

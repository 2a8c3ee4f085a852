"""Running the service: the schema's revision and upgrade, a SQLite backup (the command line),
the metrics scrape and the API's document (readers over HTTP)."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from flask import current_app

from queuelog.model.problems import Conflict
from queuelog.server.actions.gate import SYSTEM, gate
from queuelog.server.auth import READERS, Principal
from queuelog.server.db import get_store


@contextlib.contextmanager
def upgrade_deferred() -> Iterator[None]:
    """Within this block, an app being created does not upgrade its schema (``db``)."""
    from queuelog.server.store.engine import start_upgrade_deferred  # alembic: only here
    with start_upgrade_deferred():
        yield


@gate(SYSTEM)
def schema_revision(who: Principal) -> tuple[str | None, str]:
    """The database's schema revision (None before any) and the newest one."""
    from queuelog.server.store import migrate
    return migrate.current(get_store().engine), migrate.head()


@gate(SYSTEM)
def upgrade_schema(who: Principal) -> tuple[str | None, str]:
    """Migrate the schema to the newest revision; the revisions before and after."""
    from queuelog.server.store import migrate
    return migrate.upgrade(get_store().engine)


@gate(SYSTEM)
def backup(who: Principal, path: str) -> Any:
    """Copy the live SQLite database to ``path`` (409 when it cannot: not SQLite, a
    file in the way); return what was copied (``jobs``, ``path``, ``bytes``)."""
    from queuelog.server.store.backup import BackupRefused, backup_sqlite
    try:
        return backup_sqlite(get_store().engine, path)
    except BackupRefused as exc:
        raise Conflict(str(exc)) from None


@gate("admin", "metrics")
def scrape(who: Principal, accept: str | None) -> tuple[bytes, str]:
    """The Prometheus exposition (gauges read now, counters, latencies) and its type."""
    from queuelog.server.metrics import exposition
    config = current_app.config
    return exposition(get_store(), list(config["JOB_TYPES"]), accept,
                      list(config["SCHEDULES"]))


@gate(*READERS, "metrics")
def api_document(who: Principal) -> dict[str, Any]:
    """The OpenAPI 3.1 document of this API, for this app's configuration."""
    from queuelog.server.requests.openapi import document
    return document(current_app.config)

"""Schema upgrades: Alembic (``queuelog/migrations``), run under a lock at every start.

Three kinds of database reach ``upgrade``:

- empty: every revision runs, 0001 onwards;
- made by the release before Alembic (its tables, no ``alembic_version``): completed to the
  baseline (that release added missing tables and indexes at each start, so an old file may
  lack one), stamped 0001, then upgraded like any other;
- already under Alembic: the revisions it lacks run; at head, nothing happens.

The whole upgrade is one transaction, taken with the database's write lock first (SQLite:
BEGIN IMMEDIATE; PostgreSQL: an advisory lock, since its DDL takes its locks table by table):
gunicorn workers starting together queue on the lock, and the first one does the work
while the others find the database at head. A failed revision rolls back whole.
"""
from __future__ import annotations

import functools
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect

from queuelog.model.problems import ConfigError
from queuelog.server.store import backends
from queuelog.server.store.locks import MIGRATE_LOCK

SCRIPT_LOCATION = "queuelog.server:migrations"  # package resource: works from a wheel too
BASELINE = "0001"
# How long a process starting while another upgrades SQLite waits for its write lock: a
# request's wait (WRITE_LOCK_WAIT_SECONDS) is too short for an upgrade that builds an index.
UPGRADE_WAIT_SECONDS = 30.0


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's config for queuelog's migrations, bound to ``connection`` if given."""
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    if connection is not None:
        config.attributes["connection"] = connection  # env.py runs on it
    return config


@functools.lru_cache(maxsize=1)
def scripts() -> ScriptDirectory:
    """The revision files (read once per process)."""
    return ScriptDirectory.from_config(alembic_config())


def head() -> str:
    """The newest revision."""
    return scripts().get_current_head()  # type: ignore[return-value]


def current(engine: Engine) -> str | None:
    """The database's revision; None for an empty or pre-Alembic database."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine) -> tuple[str | None, str]:
    """Bring the schema to head under the database's lock; return (before, after)."""
    before = current(engine)
    if before == head():
        return before, before  # the common start: one read, no lock taken
    known(before)
    db = backends.of(engine)
    with db.begin_waiting(engine, UPGRADE_WAIT_SECONDS) as conn:  # SQLite: BEGIN IMMEDIATE, the write lock up front
        db.lock(conn, MIGRATE_LOCK)  # PostgreSQL: its DDL locks table by table
        return _upgrade(conn)


def _upgrade(conn: Connection) -> tuple[str | None, str]:
    """Inside the lock: read the revision again (another process may have upgraded)."""
    context = MigrationContext.configure(conn)
    before = context.get_current_revision()
    known(before)
    if before is None and inspect(conn).has_table("jobs"):
        _complete_baseline(conn)
        context.stamp(scripts(), BASELINE)
    if context.get_current_revision() != head():
        command.upgrade(alembic_config(conn), "head")
    return before, head()


def known(revision: str | None) -> None:
    """ConfigError unless ``revision`` is one of this release's (or None: no schema yet)."""
    # A database a newer queuelog has upgraded: Alembic cannot place its revision and
    # raised CommandError, a traceback from every command and every start.
    if revision is not None and revision not in {s.revision for s in scripts().walk_revisions()}:
        raise ConfigError(f"the database's schema is at revision {revision}, which this "
                          f"release of queuelog (newest revision {head()}) does not know: "
                          "it was upgraded by a newer release; run that release")


def _complete_baseline(conn: Connection) -> None:
    """Give a pre-Alembic database whatever baseline table or index it lacks."""
    baseline: Any = scripts().get_revision(BASELINE).module  # type: ignore[union-attr]
    baseline.metadata.create_all(conn)  # only the missing tables (checkfirst)
    for table in baseline.metadata.sorted_tables:
        for index in table.indexes:
            index.create(conn, checkfirst=True)

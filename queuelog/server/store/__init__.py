"""The store: all SQL of queuelog lives in this package; views never import sqlalchemy."""
from __future__ import annotations

import atexit
import os
import time
import weakref
from typing import Any, Mapping

from flask import Flask, current_app
from sqlalchemy import text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, OperationalError, ProgrammingError

from queuelog.model.problems import ConfigError
from queuelog.model.limits import from_options
from queuelog.server.migrations import HEAD
from queuelog.server.store.accounts import Accounts, ApiKey, User, hash_token
from queuelog.server.store.audit import Audit, Event
from queuelog.server.store.bulk import Bulk
from queuelog.server.store.due import Due
from queuelog.server.store.engine import (dispose, make_engine, system_clock, upgrade_on_start,
                                           write_problem)
from queuelog.server.store.enqueue import NewJob
from queuelog.server.store.limits import FlowState, TypeLimits
from queuelog.server.store.queue import Claimed, Queue
from queuelog.server.store.reads import ALL, Page, Reads, Scope
from queuelog.server.store.schedules import Schedules, ScheduleState
from queuelog.server.store.signins import SignIns
from queuelog.server.store.stats import Series, Stats
from queuelog.server.store.turns import WRITE_WAIT_SECONDS
from queuelog.server.store.types import Types, TypeSummary
from queuelog.server.store.workers import RunningJob, Workers, WorkerSummary

__all__ = ["ALL", "Accounts", "ApiKey", "Claimed", "Event", "FlowState", "NewJob", "Page",
           "RunningJob", "ScheduleState", "Scope", "Series", "SignIns", "Store", "TypeSummary",
           "User", "WorkerSummary", "get_store", "hash_token", "init_app", "revisions"]


class Store(Queue, Reads, Stats, Types, TypeLimits, Workers, Bulk, Audit, Due, Schedules):
    """Job verbs, reads, types, limits, workers, bulk, audit, due times, schedules,
    ``accounts`` (keys, users): one engine and clock."""

    def __init__(self, url: str, *, sqlite_synchronous: str = "FULL",
                 backoff_base: float = 2.0, backoff_cap: float = 3600.0,
                 lease_seconds: float = 300.0,
                 type_leases: Mapping[str, float] | None = None,
                 type_limits: Mapping[str, Any] | None = None,
                 write_wait: float = WRITE_WAIT_SECONDS) -> None:
        engine = make_engine(url, sqlite_synchronous=sqlite_synchronous, write_wait=write_wait)
        super().__init__(engine, clock=system_clock, backoff_base=backoff_base,
                         backoff_cap=backoff_cap, lease_seconds=lease_seconds,
                         type_leases=type_leases, type_limits=type_limits)
        # Accounts read the queue's clock, so a test that moves one moves both.
        self.accounts = Accounts(engine, clock=lambda: self.clock())
        self.sign_ins = SignIns(engine)  # failed sign-ins, for the throttle (throttle.py)
        # A process forked after this point (gunicorn --preload, multiprocessing) must not
        # share the parent's pooled connections: SQLite and libpq sockets are not fork-safe.
        ref = weakref.ref(engine)
        os.register_at_fork(after_in_child=lambda: _forget_pool(ref))

    def create_schema(self) -> None:
        """Create or upgrade the schema to the newest revision (safe from several processes)."""
        if revisions(self.engine) == [HEAD]:
            return  # the common start: one read, and Alembic never imported (0.13 s CPU)
        from queuelog.server.store.migrate import upgrade  # Alembic loads only where needed
        upgrade(self.engine)

    def write_problem(self) -> str | None:
        """Why a write cannot be made now (for /healthz), or None (engine.write_problem)."""
        return write_problem(self.engine)

    def close(self) -> None:
        """Close pooled connections (SQLite: the WAL copied back and truncated first)."""
        dispose(self.engine)


# Pools a forked child inherited. They are kept, never closed or collected: closing a
# SQLite connection opened before the fork drops the child's POSIX locks on the database
# and can checkpoint the parent's WAL under it (https://sqlite.org/howtocorrupt.html#fork).
_INHERITED: list[Any] = []


def _forget_pool(ref: "weakref.ReferenceType[Any]") -> None:
    engine = ref()
    if engine is not None:
        _INHERITED.append(engine.pool)
        engine.dispose(close=False)  # a fresh pool; the parent keeps using its connections


_REVISIONS = text("SELECT version_num FROM alembic_version")


def revisions(engine: Engine) -> list[str]:
    """The database's Alembic revisions, read without Alembic; none without its table."""
    try:
        with engine.connect() as conn:
            return list(conn.execute(_REVISIONS).scalars())
    except (OperationalError, ProgrammingError):  # no such table (or no answer: upgrade says)
        return []


def init_app(app: Flask, *, waiting: bool = False) -> Store:
    """Create the app's store from its config and create the schema; ``waiting`` (a
    server starting): a database that does not answer is tried again for the dialect's
    ``boot_wait_seconds`` (PostgreSQL restarting) before that stops the start."""
    url = app.config["DATABASE_URL"]
    try:
        store = Store(url, sqlite_synchronous=app.config["SQLITE_SYNCHRONOUS"],
                      backoff_base=float(app.config["RETRY_BACKOFF_SECONDS"]),
                      backoff_cap=float(app.config["RETRY_BACKOFF_MAX_SECONDS"]),
                      lease_seconds=float(app.config["LEASE_SECONDS"]),
                      write_wait=float(app.config["WRITE_LOCK_WAIT_SECONDS"]),
                      type_leases={name: float(opts["lease_seconds"])
                                   for name, opts in app.config["JOB_TYPES"].items()
                                   if "lease_seconds" in opts},
                      # checked at config load (config.type_limits): valid here
                      type_limits={name: from_options(opts)
                                   for name, opts in app.config["JOB_TYPES"].items()})
    except (ArgumentError, ImportError) as exc:  # not a URL, or a driver that is not installed
        raise ConfigError(f"DATABASE_URL {_shown(url)} cannot be used: {exc}") from exc
    _reach(app, store, url, store.dialect.boot_wait_seconds if waiting else 0.0)
    app.extensions["queuelog.store"] = store
    # A clean stop (a gunicorn worker's, the dev server's) closes the store: SQLite's WAL is
    # copied back and truncated, not left to grow from at the next start.
    atexit.register(_close_at_exit, weakref.ref(store))
    return store


def _close_at_exit(ref: "weakref.ReferenceType[Store]") -> None:
    store = ref()
    if store is not None:
        store.close()


def _reach(app: Flask, store: Store, url: str, wait_seconds: float) -> None:
    """Create (or, under ``queuelog db``, ping) the schema; a database that does not answer
    is tried again, with a growing pause, until ``wait_seconds`` have passed (ConfigError)."""
    deadline = time.monotonic() + wait_seconds
    pause = 0.1
    while True:
        try:
            if upgrade_on_start():
                store.create_schema()
            else:
                store.ping()  # ``queuelog db``: the command reads or upgrades the schema
            return
        except OperationalError as exc:
            answer = str(exc.orig).strip()
            if time.monotonic() + pause > deadline:
                store.close()
                raise ConfigError(f"DATABASE_URL {_shown(url)}: the database does not "
                                  f"answer: {answer}") from exc
            # A gunicorn worker (re)booting while the database restarts: exiting would make
            # gunicorn stop every worker ("Worker failed to boot"), so wait for it instead.
            app.logger.warning("DATABASE_URL %s: the database does not answer (%s); trying "
                               "again in %.1f s", _shown(url), answer.partition("\n")[0], pause)
            time.sleep(pause)
            pause = min(2 * pause, 2.0)


def _shown(url: Any) -> str:
    # Never print a password from the URL into a terminal or a server log.
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not parseable: nothing in it can be told apart as a password
        return "(not an SQLAlchemy URL)"


def get_store() -> Store:
    """The current app's store."""
    return current_app.extensions["queuelog.store"]  # type: ignore[no-any-return]

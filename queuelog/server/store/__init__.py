"""The store: all SQL of queuelog lives in this package; it imports no Flask.

``Store`` is composed of parts, each an object over one shared ``Context`` (part.py): the
job verbs of its backend (``jobs``: backends/), enqueue, reads, stats, types and limits,
workers, the last hour's timings, bulk repair, purge, audit, due times, schedules, and
``accounts`` (keys, users).
Its verbs are the parts' own, named once below (``_VERBS``).
"""
from __future__ import annotations

import os
import weakref
from typing import Any, Mapping

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError, ProgrammingError

from queuelog.model.limits import Limits
from queuelog.server.migrations import HEAD
from queuelog.server.store import backends
from queuelog.server.store.accounts import Accounts, ApiKey, User, hash_token
from queuelog.server.store.audit import PRIORITY_DETAILS, Audit, Event
from queuelog.server.store.bulk import Bulk
from queuelog.server.store.due import Due
from queuelog.server.store.engine import Clock, make_engine
from queuelog.server.store.enqueue import Enqueue, Item, NewJob
from queuelog.server.store.jobs import Claimed
from queuelog.server.store.limits import FlowState, TypeLimits
from queuelog.server.store.part import Context
from queuelog.server.store.purge import Purge
from queuelog.server.store.reads import ALL, Page, Reads, Scope
from queuelog.server.store.schedules import Schedules, ScheduleState
from queuelog.server.store.signins import SignIns
from queuelog.server.store.stats import Series, Stats
from queuelog.server.store.timings import PERCENTILES, Timing, Timings
from queuelog.server.store.turns import WRITE_WAIT_SECONDS
from queuelog.server.store.types import Types, TypeSummary
from queuelog.server.store.workers import RunningJob, Workers, WorkerSummary

__all__ = ["ALL", "PERCENTILES", "PRIORITY_DETAILS", "Accounts", "ApiKey", "Claimed", "Event",
           "FlowState", "Item", "NewJob", "Page", "RunningJob", "ScheduleState", "Scope",
           "Series", "SignIns", "Store", "Timing", "TypeSummary", "User", "WorkerSummary",
           "hash_token", "revisions"]

# Each part's verbs, as the Store offers them.
_VERBS = {
    "jobs": ("claim", "claim_many", "heartbeat", "complete", "complete_many", "fail",
             "fail_many", "cancel", "retry", "watch", "run_now"),
    "enqueuing": ("enqueue", "enqueue_many"),
    "reads": ("get", "statuses", "list_jobs", "ping"),
    "stats": ("job_counts", "fold_counts", "keeps_count_deltas", "gauges",
              "count_purgeable", "count_by_status", "outcomes_per_minute"),
    "types": ("paused", "type_summaries", "set_paused"),
    "limits": ("set_limits", "reset_limits", "flow_states"),
    "worker_reads": ("workers",),
    "timing": ("timings",),
    "bulk": ("count_matching", "bulk_retry", "bulk_cancel"),
    "purging": ("purge", "prune_minutes"),
    "audit": ("audit_events", "purge_audit"),
    "due": ("next_due_in",),
    "schedules": ("make_tick", "run_schedule", "set_schedule_paused", "last_ticks",
                  "schedule_states"),
}


class _Verb:
    """A Store verb: the named part's method of the same name."""

    def __init__(self, part: str, name: str) -> None:
        self.part, self.name = part, name

    def __get__(self, store: Any, owner: Any = None) -> Any:
        if store is None:
            return self
        return getattr(getattr(store, self.part), self.name)


class Store:
    """One database's verbs, made of parts over one engine, backend and clock."""

    def __init__(self, url: str, *, sqlite_synchronous: str = "FULL",
                 backoff_base: float = 2.0, backoff_cap: float = 3600.0,
                 lease_seconds: float = 300.0,
                 type_leases: Mapping[str, float] | None = None,
                 type_limits: Mapping[str, Limits] | None = None,
                 write_wait: float = WRITE_WAIT_SECONDS) -> None:
        self.engine = make_engine(url, sqlite_synchronous=sqlite_synchronous,
                                  write_wait=write_wait)
        self.backend = backends.of(self.engine)
        self.ctx = ctx = Context(self.engine, self.backend)
        self.notifier = ctx.notifier
        self.jobs = self.backend.jobs_class()(
            ctx, backoff_base=backoff_base, backoff_cap=backoff_cap,
            lease_seconds=lease_seconds, type_leases=type_leases, type_limits=type_limits)
        self.enqueuing = Enqueue(ctx, self.jobs.flows)
        self.reads = Reads(ctx)
        self.stats = Stats(ctx)
        self.limits = TypeLimits(ctx, type_limits or {})
        self.types = Types(ctx, stats=self.stats, limits=self.limits)
        self.worker_reads = Workers(ctx)
        self.timing = Timings(ctx)
        self.bulk = Bulk(ctx, self.jobs)
        self.purging = Purge(ctx)
        self.audit = Audit(ctx)
        self.due = Due(ctx)
        self.schedules = Schedules(ctx)
        # Accounts read the store's clock, so a test that moves one moves both.
        self.accounts = Accounts(self.engine, self.backend, clock=lambda: self.clock())
        self.sign_ins = SignIns(self.engine, self.backend)  # failed sign-ins (throttle.py)
        # A process forked after this point (gunicorn --preload, multiprocessing) must not
        # share the parent's pooled connections: SQLite and libpq sockets are not fork-safe.
        ref = weakref.ref(self.engine)
        os.register_at_fork(after_in_child=lambda: _forget_pool(ref))

    # -- what the server sets -----------------------------------------------------------
    @property
    def clock(self) -> Clock:
        """The store's clock (epoch microseconds); tests set a fake one."""
        return self.ctx.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self.ctx.clock = clock

    def hook(self, *, jobs_written: Any = None, lease_expired: Any = None,
             claimable: Any = None, finished: Any = None, run_cancelled: Any = None) -> None:
        """Set the server's callbacks: jobs created or finished (retention), a lease taken
        back (metrics), a commit that made jobs claimable (this process's long polls), a
        commit that finished a watched job (this process's waits on jobs), a running job
        cancelled (metrics)."""
        if jobs_written is not None:
            self.ctx.on_jobs_written = jobs_written
        if lease_expired is not None:
            self.ctx.on_lease_expired = lease_expired
        if claimable is not None:
            self.ctx.on_claimable = claimable
        if run_cancelled is not None:
            self.ctx.on_run_cancelled = run_cancelled
        if finished is not None:
            self.ctx.on_finished = finished

    def listen(self, rings: Mapping[str, Any]) -> Any:
        """Start hearing other processes' wake-ups, ``rings`` by kind (listen.KINDS:
        claimable, finished); None: nothing to hear."""
        return self.notifier.listen(rings)

    def create_schema(self) -> None:
        """Create or upgrade the schema to the newest revision (safe from several processes)."""
        if revisions(self.engine) == [HEAD]:
            return  # the common start: one read, and Alembic never imported
        from queuelog.server.store.migrate import upgrade  # Alembic loads only where needed
        upgrade(self.engine)

    def write_problem(self) -> str | None:
        """Why a write cannot be made now (for /healthz), or None."""
        return self.backend.write_problem(self.engine)

    def close(self) -> None:
        """Close pooled connections (SQLite: the WAL copied back and truncated first)."""
        self.backend.close(self.engine)


for _part, _names in _VERBS.items():
    for _name in _names:
        setattr(Store, _name, _Verb(_part, _name))


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

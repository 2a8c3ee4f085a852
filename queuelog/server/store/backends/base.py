"""What every backend provides: connections, locks, rows in bulk, and its job verbs.

A backend is one database kind (River's driver, Oban's engine, huey's storage class). It
gives the store its connections (``writer``, ``reader``, ``one_statement``), its locks, its
way of writing many rows at once, its wake-up transport (``notifier``) and its ``Jobs``: the
job verbs, each implemented whole by the backend's subclass of ``jobs.Jobs`` with its own
statements (sql/). Modules outside backends/ ask it and never test the database's name.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from sqlalchemy import Engine, Select, TextClause

from queuelog.model import jsontext
from queuelog.server.store.keycache import KeyCache
from queuelog.server.store.locks import MIGRATE_LOCK, NAMES_LOCK
from queuelog.server.store.notifier import Notifier

__all__ = ["MIGRATE_LOCK", "NAMES_LOCK", "Backend", "items_json"]



class Backend:
    """One database kind. Subclasses implement every method; none answers "cannot"."""

    name: str = ""
    param_mark: str = "?"                     # the driver's placeholder, for raw driver SQL
    companions: tuple[str, ...] = ()          # files beside the database that are part of it
    backup_refusal: str | None = None         # why ``queuelog backup`` cannot copy it, if so
    # A write transaction holds the database's one write lock from BEGIN, so whatever
    # it reads no other writer changes before its commit (SQLite); else rows are locked.
    writes_lock_reads: bool = False
    # The count triggers (migration 0008) update ``job_counts`` itself, in the writing
    # transaction (SQLite); else they append deltas that a read must add up (PostgreSQL).
    counts_in_place: bool = False
    # How long a starting server tries again a database that does not answer (db.py).
    boot_wait_seconds: float = 0.0
    # Several reads may be sent at once and answered at once (``Prepared.together``).
    pipelines: bool = False

    # -- the parts a store is made of ----------------------------------------------------
    def notifier(self, engine: Engine) -> Notifier:
        """The wake-up transport of ``engine``'s database."""
        raise NotImplementedError

    def key_cache(self, engine: Engine) -> KeyCache | None:
        """Where this process keeps the keys it found (store/keycache.py); None: look each
        up per request, the only way a revocation holds everywhere at once."""
        return None

    def jobs_class(self) -> type:
        """This backend's ``jobs.Jobs``: the job verbs, whole, with its statements."""
        raise NotImplementedError

    # -- connections -----------------------------------------------------------------------
    def writer(self, engine: Engine) -> Any:
        """The engine that begins write transactions (with the write lock, where needed)."""
        raise NotImplementedError

    def reader(self, engine: Engine) -> Engine:
        """The engine pure reads connect through (never a write)."""
        raise NotImplementedError

    def one_statement(self, write: Any) -> Any:
        """A connection for a write that is one statement, whole by itself."""
        raise NotImplementedError

    def read_one(self, raw: Any, sql: str, params: tuple[Any, ...]) -> Any:
        """One row of one read, on a pooled driver connection, its transaction ended here
        (so the pool's reset has nothing to send, and a failure is the caller's)."""
        raise NotImplementedError

    def begin_waiting(self, engine: Engine, wait: float) -> Any:
        """A write transaction that waits up to ``wait`` seconds for its lock (an upgrade
        at start, longer than a request's wait)."""
        raise NotImplementedError

    def write_problem(self, engine: Engine) -> str | None:
        """Why a write cannot be made now (for /healthz), or None."""
        raise NotImplementedError

    def close(self, engine: Engine) -> None:
        """Close the engine's pooled connections, leaving the database tidy."""
        raise NotImplementedError

    # -- locks -----------------------------------------------------------------------------
    def lock(self, conn: Any, key: int) -> None:
        """Hold a lock named ``key`` until the transaction ends."""
        raise NotImplementedError

    def for_update(self, query: Select[Any]) -> Select[Any]:
        """``query`` locking the rows it reads until the commit."""
        raise NotImplementedError

    def skip_locked(self, query: Select[Any]) -> Select[Any]:
        """``query`` skipping and locking rows no other transaction holds."""
        raise NotImplementedError

    def yield_lock(self, started: float) -> None:
        """Between a bulk action's batches (the last began at ``started``): give waiting
        writers their turn."""
        raise NotImplementedError

    # -- rows in bulk --------------------------------------------------------------------
    def insert_ignore(self, table: Any) -> Any:
        """An INSERT that skips a row whose key exists (ON CONFLICT DO NOTHING)."""
        raise NotImplementedError

    def insert_rows(self, table: Any, columns: Sequence[str], *,
                    returning: Sequence[str] = (), notifying: bool = False) -> TextClause:
        """One INSERT of many rows, the new rows' ``returning`` columns returned, ids
        ascending in the rows' order; run once per parameter set of ``rows_params``, in one
        transaction. ``notifying``: as ``Notifier.notifying`` makes a statement."""
        raise NotImplementedError

    def rows_params(self, columns: Sequence[str], rows: Sequence[Mapping[str, Any]],
                    ) -> list[dict[str, Any]]:
        """The parameters of ``insert_rows`` for these rows, one set per statement."""
        raise NotImplementedError

    # -- counts and metrics --------------------------------------------------------------
    def fold_counts(self, write: Any) -> bool:
        """Fold ``job_count_deltas`` into ``job_counts`` now; whether there were deltas to
        fold (none where the triggers keep the totals themselves: ``counts_in_place``)."""
        raise NotImplementedError

    def expired_by_type(self) -> TextClause:
        """(type, count) of running jobs past their lease at ``:now``, for /metrics."""
        raise NotImplementedError


def items_json(items: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """Items as the ``:items`` parameter both backends' item statements read:
    ``[[v1, v2, ...], ...]`` as one JSON text, parsed by the database in C."""
    return {"items": jsontext.dumps([list(item) for item in items])}

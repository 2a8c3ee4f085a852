"""Bulk repair: retry or cancel every job that matches, in bounded transactions.

Bulk retry and cancel walk the matching jobs by id in batches of ``BULK_BATCH``, one short
transaction each, so a million matches never hold SQLite's write lock (or PostgreSQL row
locks) for long and claims keep flowing in between (between batches SQLite's dialect
yields the lock: ``Backend.yield_lock``). One audit event counts the whole action; each
batch updates it in its own transaction.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

from sqlalchemy import bindparam, func, literal_column, select, update

from queuelog.model.jobs import Status
from queuelog.server.store.audit import Tally
from queuelog.server.store.reads import ALL, Scope, scope_conditions, status_is
from queuelog.server.store.finish import Finishing
from queuelog.server.store.part import Context, Part
from queuelog.server.store.tables import jobs

BULK_BATCH = 200   # rows per bulk transaction: milliseconds of lock, not seconds


class Bulk(Part):
    """Bulk verbs; a bulk cancel finishes its jobs through ``finishing`` (finish.py)."""

    def __init__(self, ctx: Context, finishing: Finishing) -> None:
        super().__init__(ctx)
        self._finishing = finishing


    def count_matching(self, status: Status, *, type: str | None = None,
                       priority: int | None = None, cap: int | None = None) -> int:
        """Jobs in ``status`` matching the filter: exactly, or up to ``cap`` + 1."""
        cond = [status_is(status)]
        if type is not None:
            cond.append(jobs.c.type == type)
        if priority is not None:
            cond.append(jobs.c.priority == priority)
        inner = select(literal_column("1")).select_from(jobs).where(*cond)
        if cap is not None:
            inner = inner.limit(cap + 1)
        with self._read.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(inner.subquery()))
                       .scalar_one())

    def bulk_retry(self, actor: str | None, *, ids: Sequence[int] | None = None,
                   statuses: Sequence[Status] = (Status.FAILED, Status.CANCELLED),
                   type: str | None = None, priority: int | None = None,
                   batch: int = BULK_BATCH) -> int:
        """Failed or cancelled jobs back to pending with fresh retries; how many changed."""
        values = {"status": Status.PENDING.value, "retry_count": 0, "run_at": bindparam("now"),
                  "lease_expires_at": None, "finished_at": None, "cancelled_by_parent": None,
                  "updated_at": bindparam("now")}
        detail = _filter_detail(ids, statuses if ids is None else None, type, priority)
        return self._bulk(Tally(actor, "jobs.retry", None, detail), statuses, values,
                          ids=ids, scope=ALL, type=type, priority=priority, batch=batch)

    def bulk_cancel(self, actor: str | None, *, ids: Sequence[int] | None = None,
                    statuses: Sequence[Status] | None = None, scope: Scope = ALL,
                    type: str | None = None, priority: int | None = None,
                    batch: int = BULK_BATCH) -> int:
        """Cancel pending and blocked jobs, or only those in ``statuses`` (the dashboard's
        list of one status); a producer's scope: its own; how many changed."""
        # The status is in the audit only when narrowed: the API's events read as before.
        detail = _filter_detail(ids, statuses if ids is None else None, type, priority)
        return self._bulk(Tally(actor, "jobs.cancel", None, detail),
                          tuple(statuses or (Status.PENDING, Status.BLOCKED)), None,
                          ids=ids, scope=scope, type=type, priority=priority, batch=batch)

    def _bulk(self, tally: Tally, statuses: Sequence[Status], values: dict[str, Any] | None, *,
              ids: Sequence[int] | None, scope: Scope, type: str | None,
              priority: int | None, batch: int) -> int:
        cond = scope_conditions(scope)
        if type is not None:
            cond.append(jobs.c.type == type)
        if priority is not None:
            cond.append(jobs.c.priority == priority)
        total = 0
        if ids is not None:
            wanted, started = sorted(set(ids)), 0.0
            for start in range(0, len(wanted), batch):
                if start:
                    self.backend.yield_lock(started)
                chunk = wanted[start:start + batch]
                started = time.perf_counter()
                total += self._bulk_batch(tally, jobs.c.id.in_(chunk), statuses, cond, values,
                                          batch)[0]
            return total
        # One status at a time, so each batch is a walk of (status, ...) indexes by id.
        started = None
        for status in statuses:
            last = 0
            if started is not None:  # between two statuses' walks, as between two batches
                self.backend.yield_lock(started)
            while True:
                started = time.perf_counter()
                changed, found, last = self._bulk_batch(
                    tally, jobs.c.id > last, (status,), cond, values, batch)
                total += changed
                if found < batch:
                    break
                self.backend.yield_lock(started)
        return total

    def _bulk_batch(self, tally: Tally, where: Any, statuses: Sequence[Status],
                    cond: list[Any], values: dict[str, Any] | None,
                    batch: int) -> tuple[int, int, int]:
        """One transaction: pick up to ``batch`` matching ids, change them (``values``;
        None: cancel them, the finish path's way), count them."""
        state = jobs.c.status.in_([s.value for s in statuses])
        pick = (select(jobs.c.id).where(where, state, *cond).order_by(jobs.c.id).limit(batch))
        pick = self.backend.skip_locked(pick)  # PostgreSQL: a row a claim holds is not ours
        with self._write.begin() as conn:
            now = self.clock()
            found = conn.execute(pick).scalars().all()
            if not found:
                return 0, 0, 0
            if values is None:
                changed = len(self._finishing.cancel_rows(conn, now, jobs.c.id.in_(found)))
            else:
                changed = conn.execute(update(jobs).where(jobs.c.id.in_(found), state)
                                       .values(**values), {"now": now}).rowcount
                if changed:
                    self.notifier.notify(conn)  # a bulk retry: one wake-up per batch
                    # Their dependents cancelled because of them wait for them again.
                    self._finishing.flows.restore(conn, now, found)
                    # And those with a parent not finished (retried with them, say) wait.
                    self._finishing.flows.rewait(conn, now, found)
            tally.add(conn, now, changed)
        return changed, len(found), max(found)


def _filter_detail(ids: Sequence[int] | None, statuses: Sequence[Status] | None,
                   type: str | None, priority: int | None) -> dict[str, Any]:
    """What a bulk action was asked to match, for its audit event (ids only by number)."""
    if ids is not None:
        return {"ids": len(set(ids))}
    out: dict[str, Any] = {}
    if statuses is not None:
        out["status"] = [s.value for s in statuses]
    if type is not None:
        out["type"] = type
    if priority is not None:
        out["priority"] = priority
    return {"filter": out}

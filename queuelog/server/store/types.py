"""Operating the queue: job types (pause, resume, a summary per type) and bulk repair.

Bulk retry and cancel walk the matching jobs by id in batches of ``BULK_BATCH``, one short
transaction each, so a million matches never hold SQLite's write lock (or PostgreSQL row
locks) for long and claims keep flowing in between. One audit event counts the whole
action; each batch updates it in its own transaction.
"""
from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Sequence

from sqlalchemy import Engine, bindparam, func, insert, literal_column, select, update
from sqlalchemy.exc import IntegrityError

from queuelog.model.jobs import Outcome, Status
from queuelog.server.store.tables import job_attempts, jobs, paused_types
from queuelog.server.store.audit import Tally, record
from queuelog.server.store.engine import Clock
from queuelog.server.store.reads import ALL, Scope, scope_conditions, status_is

BULK_BATCH = 200   # rows per bulk transaction: milliseconds of lock, not seconds
MIN_PAUSE = 0.002  # seconds; see _yield_lock
HOUR_US = 3_600_000_000
FAILED_OUTCOMES = (Outcome.FAILED.value, Outcome.LEASE_EXPIRED.value)


@dataclasses.dataclass(frozen=True)
class TypeSummary:
    """One configured job type as ``GET /types`` and ``/ui/types`` show it."""

    name: str
    paused: bool
    paused_at: int | None
    paused_by: str | None
    counts: dict[str, int]            # per status, each at most the cap + 1
    oldest_pending_us: int            # age of the oldest due pending job, 0 when none
    completed_last_hour: int
    failed_last_hour: int             # failed attempts, lease expiries included


def _capped(*cond: Any) -> Any:
    # As on /ui/: COUNT over a LIMITed subquery stops reading at cap + 1 index entries.
    sub = (select(literal_column("1")).select_from(jobs).where(*cond)
           .limit(bindparam("cap")).subquery())
    return select(func.count()).select_from(sub).scalar_subquery()


@functools.lru_cache(maxsize=8)
def _summary_statement(n_types: int) -> Any:
    """Capped counts per (status, type) and the oldest due run_at per type, in one SELECT."""
    cols = []
    for i in range(n_types):
        t = bindparam(f"t{i}")
        cols += [_capped(status_is(s), jobs.c.type == t).label(f"{s.value}_{i}") for s in Status]
        # The (type, run_at) partial index: the first entry of the type is the answer.
        cols.append(select(jobs.c.run_at).where(status_is(Status.PENDING), jobs.c.type == t,
                                                jobs.c.run_at <= bindparam("now"))
                    .order_by(jobs.c.run_at).limit(1).scalar_subquery().label(f"oldest_{i}"))
    return select(*cols)


_LAST_HOUR = (select(jobs.c.type, job_attempts.c.outcome, func.count())
              .select_from(job_attempts.join(jobs, jobs.c.id == job_attempts.c.job_id))
              .where(job_attempts.c.finished_at >= bindparam("since"),
                     job_attempts.c.outcome.in_([Outcome.COMPLETED.value, *FAILED_OUTCOMES]))
              .group_by(jobs.c.type, job_attempts.c.outcome))


class Admin:
    """Type and bulk verbs (mixed into the Store, which provides engine, clock, writer)."""

    engine: Engine
    clock: Clock
    _write: Engine

    # -- job types ---------------------------------------------------------------
    def paused(self) -> dict[str, tuple[int, str]]:
        """Paused types: name -> (paused_at, paused_by)."""
        with self.engine.connect() as conn:
            return {r.type: (r.paused_at, r.paused_by)
                    for r in conn.execute(select(paused_types)).all()}

    def type_summaries(self, types: Sequence[str], cap: int) -> list[TypeSummary]:
        """A summary of each of ``types``; counts stop at ``cap`` + 1 (read as "cap+")."""
        now = self.clock()
        params: dict[str, Any] = {f"t{i}": t for i, t in enumerate(types)}
        with self.engine.connect() as conn:
            row = conn.execute(_summary_statement(len(types)),
                               {**params, "cap": cap + 1, "now": now}).one()._mapping
            hour = conn.execute(_LAST_HOUR, {"since": now - HOUR_US}).all()
            paused = {r.type: r for r in conn.execute(select(paused_types)).all()}
        done: dict[tuple[str, str], int] = {}
        for job_type, outcome, n in hour:
            kind = "completed" if outcome == Outcome.COMPLETED.value else "failed"
            done[job_type, kind] = done.get((job_type, kind), 0) + int(n)
        out = []
        for i, name in enumerate(types):
            oldest = row[f"oldest_{i}"]
            p = paused.get(name)
            out.append(TypeSummary(
                name=name, paused=p is not None, paused_at=p and p.paused_at,
                paused_by=p and p.paused_by,
                counts={s.value: int(row[f"{s.value}_{i}"]) for s in Status},
                oldest_pending_us=0 if oldest is None else max(0, now - oldest),
                completed_last_hour=done.get((name, "completed"), 0),
                failed_last_hour=done.get((name, "failed"), 0)))
        return out

    def set_paused(self, job_type: str, paused: bool, actor: str) -> None:
        """Pause or resume a type (idempotent); audited as ``type.pause``/``type.resume``."""
        for _ in range(3):
            try:
                with self._write.begin() as conn:
                    now = self.clock()
                    exists = conn.execute(select(paused_types.c.type)
                                          .where(paused_types.c.type == job_type)).first()
                    if paused and exists is None:
                        conn.execute(insert(paused_types).values(
                            type=job_type, paused_at=now, paused_by=actor[:100]))
                    elif not paused and exists is not None:
                        conn.execute(paused_types.delete().where(paused_types.c.type == job_type))
                    record(conn, now, actor, "type.pause" if paused else "type.resume", job_type,
                           {"changed": (exists is None) == paused})
                    return
            except IntegrityError:
                continue  # PostgreSQL: another admin paused it at the same instant; look again

    # -- bulk repair ---------------------------------------------------------------
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
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(inner.subquery()))
                       .scalar_one())

    def bulk_retry(self, actor: str | None, *, ids: Sequence[int] | None = None,
                   statuses: Sequence[Status] = (Status.FAILED, Status.CANCELLED),
                   type: str | None = None, priority: int | None = None,
                   batch: int = BULK_BATCH) -> int:
        """Failed or cancelled jobs back to pending with fresh retries; how many changed."""
        values = {"status": Status.PENDING.value, "retry_count": 0, "run_at": bindparam("now"),
                  "lease_expires_at": None, "finished_at": None, "updated_at": bindparam("now")}
        detail = _filter_detail(ids, statuses if ids is None else None, type, priority)
        return self._bulk(Tally(actor, "jobs.retry", None, detail), statuses, values,
                          ids=ids, scope=ALL, type=type, priority=priority, batch=batch)

    def bulk_cancel(self, actor: str | None, *, ids: Sequence[int] | None = None,
                    scope: Scope = ALL, type: str | None = None, priority: int | None = None,
                    batch: int = BULK_BATCH) -> int:
        """Cancel pending jobs (a producer's scope: its own); how many changed."""
        values = {"status": Status.CANCELLED.value, "finished_at": bindparam("now"),
                  "updated_at": bindparam("now")}
        detail = _filter_detail(ids, None, type, priority)
        return self._bulk(Tally(actor, "jobs.cancel", None, detail), (Status.PENDING,), values,
                          ids=ids, scope=scope, type=type, priority=priority, batch=batch)

    def _bulk(self, tally: Tally, statuses: Sequence[Status], values: dict[str, Any], *,
              ids: Sequence[int] | None, scope: Scope, type: str | None,
              priority: int | None, batch: int) -> int:
        cond = scope_conditions(scope)
        if type is not None:
            cond.append(jobs.c.type == type)
        if priority is not None:
            cond.append(jobs.c.priority == priority)
        postgres = self.engine.dialect.name == "postgresql"
        total = 0
        if ids is not None:
            wanted, started = sorted(set(ids)), 0.0
            for start in range(0, len(wanted), batch):
                if start:
                    self._yield_lock(started, postgres)
                chunk = wanted[start:start + batch]
                started = time.perf_counter()
                total += self._bulk_batch(tally, jobs.c.id.in_(chunk), statuses, cond, values,
                                          batch, postgres)[0]
            return total
        # One status at a time, so each batch is a walk of (status, ...) indexes by id.
        for status in statuses:
            last = 0
            while True:
                started = time.perf_counter()
                changed, found, last = self._bulk_batch(
                    tally, jobs.c.id > last, (status,), cond, values, batch, postgres)
                total += changed
                if found < batch:
                    break
                self._yield_lock(started, postgres)
        return total

    @staticmethod
    def _yield_lock(started: float, postgres: bool) -> None:
        """On SQLite, leave the write lock free as long as the batch held it.

        SQLite's lock is not fair: a loop that begins its next transaction at once keeps
        winning, while a waiting claim backs off (up to 100 ms a try) and starves
        (measured: 48 claims/s instead of 230, the slowest 1.3 s). Pausing as long as
        the batch took gives waiting writers their turn, at half the bulk's speed.
        PostgreSQL needs no pause: a bulk batch locks only its own rows (SKIP LOCKED).
        """
        if not postgres:
            time.sleep(max(MIN_PAUSE, time.perf_counter() - started))

    def _bulk_batch(self, tally: Tally, where: Any, statuses: Sequence[Status],
                    cond: list[Any], values: dict[str, Any], batch: int,
                    postgres: bool) -> tuple[int, int, int]:
        """One transaction: pick up to ``batch`` matching ids, change them, count them."""
        state = jobs.c.status.in_([s.value for s in statuses])
        pick = (select(jobs.c.id).where(where, state, *cond).order_by(jobs.c.id).limit(batch))
        if postgres:
            pick = pick.with_for_update(skip_locked=True)  # a row a claim holds is not ours
        with self._write.begin() as conn:
            now = self.clock()
            found = conn.execute(pick).scalars().all()
            if not found:
                return 0, 0, 0
            changed = conn.execute(update(jobs).where(jobs.c.id.in_(found), state)
                                   .values(**values), {"now": now}).rowcount
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

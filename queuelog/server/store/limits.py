"""Flow control in the database: the limits in force per type, and each type's token bucket.

The config's limits (``JOB_TYPES``) are the default; ``PUT /types/{type}/limits`` writes an
override into the type's limiter row (``type_limits``) and ``DELETE`` clears it, so every app
server sees the same limits at its next claim. The bucket (``tokens`` at ``refilled_at``) is
refilled lazily: whoever reads it computes the tokens now, and only a claim that spends
tokens writes them back. The claim-time decision itself is ``claim_policy.py``'s.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

from sqlalchemy import (BigInteger, Connection, Engine, Float, bindparam, case, cast, func,
                        literal, or_, select, update)

from queuelog.model.jobs import Status
from queuelog.model.limits import NONE, Limits
from queuelog.server.store.audit import record
from queuelog.server.store.prepared import Prepared
from queuelog.server.store.reads import status_is
from queuelog.server.store.part import Context, Part
from queuelog.server.store.tables import job_counts, jobs, paused_types, type_limits

ROWS = select(type_limits)
_LOCK = (select(type_limits).where(type_limits.c.type.in_(bindparam("types", expanding=True)))
         .order_by(type_limits.c.type))  # in name order, so two claims cannot deadlock
_RUNNING = (select(jobs.c.type, func.count()).where(
    status_is(Status.RUNNING), jobs.c.type.in_(bindparam("types", expanding=True)))
    .group_by(jobs.c.type))  # the (status, type, id) index; expired leases still count
# Where the triggers keep the counts in the writing transaction itself (SQLite: no deltas),
# the running count is one row per type, not a walk of every running job of the type.
_RUNNING_KEPT = (select(job_counts.c.type, job_counts.c.n).where(
    job_counts.c.status == Status.RUNNING.value,
    job_counts.c.type.in_(bindparam("types", expanding=True))))
# The claim's first read: each row with its type's running jobs where a concurrency may be
# in force (the row's, or the config's: :ctypes), so no second statement counts them.
# NULL elsewhere. On PostgreSQL the count is a hint, checked again under the lock.
def _rows_counting(running: Any) -> Any:
    counted = or_(type_limits.c.concurrency.is_not(None),
                  type_limits.c.type.in_(bindparam("ctypes", expanding=True)))
    return select(type_limits, case((counted, running), else_=None).label("running"))


_ROWS_RUNNING = _rows_counting(select(func.count()).where(
    status_is(Status.RUNNING), jobs.c.type == type_limits.c.type).scalar_subquery())
_ROWS_RUNNING_KEPT = _rows_counting(func.coalesce(select(job_counts.c.n).where(
    job_counts.c.status == Status.RUNNING.value, job_counts.c.type == type_limits.c.type)
    .scalar_subquery(), 0))
_SPEND = (update(type_limits).where(type_limits.c.type == bindparam("t"))
          .values(tokens=bindparam("tokens"), refilled_at=bindparam("now")))
# PostgreSQL, sent right behind the lock (one pipeline): the bucket refilled and spent from
# its row as it is now (the lock taken, this statement's snapshot is later), and the type's
# running jobs counted, in one statement. :size NULL: no rate in force (tokens NULL). The
# claim checks what it returns: tokens below 0, or more running than the concurrency, is
# an overrun; so is a limit changed since the claim's reading (the lock's row says).
_SIZE = cast(bindparam("size"), Float)  # CAST: an untyped NULL has no type to infer
_PER_S = cast(bindparam("per_s"), Float)
_NOW = bindparam("now", type_=BigInteger)
# tokens_now's arithmetic in its order (elapsed / 1e6 * per second), so that both sides'
# doubles agree on when a whole token is there.
_REFILLED = case(
    (or_(type_limits.c.tokens.is_(None), type_limits.c.refilled_at.is_(None)), _SIZE),
    else_=func.least(_SIZE, type_limits.c.tokens + cast(func.greatest(
        0, _NOW - type_limits.c.refilled_at), Float) / literal(1e6, Float) * _PER_S))
_SPEND_COUNT = (update(type_limits).where(type_limits.c.type == bindparam("t"))
                .values(tokens=case((_SIZE.is_(None), None),
                                    else_=_REFILLED - cast(bindparam("n"), Float)),
                        refilled_at=_NOW)
                .returning(type_limits.c.tokens, select(func.count()).where(
                    status_is(Status.RUNNING), jobs.c.type == type_limits.c.type)
                    .scalar_subquery().label("running")))


@dataclasses.dataclass(frozen=True)
class FlowState:
    """One type's limits in force and why a claim would skip it now (None: it would not)."""

    limits: Limits
    running: int
    limited: str | None       # "paused", "concurrency", "rate" or None
    tokens: float | None      # the bucket now (None without a rate)


def in_force(configured: Mapping[str, Limits], rows: Sequence[Any]) -> dict[str, Limits]:
    """The limits in force per type: a row's override, else the config's."""
    out = dict(configured)
    for r in rows:
        if r.overridden:
            out[r.type] = Limits(r.concurrency, r.rate, r.burst)
    return out


def tokens_now(limits: Limits, row: Any, now: int) -> float | None:
    """The bucket's tokens at ``now`` (full when never spent); None without a rate."""
    bucket = limits.bucket()
    if bucket is None:
        return None
    size, per_second = bucket
    if row is None or row.tokens is None or row.refilled_at is None:
        return size
    return min(size, row.tokens + max(0, now - row.refilled_at) / 1e6 * per_second)


def token_due_us(limits: Limits, tokens: float, now: int) -> int:
    """When the bucket next holds a whole token."""
    _, per_second = limits.bucket() or (0.0, 1.0)
    return now + max(1, math.ceil((1.0 - tokens) / per_second * 1e6))


class Limiter:
    """The limiter's statements, compiled once for one store (prepared.py): the claim
    runs them in every transaction where a limit is in force."""

    def __init__(self, engine: Engine, backend: Any) -> None:
        sa_dialect = engine.dialect
        self.backend = backend
        self._rows = Prepared(ROWS, sa_dialect)
        self._rows_running = Prepared(_ROWS_RUNNING_KEPT if backend.counts_in_place
                                      else _ROWS_RUNNING, sa_dialect)
        self._lock = Prepared(backend.for_update(_LOCK), sa_dialect)
        self._running = Prepared(_RUNNING_KEPT if backend.counts_in_place else _RUNNING,
                                 sa_dialect)
        self._spend = Prepared(_SPEND, sa_dialect)
        self._spend_count = Prepared(_SPEND_COUNT, sa_dialect)

    def rows(self, conn: Connection) -> list[Any]:
        """Every limiter row (a type's override and its bucket)."""
        return self._rows.rows(conn, {})

    def rows_counting_read(self, concurrency_types: Sequence[str]
                           ) -> tuple[Prepared, Mapping[str, Any]]:
        """The read of every limiter row with ``running``, its type's running jobs where
        the row or ``concurrency_types`` (the config's) give it a concurrency, else None:
        a statement and its parameters (sent with another read: ``Prepared.together``)."""
        return self._rows_running, {"ctypes": list(concurrency_types)}

    def running(self, conn: Connection, types: Sequence[str]) -> dict[str, int]:
        """Running jobs per type (leases run out included: they count until taken back)."""
        if not types:
            return {}
        return {t: int(n) for t, n in self._running.rows(conn, {"types": list(types)})}

    def lock(self, conn: Connection, types: Sequence[str]) -> dict[str, Any]:
        """Lock the limiter rows of ``types`` for this transaction (made first if missing)."""
        rows = {r.type: r for r in self._lock.rows(conn, {"types": list(types)})}
        missing = [t for t in types if t not in rows]
        if missing:
            conn.execute(self.backend.insert_ignore(type_limits), [{"type": t} for t in missing])
            rows = {r.type: r for r in self._lock.rows(conn, {"types": list(types)})}
        return rows

    def lock_spend_count(self, conn: Connection, taken: Mapping[str, int],
                         limits: Mapping[str, Limits], now: int,
                         ) -> tuple[dict[str, Any], dict[str, Any]]:
        """PostgreSQL: lock the limiter rows of the types ``taken`` (type -> jobs claimed),
        and, in the same round trip, spend each bucket (as ``limits`` say) and count each
        type's running jobs. The locked rows, and per type (tokens left, running) or
        nothing where its row is missing (none is made here)."""
        types = sorted(taken)
        reads: list[Any] = [(self._lock, {"types": types})]
        for t in types:
            bucket = limits[t].bucket()
            size, per_s = bucket if bucket is not None else (None, 0.0)
            reads.append((self._spend_count, {"t": t, "n": float(taken[t]), "now": now,
                                              "size": size, "per_s": per_s}))
        got = Prepared.together(conn, reads, pipelined=self.backend.pipelines)
        rows = {r.type: r for r in got[0]}
        return rows, {t: r[0] for t, r in zip(types, got[1:]) if r}

    def spend(self, conn: Connection, now: int, left_tokens: Mapping[str, float]) -> None:
        """Write back the buckets a claim spent from."""
        if left_tokens:
            self._spend.many(conn, [{"t": t, "tokens": v, "now": now}
                                    for t, v in left_tokens.items()])


class TypeLimits(Part):
    """Limit verbs: a type's limits changed by an admin, and each type's flow state."""

    def __init__(self, ctx: Context, configured: Mapping[str, Limits]) -> None:
        super().__init__(ctx)
        self.configured_limits = dict(configured)
        self.limiter = Limiter(self.engine, self.backend)


    def limits_in_force(self, conn: Connection) -> dict[str, Limits]:
        """Every type's limits now (types with none are left out)."""
        got = in_force(self.configured_limits, self.limiter.rows(conn))
        return {t: lim for t, lim in got.items() if lim.any}

    def set_limits(self, job_type: str, fields: Mapping[str, Any], actor: str) -> None:
        """Change some of a type's limits (a field left out keeps its value, None removes
        it); audited as ``type.limits`` in the same transaction. ValueError if invalid."""
        with self._write.begin() as conn:
            now = self.clock()
            row = self.limiter.lock(conn, [job_type])[job_type]
            old = in_force(self.configured_limits, [row]).get(job_type, NONE)
            new = old.changed(dict(fields))  # ValueError: burst without a rate
            conn.execute(update(type_limits).where(type_limits.c.type == job_type).values(
                overridden=True, concurrency=new.concurrency, rate=new.rate, burst=new.burst,
                updated_at=now, updated_by=actor[:100]))
            record(conn, now, actor, "type.limits", job_type, {
                "concurrency": new.concurrency, "rate": new.rate, "burst": new.burst})
            self.notifier.notify(conn)  # a raised limit may make due jobs claimable

    def reset_limits(self, job_type: str, actor: str) -> None:
        """Back to the configured limits; audited as ``type.limits.reset``."""
        with self._write.begin() as conn:
            now = self.clock()
            self.limiter.lock(conn, [job_type])
            conn.execute(update(type_limits).where(type_limits.c.type == job_type).values(
                overridden=False, concurrency=None, rate=None, burst=None,
                updated_at=now, updated_by=actor[:100]))
            self.notifier.notify(conn)
            record(conn, now, actor, "type.limits.reset", job_type, {})

    def flow_states(self, types: Sequence[str]) -> dict[str, FlowState]:
        """Per type: limits in force, running jobs and why a claim would skip it now."""
        now = self.clock()
        with self._read.connect() as conn:
            rows = {r.type: r for r in self.limiter.rows(conn)}
            limits = in_force(self.configured_limits, list(rows.values()))
            running = self.limiter.running(conn, list(types))
            paused = set(conn.execute(select(paused_types.c.type)).scalars())
        out = {}
        for t in types:
            lim = limits.get(t, NONE)
            tokens = tokens_now(lim, rows.get(t), now)
            n = running.get(t, 0)
            why = ("paused" if t in paused else
                   "concurrency" if lim.concurrency is not None and n >= lim.concurrency else
                   "rate" if tokens is not None and tokens < 1 else None)
            out[t] = FlowState(lim, n, why, tokens)
        return out

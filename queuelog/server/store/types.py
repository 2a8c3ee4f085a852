"""Job types: pause and resume (kept in the database), and a summary per type."""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

from sqlalchemy import bindparam, insert, select
from sqlalchemy.exc import IntegrityError

from queuelog.model.jobs import Status
from queuelog.model.problems import Conflict
from queuelog.server.store import minutes
from queuelog.server.store.audit import record
from queuelog.server.store.limits import FlowState
from queuelog.server.store.reads import status_is
from queuelog.server.store.part import Context, Part
from queuelog.server.store.tables import jobs, paused_types

PAUSE_TRIES = 3  # rounds set_paused looks again after losing a race to another admin


@dataclasses.dataclass(frozen=True)
class TypeSummary:
    """One configured job type as ``GET /types`` and ``/ui/types`` show it."""

    name: str
    paused: bool
    paused_at: int | None
    paused_by: str | None
    counts: dict[str, int]            # per status (exact, from counts.py), at most the cap + 1
    oldest_pending_us: int            # age of the oldest due pending job, 0 when none
    completed_last_hour: int          # the chart's hour (minutes.py): its 60 whole minutes
    failed_last_hour: int             # failed attempts, lease expiries included
    flow: FlowState | None = None     # limits in force, running, why a claim skips it


@functools.lru_cache(maxsize=8)
def _summary_statement(n_types: int) -> Any:
    """The oldest due run_at per type, in one SELECT."""
    cols = []
    for i in range(n_types):
        t = bindparam(f"t{i}")
        # The (type, run_at) partial index: the first entry of the type is the answer.
        cols.append(select(jobs.c.run_at).where(status_is(Status.PENDING), jobs.c.type == t,
                                                jobs.c.run_at <= bindparam("now"))
                    .order_by(jobs.c.run_at).limit(1).scalar_subquery().label(f"oldest_{i}"))
    return select(*cols)


class Types(Part):
    """Type verbs: pausing, and each type's summary (counts from ``stats``, flow state from
    ``limits``)."""

    def __init__(self, ctx: Context, *, stats: Any, limits: Any) -> None:
        super().__init__(ctx)
        self._stats = stats
        self._limits = limits

    # -- job types ---------------------------------------------------------------
    def paused(self) -> dict[str, tuple[int, str]]:
        """Paused types: name -> (paused_at, paused_by)."""
        with self._read.connect() as conn:
            return {r.type: (r.paused_at, r.paused_by)
                    for r in conn.execute(select(paused_types)).all()}

    def type_summaries(self, types: Sequence[str], cap: int) -> list[TypeSummary]:
        """A summary of each of ``types``; counts stop at ``cap`` + 1 (read as "cap+")."""
        now = self.clock()
        params: dict[str, Any] = {f"t{i}": t for i, t in enumerate(types)}
        with self._read.connect() as conn:
            row = conn.execute(_summary_statement(len(types)), {**params, "now": now}
                               ).one()._mapping if types else {}
            hour = minutes.per_type(conn, now)
            paused = {r.type: r for r in conn.execute(select(paused_types)).all()}
        flows = self._limits.flow_states(types)
        counts = self._stats.job_counts()
        out = []
        for i, name in enumerate(types):
            oldest = row[f"oldest_{i}"]
            p = paused.get(name)
            out.append(TypeSummary(
                name=name, paused=p is not None, paused_at=p and p.paused_at,
                paused_by=p and p.paused_by,
                counts={s.value: min(counts.get((s.value, name), 0), cap + 1)
                        for s in Status},
                oldest_pending_us=0 if oldest is None else max(0, now - oldest),
                completed_last_hour=hour.get(name, (0, 0))[0],
                failed_last_hour=hour.get(name, (0, 0))[1], flow=flows[name]))
        return out

    def set_paused(self, job_type: str, paused: bool, actor: str) -> None:
        """Pause or resume a type (idempotent); audited as ``type.pause``/``type.resume``.

        Raises Conflict (409) if it cannot be settled: never returns having done nothing.
        """
        for _ in range(PAUSE_TRIES):
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
                        self.notifier.notify(conn)  # its due jobs can be claimed again
                    record(conn, now, actor, "type.pause" if paused else "type.resume", job_type,
                           {"changed": (exists is None) == paused})
                    return
            except IntegrityError:
                continue  # PostgreSQL: another admin paused it at the same instant; look again
        # Every round lost a race (or the row is refused for another reason): say so, so
        # that the caller answers a problem instead of a pause that never happened.
        verb = "pause" if paused else "resume"
        raise Conflict(f"Could not {verb} type {job_type!r}: it kept changing; try again.")

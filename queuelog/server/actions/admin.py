"""Job types (pause, resume, limits), workers and the audit log: what a status board reads
and an admin changes (every change audited in its own transaction)."""
from __future__ import annotations

from typing import Any, Sequence

from queuelog.model.problems import JobNotFound, ValidationFailed
from queuelog.server.actions.gate import BOARD, PEOPLE, SYSTEM, gate
from queuelog.server.auth import Principal
from queuelog.server.db import get_store
from queuelog.server.store import Event, Timing, TypeSummary, WorkerSummary


@gate(*BOARD)
def workers(who: Principal) -> list[WorkerSummary]:
    """Every worker key holding a job or that claimed in the last 24 hours."""
    return get_store().workers()


@gate(*BOARD)
def job_types(who: Principal, types: Sequence[str], cap: int) -> list[TypeSummary]:
    """A summary of every configured type: paused, capped counts, the last hour."""
    return get_store().type_summaries(list(types), cap)


@gate(*PEOPLE)
def job_timings(who: Principal) -> dict[str, Timing]:
    """Viewer, admin: per type, p50 and p95 of run and wait times over the last hour (the
    dashboard's; /metrics has the histograms for machines)."""
    return get_store().timings()


@gate("admin")
def set_paused(who: Principal, job_type: str, paused: bool, types: Sequence[str],
               cap: int) -> TypeSummary:
    """Admin: pause or resume a configured type (404 otherwise); return its summary."""
    _configured(job_type, types)
    store = get_store()
    store.set_paused(job_type, paused, who.name)
    return store.type_summaries([job_type], cap)[0]


@gate("admin")
def set_limits(who: Principal, job_type: str, fields: dict[str, Any], types: Sequence[str],
               cap: int) -> TypeSummary:
    """Admin: change a configured type's limits (404 otherwise; a field left out keeps its
    value, None removes it); audited; return its summary."""
    _configured(job_type, types)
    try:
        get_store().set_limits(job_type, fields, who.name)
    except ValueError as exc:  # a burst without a rate in force
        raise ValidationFailed(f"burst: {exc}", errors=[{"field": "burst",
                                                         "detail": f"{exc}."}]) from None
    return get_store().type_summaries([job_type], cap)[0]


@gate("admin")
def reset_limits(who: Principal, job_type: str, types: Sequence[str], cap: int) -> TypeSummary:
    """Admin: a configured type's limits back to the config's (audited); its summary."""
    _configured(job_type, types)
    get_store().reset_limits(job_type, who.name)
    return get_store().type_summaries([job_type], cap)[0]


def _configured(job_type: str, types: Sequence[str]) -> None:
    if job_type not in types:
        raise JobNotFound(f"No job type {job_type!r} is configured.")


@gate("admin", SYSTEM)
def audit_events(who: Principal, *, action: str | None = None, actor: str | None = None,
                 limit: int = 50, before: int | None = None) -> tuple[list[Event], int | None]:
    """Admin or the command line: a newest-first page of audit events."""
    return get_store().audit_events(action=action, actor=actor, limit=limit, before=before)


@gate(SYSTEM)
def purge_audit(who: Principal, older_than_seconds: int) -> int:
    """The command line: delete audit events past the cutoff; recorded as ``audit.purge``."""
    return get_store().purge_audit(older_than_seconds * 1_000_000, who.name)

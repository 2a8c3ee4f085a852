"""Producers' and admins' verbs on jobs: enqueue (the key's limits, the idempotency hash),
cancel and retry, one or in bulk, and the command line's purge."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from typing import Sequence

from queuelog.model.jobs import Job, Priority, Status
from queuelog.model.problems import Forbidden
from queuelog.server import metrics, tracing
from queuelog.server.actions.gate import SYSTEM, gate, scope_of
from queuelog.server.auth import Principal
from queuelog.server.db import get_store
from queuelog.server.requests.check import MAX_ERRORS
from queuelog.server.store import Item, NewJob

Refusals = list[dict[str, str]]


@gate("producer", "admin")
def enqueue(who: Principal, new: NewJob) -> tuple[Job, bool]:
    """Add a job as ``who`` (403 past its key's limits); return it and whether it is new
    (False: an idempotent replay)."""
    refusals = _limits(who, new, "")
    if refusals:
        raise Forbidden(refusals[0]["detail"])
    job, created = get_store().enqueue(_own(who, new))
    if created:  # a replay is no new job: no count (and the store woke no one), no span
        metrics.jobs_enqueued(job.type)
        if tracing.ENABLED:
            tracing.enqueued([job], who.name)
    return job, created


@gate("producer", "admin")
def enqueue_many(who: Principal, news: Sequence[NewJob]) -> tuple[list[Job], list[int]]:
    """Add many jobs as ``who``, all or nothing (403 naming the items past the key's
    limits, at most MAX_ERRORS); return them and the indexes of idempotent replays."""
    refusals = [r for i, new in enumerate(news) for r in _limits(who, new, f"jobs[{i}]")]
    if refusals:
        shown = refusals[:MAX_ERRORS]  # as a 422's: 500 refused items made a 106 KB answer
        raise Forbidden("; ".join(f"{e['field']}: {e['detail']}" for e in shown), errors=shown)
    jobs, replayed = get_store().enqueue_many([_own(who, new) for new in news])
    skip = set(replayed)
    fresh = Counter(job.type for i, job in enumerate(jobs) if i not in skip)
    for job_type, n in fresh.items():
        metrics.jobs_enqueued(job_type, n)
    if tracing.ENABLED:
        tracing.enqueued([job for i, job in enumerate(jobs) if i not in skip], who.name)
    return jobs, replayed


def _limits(who: Principal, new: NewJob, prefix: str) -> Refusals:
    """What a producer key's limits refuse in ``new`` (its types, its max priority)."""
    if who.role != "producer":
        return []
    at = f"{prefix}." if prefix else ""
    out: Refusals = []
    if who.types is not None and new.type not in who.types:
        out.append({"field": at + "type",
                    "detail": f"This key may not enqueue jobs of type {new.type!r}."})
    if new.priority > who.max_priority:
        out.append({"field": at + "priority", "detail":
                    f"This key may not enqueue at priority "
                    f"{Priority.from_value(new.priority).label!r} (its maximum is "
                    f"{Priority.from_value(who.max_priority).label!r})."})
    return out


def _own(who: Principal, new: NewJob) -> NewJob:
    """``new`` as ``who``'s job, with the hash its idempotency key is checked against, and
    (with parents) the jobs ``who`` may name as parents: those it may read."""
    if new.depends_on:
        new = dataclasses.replace(new, parents_scope=scope_of(who))
    if new.idempotency_key is None and new.producer == who.name and new.request_hash is None:
        return new  # already so (the API's parse names the producer): no copy per job
    digest = None if new.idempotency_key is None else request_hash(new)
    return dataclasses.replace(new, producer=who.name, request_hash=digest)


def request_hash(new: NewJob) -> str:
    """What makes two enqueues with one idempotency key the same request (SHA-256)."""
    # The stored payload is compact JSON in the client's key order: parsed again so the
    # hash is sorted, as every hash stored so far was.
    delay = new.delay_seconds
    fields = [new.type, json.loads(new.payload_json), new.priority, new.max_retries,
              new.run_at, float(delay) if delay else None]  # 0, 0.0, omitted: "now"
    if new.depends_on or new.on_parent_failure not in (None, "cancel"):
        # Workflows' fields, only when given: every hash stored before them stays equal.
        fields += [[{"item": p.n} if isinstance(p, Item) else p for p in new.depends_on],
                   new.on_parent_failure or "cancel"]
    return hashlib.sha256(json.dumps(fields, sort_keys=True,
                                     separators=(",", ":")).encode()).hexdigest()


@gate("admin")
def retry(who: Principal, job_id: int) -> Job:
    """Admin: a failed or cancelled job back to pending with fresh retries (audited)."""
    return get_store().retry(job_id, actor=who.name)


@gate("admin")
def run_now(who: Principal, job_id: int) -> Job:
    """Admin: a delayed or retrying pending job due now (audited); 409 unless pending."""
    return get_store().run_now(job_id, actor=who.name)


@gate("producer", "admin")
def cancel(who: Principal, job_id: int) -> Job:
    """Cancel a pending or running job: a producer its own (404 for others'), an admin any
    (audited). A running job's holder is fenced off: its next call is a 409 ``cancelled``."""
    return get_store().cancel(job_id, scope_of(who), actor=who.name if who.is_admin else None)


@gate("admin")
def bulk_retry(who: Principal, *, ids: Sequence[int] | None = None,
               statuses: Sequence[Status] = (Status.FAILED, Status.CANCELLED),
               type: str | None = None, priority: int | None = None) -> int:
    """Admin: retry every failed or cancelled job matching, in bounded transactions."""
    return get_store().bulk_retry(who.name, ids=ids, statuses=statuses, type=type,
                                  priority=priority)


@gate("producer", "admin")
def bulk_cancel(who: Principal, *, ids: Sequence[int] | None = None,
                statuses: Sequence[Status] | None = None, type: str | None = None,
                priority: int | None = None) -> int:
    """Cancel every pending and blocked job matching (``statuses``: only those): a producer
    only its own; admins are audited."""
    return get_store().bulk_cancel(who.name if who.is_admin else None, ids=ids,
                                   statuses=statuses, scope=scope_of(who), type=type,
                                   priority=priority)


@gate(SYSTEM)
def purge(who: Principal, older_than_seconds: int, statuses: Sequence[Status]) -> int:
    """The command line: delete finished jobs past the cutoff; recorded as ``jobs.purge``
    even when none."""
    return get_store().purge(older_than_seconds * 1_000_000, statuses, actor=who.name,
                             audit_empty=True)


@gate(SYSTEM)
def count_purgeable(who: Principal, older_than_seconds: int, statuses: Sequence[Status]) -> int:
    """The command line: how many jobs ``purge`` would delete now (its dry run)."""
    return get_store().count_purgeable(older_than_seconds * 1_000_000, statuses)

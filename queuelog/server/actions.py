"""The service layer: one verb per thing a person or program can do.

Each verb authorizes, calls the store with the actor (the store writes the audit event in
the change's own transaction), wakes long polls when jobs may have become due, and counts
its events for the metrics (so the single and the batch routes count alike). The
API, the dashboard and the command line all call these, so a rule is written once: who
may retry or cancel what, that error text is for admins only, that admin changes are
audited. The command line acts as ``cli``.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Sequence

from queuelog.server import metrics
from queuelog.server.auth import Principal
from queuelog.model.problems import Forbidden, JobNotFound, QueuelogError
from queuelog.model.jobs import Job, Status
from queuelog.server.store import ALL, ApiKey, Event, NewJob, Scope, TypeSummary, get_store
from queuelog.server.store.audit import ACTIONS

AUDIT_ACTIONS = ACTIONS     # the audit log's action names, for the views that filter on them
CLI = "cli"                # the actor of every change made from the command line
RETENTION = "retention"    # the actor of automatic purges


def _wake() -> None:
    # Imported here: the API package imports this module for job_view.
    from queuelog.server.api import notify
    notify()


def _admin(who: Principal) -> None:
    if not who.is_admin:
        raise Forbidden("Only an admin may do this.")


def scope_of(who: Principal) -> Scope:
    """Which jobs a principal may read: a producer its own, a worker those it held."""
    if who.role == "producer":
        return Scope(producer=who.name)
    if who.role == "worker":
        return Scope(worker=who.name)
    return ALL


# -- what a reader may see ---------------------------------------------------------
def visible(job: Job, who: Principal) -> Job:
    """The job as ``who`` may see it: no error text at all for non-admins (V-10)."""
    if who.is_admin:
        return job
    attempts = None if job.attempts is None else tuple(
        dataclasses.replace(a, error=None) for a in job.attempts)
    return dataclasses.replace(job, error=None, attempts=attempts)


def job_view(job: Job, who: Principal) -> dict[str, Any]:
    """A job as JSON for ``who``: error text for admins, the idempotency key for its owner."""
    return visible(job, who).to_dict(
        show_error=who.is_admin,
        show_key=who.is_admin or (who.role == "producer" and job.producer == who.name))


# -- the queue's hot path: producers and workers -------------------------------------------
# The views have checked the body and the key's limits (types, priority: 403 per field).
def enqueue(new: NewJob) -> tuple[Job, bool]:
    """Add a job; return it and whether it is new (False: an idempotent replay)."""
    job, created = get_store().enqueue(new)
    if created:  # a replay is no new job: no wake-up, no count
        _wake()
        metrics.jobs_enqueued(job.type)
    return job, created


def enqueue_many(news: Sequence[NewJob]) -> tuple[list[Job], list[int]]:
    """Add many jobs, all or nothing; return them and the indexes of idempotent replays."""
    jobs, replayed = get_store().enqueue_many(news)
    skip = set(replayed)
    fresh = Counter(job.type for i, job in enumerate(jobs) if i not in skip)
    if fresh:
        _wake()
    for job_type, n in fresh.items():
        metrics.jobs_enqueued(job_type, n)
    return jobs, replayed


def claim(who: Principal, max_jobs: int, *, lease_seconds: float | None = None,
          types: Sequence[str] | None = None) -> list[Job]:
    """Claim up to ``max_jobs`` due jobs now (the long poll calls this until one is due)."""
    return get_store().claim_many(who.name, max_jobs, lease_seconds=lease_seconds, types=types)


def heartbeat(who: Principal, job_id: int, attempt: int, *,
              lease_seconds: float | None = None) -> Job:
    """Extend the lease of a job ``who`` holds at this attempt."""
    return get_store().heartbeat(job_id, who.name, attempt, lease_seconds=lease_seconds)


def complete(who: Principal, job_id: int, attempt: int, result_json: str | None) -> Job:
    """Complete a held attempt (counted as ``completed``)."""
    job = get_store().complete(job_id, who.name, attempt, result_json)
    _finished([job], "completed")
    return job


def complete_many(who: Principal, items: Sequence[tuple[int, int, str | None]],
                  ) -> list[Job | QueuelogError]:
    """Complete many held attempts; each item a job or its refusal (only jobs count)."""
    done = get_store().complete_many(who.name, items)
    _finished(done, "completed")
    return done


def fail(who: Principal, job_id: int, attempt: int, error: str, *, retry: bool = True,
         retry_in: float | None = None) -> Job:
    """Fail a held attempt: back to pending after backoff, or failed for good."""
    job = get_store().fail(job_id, who.name, attempt, error, retry=retry, retry_in=retry_in)
    _finished([job], "failed")
    return job


def fail_many(who: Principal, items: Sequence[tuple[int, int, str, bool, float | None]],
              ) -> list[Job | QueuelogError]:
    """Fail many held attempts; each item a job or its refusal (only jobs count)."""
    done = get_store().fail_many(who.name, items)
    _finished(done, "failed")
    return done


def _finished(done: Sequence[Job | QueuelogError], outcome: str) -> None:
    """Count the attempts that ended (a retried fail is a ``failed`` attempt too), and
    wake long polls if one went back to pending: it is due once its backoff is over."""
    jobs = [got for got in done if isinstance(got, Job)]
    for job in jobs:
        metrics.attempt_finished(job.type, outcome)
    if any(job.status is Status.PENDING for job in jobs):
        _wake()


# -- jobs -------------------------------------------------------------------------------
def retry(who: Principal, job_id: int) -> Job:
    """Admin: a failed or cancelled job back to pending with fresh retries (audited)."""
    _admin(who)
    job = get_store().retry(job_id, actor=who.name)
    _wake()
    return job


def cancel(who: Principal, job_id: int) -> Job:
    """Cancel a pending job: a producer its own (404 for others'), an admin any (audited)."""
    if who.role not in ("producer", "admin"):
        raise Forbidden("Only a job's producer or an admin may cancel it.")
    return get_store().cancel(job_id, scope_of(who), actor=who.name if who.is_admin else None)


def bulk_retry(who: Principal, *, ids: Sequence[int] | None = None,
               statuses: Sequence[Status] = (Status.FAILED, Status.CANCELLED),
               type: str | None = None, priority: int | None = None) -> int:
    """Admin: retry every failed or cancelled job matching, in bounded transactions."""
    _admin(who)
    count = get_store().bulk_retry(who.name, ids=ids, statuses=statuses, type=type,
                                   priority=priority)
    if count:
        _wake()
    return count


def bulk_cancel(who: Principal, *, ids: Sequence[int] | None = None, type: str | None = None,
                priority: int | None = None) -> int:
    """Cancel every pending job matching: a producer only its own; admins are audited."""
    if who.role not in ("producer", "admin"):
        raise Forbidden("Only a producer or an admin may cancel jobs.")
    return get_store().bulk_cancel(who.name if who.is_admin else None, ids=ids,
                                   scope=scope_of(who), type=type, priority=priority)


def purge(actor: str, older_than_seconds: int, statuses: Sequence[Status]) -> int:
    """Delete finished jobs past the cutoff; recorded as ``jobs.purge`` even when none."""
    return get_store().purge(older_than_seconds * 1_000_000, statuses, actor=actor,
                             audit_empty=True)


# -- job types ----------------------------------------------------------------------------
def job_types(types: Sequence[str], cap: int) -> list[TypeSummary]:
    """A summary of every configured type (viewer, admin, metrics)."""
    return get_store().type_summaries(list(types), cap)


def set_paused(who: Principal, job_type: str, paused: bool, types: Sequence[str],
               cap: int) -> TypeSummary:
    """Admin: pause or resume a configured type (404 otherwise); return its summary."""
    _admin(who)
    if job_type not in types:
        raise JobNotFound(f"No job type {job_type!r} is configured.")
    store = get_store()
    store.set_paused(job_type, paused, who.name)
    if not paused:
        _wake()  # its due jobs can be claimed again
    return store.type_summaries([job_type], cap)[0]


# -- the audit log ---------------------------------------------------------------------
def audit_events(who: Principal | None, *, action: str | None = None, actor: str | None = None,
                 limit: int = 50, before: int | None = None) -> tuple[list[Event], int | None]:
    """Admin (or the command line, ``who`` None): a newest-first page of audit events."""
    if who is not None:
        _admin(who)
    return get_store().audit_events(action=action, actor=actor, limit=limit, before=before)


def purge_audit(actor: str, older_than_seconds: int) -> int:
    """Delete audit events past the cutoff; recorded as ``audit.purge``."""
    return get_store().purge_audit(older_than_seconds * 1_000_000, actor)


# -- keys and users (the command line; ``actor`` is ``cli``) ------------------------------
def create_key(actor: str, name: str, role: str, *, types: list[str] | None,
               max_priority: int) -> tuple[ApiKey, str]:
    """Create an API key; return it and its token (never recorded)."""
    return get_store().accounts.create_key(name, role, types=types, max_priority=max_priority,
                                           actor=actor)


def revoke_key(actor: str, name: str) -> bool:
    """Revoke the active key ``name``; False if there is none."""
    return get_store().accounts.revoke_key(name, actor=actor)


def create_user(actor: str, username: str, password_hash: str, role: str) -> None:
    """Add a person (the password hash is stored, never recorded)."""
    get_store().accounts.create_user(username, password_hash, role, actor=actor)


def delete_user(actor: str, username: str) -> bool:
    """Remove a person; False if there is none of that name."""
    return get_store().accounts.delete_user(username, actor=actor)


def set_password(actor: str, username: str, password_hash: str) -> bool:
    """Replace a person's password; False if there is none of that name."""
    return get_store().accounts.set_password(username, password_hash, actor=actor)

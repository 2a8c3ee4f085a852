"""The service layer: one verb per thing a person or program can do, and its rules.

Each verb authorizes (a key's types and max priority, the revoked-key re-check, who may
retry or cancel what, admins only), calls the store (which writes an audit event, when the
verb is audited, in the change's own transaction), wakes long polls when jobs may have
become due (the store's verbs notify every process: wakeups.py), and counts its events for the metrics, so the single and
the batch routes count alike. The API, the dashboard and the command line all call these,
so a rule is written once. The command line acts as ``cli``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from typing import Any, Callable, Mapping, Sequence

from flask import current_app

from queuelog.model.jobs import Done, Job, Priority, Status
from queuelog.model.problems import (Conflict, Forbidden, JobNotFound, QueuelogError,
                                     ValidationFailed)
from queuelog.server import metrics
from queuelog.server.auth import Principal, is_system_name
from queuelog.server.longpoll import PollResult, long_polls
from queuelog.server.sanitize import sanitize_error
from queuelog.server.store import (ALL, ApiKey, Claimed, Event, NewJob, Page, Scope,
                                   ScheduleState, TypeSummary, WorkerSummary, hash_token)
from queuelog.server.db import get_store

CLI = "cli"  # the actor of every change made from the command line (a system name: auth)

Refusals = list[dict[str, str]]


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
    if who.is_admin or (job.error is None and job.attempts is None):
        return job  # nothing to hide: no copy (a claim or complete of a batch, per job)
    attempts = None if job.attempts is None else tuple(
        dataclasses.replace(a, error=None) for a in job.attempts)
    return dataclasses.replace(job, error=None, attempts=attempts)


def get_job(who: Principal, job_id: int) -> Job:
    """One job with its history, if ``who`` may see it (404 otherwise)."""
    return visible(get_store().get(job_id, scope_of(who)), who)


def list_jobs(who: Principal, *, status: Status | None, type: str | None,
              priority: int | None, limit: int, before: int | None,
              schedule: str | None = None) -> Page:
    """A newest-first page of the jobs ``who`` may see (error text as ``visible``)."""
    page = get_store().list_jobs(scope=scope_of(who), status=status, type=type,
                                 priority=priority, limit=limit, before=before,
                                 schedule=schedule)
    return dataclasses.replace(page, jobs=[visible(j, who) for j in page.jobs])


def dashboard_jobs(who: Principal, *, q: str | None = None, **filters: Any) -> Page:
    """The dashboard's page of jobs; ``q`` finds a job by id, or by idempotency key.

    Keys are admins' alone (a viewer's pages show none), so a viewer's ``q`` matches ids
    only: a key typed by a viewer finds nothing rather than revealing which job holds it.
    """
    match_id = match_key = None
    if q is not None:
        digits = q.lstrip("#")
        # 0 matches no job (ids start at 1); a number past BIGINT would be a database error.
        match_id = int(digits) if digits.isdigit() and int(digits) < 2 ** 63 else 0
        match_key = q if who.is_admin else None
    page = get_store().list_jobs(scope=scope_of(who), match_id=match_id, match_key=match_key,
                                 **filters)
    return dataclasses.replace(page, jobs=[visible(j, who) for j in page.jobs])


# -- the queue's hot path: producers and workers -------------------------------------------
def enqueue(who: Principal, new: NewJob) -> tuple[Job, bool]:
    """Add a job as ``who`` (403 past its key's limits); return it and whether it is new
    (False: an idempotent replay)."""
    refusals = _limits(who, new, "")
    if refusals:
        raise Forbidden(refusals[0]["detail"])
    job, created = get_store().enqueue(_own(who, new))
    if created:  # a replay is no new job: no count (and the store woke no one)
        metrics.jobs_enqueued(job.type)
    return job, created


def enqueue_many(who: Principal, news: Sequence[NewJob]) -> tuple[list[Job], list[int]]:
    """Add many jobs as ``who``, all or nothing (403 naming every item past the key's
    limits); return them and the indexes of idempotent replays."""
    refusals = [r for i, new in enumerate(news) for r in _limits(who, new, f"jobs[{i}]")]
    if refusals:
        raise Forbidden("; ".join(f"{e['field']}: {e['detail']}" for e in refusals),
                        errors=refusals)
    jobs, replayed = get_store().enqueue_many([_own(who, new) for new in news])
    skip = set(replayed)
    fresh = Counter(job.type for i, job in enumerate(jobs) if i not in skip)
    for job_type, n in fresh.items():
        metrics.jobs_enqueued(job_type, n)
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
    """``new`` as ``who``'s job, with the hash its idempotency key is checked against."""
    if new.idempotency_key is None and new.producer == who.name and new.request_hash is None:
        return new  # already so (the API's parse names the producer): no copy per job
    digest = None if new.idempotency_key is None else request_hash(new)
    return dataclasses.replace(new, producer=who.name, request_hash=digest)


def request_hash(new: NewJob) -> str:
    """What makes two enqueues with one idempotency key the same request (SHA-256)."""
    # The stored payload is compact JSON in the client's key order: parsed again so the
    # hash is sorted, as every hash stored so far was.
    delay = new.delay_seconds
    return hashlib.sha256(json.dumps(
        # delay_seconds omitted, 0 and 0.0 all mean "now"; 5 and 5.0 are one number.
        [new.type, json.loads(new.payload_json), new.priority, new.max_retries, new.run_at,
         float(delay) if delay else None],
        sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def claim(who: Principal, max_jobs: int, *, lease_seconds: float | None = None,
          types: Sequence[str] | None = None, wait: float = 0,
          connected: Callable[[], bool] = lambda: True) -> PollResult[Job]:
    """Claim up to ``max_jobs`` due jobs of the types ``who`` may claim; with ``wait``,
    look again until one is due, while the key is still active and ``connected``."""
    if types is not None and who.types is not None and not set(types) <= set(who.types):
        raise Forbidden("This key may not claim some of these types.")
    if types is None and who.types is not None:
        types = list(who.types)
    store = get_store()
    # The first look is the request's own, its key just checked by auth; every later one
    # (after a wait) reads the key again with the claim's first reads, so that a key
    # revoked while its claim waits gets no job it could never complete.
    key = hash_token(who.token) if who.token is not None else None
    looks: list[Claimed] = []

    def try_claim() -> list[Job]:
        # No lease given: the store uses the claimed job's type's lease, else LEASE_SECONDS.
        got = store.claim_many(who.name, max_jobs, lease_seconds=lease_seconds, types=types,
                               key=key if looks else None)
        looks.append(got)
        return got

    def still_wanted() -> bool:
        # Nor a client that went away (a stopped worker): nobody would receive the job.
        return connected() and key is not None and not looks[-1].revoked

    def next_due() -> float | None:
        # A delayed job is claimed at its run_at, not at the next safety-net look.
        return store.next_due_in(types if types is not None
                                 else list(current_app.config["JOB_TYPES"]))

    got = long_polls().claim(try_claim, wait, still_wanted, next_due)
    metrics.long_poll_waited(got.waited)  # a claim's time in the histogram is its work
    return got


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
                  ) -> list[Done | QueuelogError]:
    """Complete many held attempts; each item its job's new state or its refusal (only the
    jobs count)."""
    done = get_store().complete_many(who.name, items)
    _finished(done, "completed")
    return done


def fail(who: Principal, job_id: int, attempt: int, error: str, *, retry: bool = True,
         retry_in: float | None = None) -> Job:
    """Fail a held attempt: back to pending after backoff, or failed for good. The raw
    ``error`` is sanitized only once the attempt is fenced (V-10)."""
    job = get_store().fail(job_id, who.name, attempt, error, retry=retry, retry_in=retry_in,
                           clean=_sanitizer())
    _finished([job], "failed")
    return job


def fail_many(who: Principal, items: Sequence[tuple[int, int, str, bool, float | None]],
              ) -> list[Job | QueuelogError]:
    """Fail many held attempts; each item a job or its refusal (only jobs count). An
    item's error text is sanitized only if its fencing passed: a stale item costs none."""
    done = get_store().fail_many(who.name, items, clean=_sanitizer())
    _finished(done, "failed")
    return done


def _sanitizer() -> Callable[[str], str]:
    """Worker error text made safe to store: secrets redacted, cut to MAX_ERROR_BYTES."""
    limit = int(current_app.config["MAX_ERROR_BYTES"])
    return lambda text: sanitize_error(text, limit)


def _finished(done: Sequence[Job | Done | QueuelogError], outcome: str) -> None:
    """Count the attempts that ended (a retried fail is a ``failed`` attempt too)."""
    per_type: dict[str, int] = {}
    for job in done:
        if not isinstance(job, QueuelogError):
            per_type[job.type] = per_type.get(job.type, 0) + 1
    for job_type, n in per_type.items():  # one counter write per type, not per job
        metrics.attempt_finished(job_type, outcome, n)


# -- jobs -------------------------------------------------------------------------------
def retry(who: Principal, job_id: int) -> Job:
    """Admin: a failed or cancelled job back to pending with fresh retries (audited)."""
    _admin(who)
    return get_store().retry(job_id, actor=who.name)


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
    return get_store().bulk_retry(who.name, ids=ids, statuses=statuses, type=type,
                                  priority=priority)


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


# -- workers ------------------------------------------------------------------------------
def workers() -> list[WorkerSummary]:
    """Every worker key holding a job or that claimed in the last 24 hours (viewer+)."""
    return get_store().workers()


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
    return store.type_summaries([job_type], cap)[0]


def set_limits(who: Principal, job_type: str, fields: dict[str, Any], types: Sequence[str],
               cap: int) -> TypeSummary:
    """Admin: change a configured type's limits (404 otherwise; a field left out keeps its
    value, None removes it); audited; return its summary."""
    _admin(who)
    _configured(job_type, types)
    try:
        get_store().set_limits(job_type, fields, who.name)
    except ValueError as exc:  # a burst without a rate in force
        raise ValidationFailed(f"burst: {exc}", errors=[{"field": "burst",
                                                         "detail": f"{exc}."}]) from None
    return get_store().type_summaries([job_type], cap)[0]


def reset_limits(who: Principal, job_type: str, types: Sequence[str], cap: int) -> TypeSummary:
    """Admin: a configured type's limits back to the config's (audited); its summary."""
    _admin(who)
    _configured(job_type, types)
    get_store().reset_limits(job_type, who.name)
    return get_store().type_summaries([job_type], cap)[0]


def _configured(job_type: str, types: Sequence[str]) -> None:
    if job_type not in types:
        raise JobNotFound(f"No job type {job_type!r} is configured.")


# -- schedules (recurring jobs) --------------------------------------------------------
def schedule_tick(name: str, tick: int, new: NewJob) -> Job | None:
    """The ticker: make the job of ``name``'s ``tick`` unless another server did (or it is
    paused); woken and counted like an enqueue."""
    job = get_store().make_tick(name, tick, new)
    if job is not None:
        metrics.jobs_enqueued(job.type)
    return job


def schedule_states(names: Sequence[str]) -> list[ScheduleState]:
    """What the database knows of each schedule (viewer, admin, metrics)."""
    return get_store().schedule_states(list(names))


def set_schedule_paused(who: Principal, name: str, paused: bool,
                        names: Sequence[str]) -> ScheduleState:
    """Admin: pause or resume a configured schedule (404 otherwise; audited)."""
    _admin(who)
    if name not in names:
        raise JobNotFound(f"No schedule {name!r} is configured.")
    store = get_store()
    store.set_schedule_paused(name, paused, who.name)
    return store.schedule_states([name])[0]


def run_schedule(who: Principal, name: str, jobs: Mapping[str, NewJob]) -> Job:
    """Admin: one job of a configured schedule now, outside its ticks (audited)."""
    _admin(who)
    if name not in jobs:
        raise JobNotFound(f"No schedule {name!r} is configured.")
    job = get_store().run_schedule(name, jobs[name], who.name)
    metrics.jobs_enqueued(job.type)
    return job


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
    """Create an API key; return it and its token (never recorded). A system name is
    refused (409), so no key can act in the audit log as the system."""
    _not_a_system_name(name)
    return get_store().accounts.create_key(name, role, types=types, max_priority=max_priority,
                                           actor=actor)


def revoke_key(actor: str, name: str) -> bool:
    """Revoke the active key ``name``; False if there is none."""
    return get_store().accounts.revoke_key(name, actor=actor)


def create_user(actor: str, username: str, password_hash: str, role: str) -> None:
    """Add a person (the password hash is stored, never recorded); a system name is
    refused (409), as for keys."""
    _not_a_system_name(username)
    get_store().accounts.create_user(username, password_hash, role, actor=actor)


def delete_user(actor: str, username: str) -> bool:
    """Remove a person; False if there is none of that name."""
    return get_store().accounts.delete_user(username, actor=actor)


def set_password(actor: str, username: str, password_hash: str) -> bool:
    """Replace a person's password; False if there is none of that name."""
    return get_store().accounts.set_password(username, password_hash, actor=actor)


def _not_a_system_name(name: str) -> None:
    """Refuse a key or user name the system acts under (``cli``, ``retention``, ...)."""
    if is_system_name(name):
        raise Conflict(f"The name {name!r} is reserved: the system acts under it in the "
                       "audit log (cli, retention, schedule:...). Choose another name.")

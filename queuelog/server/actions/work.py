"""Workers' verbs: claim (the key's types, the revoked-key re-check while it waits),
heartbeat, complete and fail, one or many; error text is sanitized after fencing (V-10)."""
from __future__ import annotations

from typing import Callable, Sequence

from flask import current_app

from queuelog.model.jobs import Done, Job
from queuelog.model.problems import Forbidden, QueuelogError
from queuelog.server import metrics
from queuelog.server.actions.gate import gate
from queuelog.server.auth import Principal
from queuelog.server.longpoll import PollResult, long_polls
from queuelog.server.sanitize import sanitize_error
from queuelog.server.db import get_store
from queuelog.server.store import Claimed, hash_token


@gate("worker")
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


@gate("worker")
def heartbeat(who: Principal, job_id: int, attempt: int, *,
              lease_seconds: float | None = None) -> Job:
    """Extend the lease of a job ``who`` holds at this attempt."""
    return get_store().heartbeat(job_id, who.name, attempt, lease_seconds=lease_seconds)


@gate("worker")
def complete(who: Principal, job_id: int, attempt: int, result_json: str | None) -> Job:
    """Complete a held attempt (counted as ``completed``)."""
    job = get_store().complete(job_id, who.name, attempt, result_json)
    _finished([job], "completed")
    return job


@gate("worker")
def complete_many(who: Principal, items: Sequence[tuple[int, int, str | None]],
                  ) -> list[Done | QueuelogError]:
    """Complete many held attempts; each item its job's new state or its refusal (only the
    jobs count)."""
    done = get_store().complete_many(who.name, items)
    _finished(done, "completed")
    return done


@gate("worker")
def fail(who: Principal, job_id: int, attempt: int, error: str, *, retry: bool = True,
         retry_in: float | None = None) -> Job:
    """Fail a held attempt: back to pending after backoff, or failed for good. The raw
    ``error`` is sanitized only once the attempt is fenced (V-10)."""
    job = get_store().fail(job_id, who.name, attempt, error, retry=retry, retry_in=retry_in,
                           clean=_sanitizer())
    _finished([job], "failed")
    return job


@gate("worker")
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

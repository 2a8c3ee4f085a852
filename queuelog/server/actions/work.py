"""Workers' verbs: claim (the key's types, the revoked-key re-check while it waits),
heartbeat, complete and fail, one or many; error text is sanitized after fencing (V-10).
A complete or fail may claim the ``next`` job in the same request, after its commit."""
from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple, Sequence

from flask import current_app

from queuelog.model.jobs import Done, Job
from queuelog.model.problems import Forbidden, QueuelogError
from queuelog.server import metrics, tracing
from queuelog.server.actions.gate import gate
from queuelog.server.auth import Principal
from queuelog.server.longpoll import PollResult, long_polls
from queuelog.server.sanitize import sanitize_error
from queuelog.server.db import get_store
from queuelog.server.store import Claimed, hash_token


@dataclasses.dataclass(frozen=True)
class NextClaim:
    """The claim a complete or fail asks for in the same request (a claim's body)."""

    types: Sequence[str] | None = None
    wait: float = 0
    lease_seconds: float | None = None


class Finished(NamedTuple):
    """A finish, and what its ``next`` claimed (None: no ``next`` was asked for)."""

    job: Job
    next: PollResult[Job] | None


def _claim_types(who: Principal, types: Sequence[str] | None) -> Sequence[str] | None:
    """The types a claim of ``who`` takes: a subset of its key's (else 403), or all of them."""
    if types is not None and who.types is not None and not set(types) <= set(who.types):
        raise Forbidden("This key may not claim some of these types.")
    return list(who.types) if types is None and who.types is not None else types


@gate("worker")
def claim(who: Principal, max_jobs: int, *, lease_seconds: float | None = None,
          types: Sequence[str] | None = None, wait: float = 0,
          connected: Callable[[], bool] = lambda: True) -> PollResult[Job]:
    """Claim up to ``max_jobs`` due jobs of the types ``who`` may claim; with ``wait``,
    look again until one is due, while the key is still active and ``connected``."""
    types = _claim_types(who, types)
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
    metrics.jobs_claimed(got.jobs)
    if tracing.ENABLED:
        tracing.claimed(got.jobs, who.name)
    return got


@gate("worker")
def heartbeat(who: Principal, job_id: int, attempt: int, *,
              lease_seconds: float | None = None, progress_json: str | None = None) -> Job:
    """Extend the lease of a job ``who`` holds at this attempt; store its progress."""
    return get_store().heartbeat(job_id, who.name, attempt, lease_seconds=lease_seconds,
                                 progress_json=progress_json)


@gate("worker")
def complete(who: Principal, job_id: int, attempt: int, result_json: str | None, *,
             then: NextClaim | None = None,
             connected: Callable[[], bool] = lambda: True) -> Finished:
    """Complete a held attempt (counted as ``completed``); then, with ``then``, claim the
    next job as ``claim`` would, after the complete has committed."""
    if then is not None:
        _claim_types(who, then.types)  # a 403 before the finish, never after it
    job = get_store().complete(job_id, who.name, attempt, result_json)
    _finished([job], "completed", who)
    return Finished(job, _then_claim(who, then, connected))


def _then_claim(who: Principal, then: NextClaim | None,
                connected: Callable[[], bool]) -> PollResult[Job] | None:
    """The ``next`` claim of a finish that committed, as ``claim`` (the same gate)."""
    if then is None:
        return None
    return claim(who, 1, lease_seconds=then.lease_seconds, types=then.types,
                 wait=then.wait, connected=connected)


@gate("worker")
def complete_many(who: Principal, items: Sequence[tuple[int, int, str | None]],
                  ) -> list[Done | QueuelogError]:
    """Complete many held attempts; each item its job's new state or its refusal (only the
    jobs count)."""
    done = get_store().complete_many(who.name, items)
    _finished(done, "completed", who)
    return done


@gate("worker")
def fail(who: Principal, job_id: int, attempt: int, error: str, *, retry: bool = True,
         retry_in: float | None = None, then: NextClaim | None = None,
         connected: Callable[[], bool] = lambda: True) -> Finished:
    """Fail a held attempt: back to pending after backoff, or failed for good. The raw
    ``error`` is sanitized only once the attempt is fenced (V-10). ``then`` as on
    ``complete``."""
    if then is not None:
        _claim_types(who, then.types)
    job = get_store().fail(job_id, who.name, attempt, error, retry=retry, retry_in=retry_in,
                           clean=_sanitizer())
    _finished([job], "failed", who)
    return Finished(job, _then_claim(who, then, connected))


@gate("worker")
def fail_many(who: Principal, items: Sequence[tuple[int, int, str, bool, float | None]],
              ) -> list[Job | QueuelogError]:
    """Fail many held attempts; each item a job or its refusal (only jobs count). An
    item's error text is sanitized only if its fencing passed: a stale item costs none."""
    done = get_store().fail_many(who.name, items, clean=_sanitizer())
    _finished(done, "failed", who)
    return done


def _sanitizer() -> Callable[[str], str]:
    """Worker error text made safe to store: secrets redacted, cut to MAX_ERROR_BYTES."""
    limit = int(current_app.config["MAX_ERROR_BYTES"])
    return lambda text: sanitize_error(text, limit)


def _finished(done: Sequence[Job | Done | QueuelogError], outcome: str,
              who: Principal) -> None:
    """Count the attempts that ended (a retried fail is a ``failed`` attempt too), observe
    their run times, and trace them."""
    ended = [job for job in done if not isinstance(job, QueuelogError)]
    metrics.attempts_ran(ended, outcome)
    per_type: dict[str, int] = {}
    for job in ended:
        per_type[job.type] = per_type.get(job.type, 0) + 1
    for job_type, n in per_type.items():  # one counter write per type, not per job
        metrics.attempt_finished(job_type, outcome, n)
    if tracing.ENABLED:
        tracing.settled(ended, "complete" if outcome == "completed" else "fail", who.name)

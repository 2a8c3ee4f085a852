"""The client's retry rules: what is retried, how long, and how a lost answer is told apart.

``heartbeat``, ``complete`` and ``fail`` are fenced by the job's attempt, so they are safe to
repeat: when the server is unreachable or answers 5xx they are retried until they land or the
job's lease would have run out (``post_answer``). A wait for a job's end outlasts any outage
(``wait_for``). Both pause by capped exponential backoff with jitter (``backoff``).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

from queuelog.client.errors import (ClientError, JobWaitTimeout, ProblemError, Unreachable,
                                    retry_after)
from queuelog.client.transport import Connection, json_of
from queuelog.model.claimed import ClaimedJob, parse_stamp
from queuelog.model.jobs import backoff_seconds

# A held job: the dict a claim returned, or the worker runner's parsed ``ClaimedJob``.
HeldJob = dict[str, Any] | ClaimedJob

# Retries of an answer (heartbeat, complete, fail): capped exponential backoff with jitter.
RETRY_FIRST_SECONDS = 0.25
RETRY_MAX_SECONDS = 10.0
# The longest a server waits in one request (a claim's ``wait``, ``GET /jobs/{id}?wait=``).
MAX_WAIT = 30.0
# A wait answered this early with the job unfinished and no Retry-After (a server shutting
# down, or one without waits) is looked at again after this long, not at once.
EARLY_ANSWER_PAUSE = 0.25
FINISHED = frozenset({"completed", "failed", "cancelled"})
# Lease ends that heartbeats reported, kept per held attempt (see Leases): at most this
# many, the oldest dropped first (an attempt never answered must not grow it forever).
MAX_LEASES_KEPT = 10_000


def backoff(tries: int, first: float = RETRY_FIRST_SECONDS,
            cap: float = RETRY_MAX_SECONDS) -> float:
    """Seconds to wait before retry number ``tries`` (0-based): capped, with equal jitter."""
    return backoff_seconds(tries + 1, first, cap)


def lease_deadline(job: HeldJob) -> float:
    """The job's ``lease_expires_at`` as epoch seconds (now, when the job carries none)."""
    if isinstance(job, ClaimedJob):
        return job.deadline(time.time())
    end = parse_stamp(job.get("lease_expires_at"))
    return time.time() if end is None else end


def fence(job: HeldJob) -> tuple[int, int]:
    """The job's id and attempt: what fences an answer."""
    if isinstance(job, ClaimedJob):
        return job.id, job.attempt
    return int(job["id"]), job["attempt"]


def fences(items: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """The (id, attempt) of each well-formed item of a batch answer."""
    return [(i["id"], i["attempt"]) for i in items
            if isinstance(i, dict) and isinstance(i.get("id"), int)
            and isinstance(i.get("attempt"), int)]


def attempt_outcome(job: dict[str, Any], attempt: int) -> str | None:
    """The outcome of ``attempt`` in the job's history (``attempts``), if it is there."""
    for entry in job.get("attempts") or ():
        if entry.get("attempt") == attempt:
            return entry.get("outcome")  # type: ignore[no-any-return]
    return None


class Leases:
    """The lease end each held attempt's last heartbeat got, by (id, attempt).

    A caller may answer with the job its claim returned (the guide does: ``heartbeat(job)``,
    then ``complete(job)``), whose ``lease_expires_at`` is the claim's: retries must last
    until the lease the heartbeats extended runs out, not give up at the claim's.
    """

    def __init__(self) -> None:
        self._ends: dict[tuple[int, int], float] = {}
        self._lock = threading.Lock()

    def deadline(self, job: HeldJob) -> float:
        """When answers for the held ``job`` stop being retried: its lease's end, as known."""
        with self._lock:
            return max(lease_deadline(job), self._ends.get(fence(job), 0.0))

    def keep(self, held: tuple[int, int], until: float) -> None:
        """Remember the lease end a heartbeat of the attempt ``held`` got."""
        with self._lock:
            self._ends.pop(held, None)  # re-inserted last: the oldest go first
            self._ends[held] = until
            while len(self._ends) > MAX_LEASES_KEPT:
                del self._ends[next(iter(self._ends))]

    def forget(self, answered: list[tuple[int, int]]) -> None:
        """The attempts were answered: their heartbeats' lease ends are no longer needed."""
        if answered:
            with self._lock:
                for held in answered:
                    self._ends.pop(held, None)


def post_answer(conn: Connection, job: HeldJob, verb: str, body: dict[str, Any], *,
                outcome: str | None, next: dict[str, Any] | None, deadline: float, first: float,
                landed: Callable[[HeldJob, str], dict[str, Any] | None]) -> dict[str, Any]:
    """POST a fenced answer; retry what may not have landed until ``deadline`` (epoch s).

    ``next`` goes with the first try only. A finish commits once, so no retry could
    claim twice anyway; but a retry comes after an outage, and then the answer alone
    is what matters (the runner claims the usual way): it is ``{"job", "next": None}``.
    A retry refused with 409 asks ``landed`` whether an earlier try was recorded.
    """
    path = f"jobs/{fence(job)[0]}/{verb}"
    tries = 0
    while True:
        try:
            if next is None:
                return conn.request("POST", path, body)  # type: ignore[no-any-return]
            if not tries:
                return conn.request(  # type: ignore[no-any-return]
                    "POST", path, {**body, "next": next},
                    timeout=conn.waiting(float(next.get("wait") or 0)))
            return {"job": conn.request("POST", path, body), "next": None}
        except ProblemError as exc:
            if exc.status == 409 and tries and outcome is not None:
                found = landed(job, outcome)
                if found is not None:
                    return found if next is None else {"job": found, "next": None}
            if not exc.transient or _give_up(conn, deadline):
                raise
            delay = max(backoff(tries, first), min(exc.retry_after or 0, RETRY_MAX_SECONDS))
        except Unreachable:
            if _give_up(conn, deadline):
                raise
            delay = backoff(tries, first)
        tries += 1
        conn.closed.wait(min(delay, max(0.05, deadline - time.time())))


def _give_up(conn: Connection, deadline: float) -> bool:
    """Whether retrying stops: the client was closed, or the lease has run out."""
    return conn.closed.is_set() or time.time() >= deadline


def wait_for(conn: Connection, id: int, timeout: float | None, first: float) -> dict[str, Any]:
    """The job once it has finished; ``JobWaitTimeout`` after ``timeout`` (None: never)."""
    job_id = int(id)
    end = None if timeout is None else time.monotonic() + max(0.0, timeout)
    seen: dict[str, Any] | None = None
    tries = 0
    while True:
        asked = MAX_WAIT if end is None else min(MAX_WAIT, max(0.0, end - time.monotonic()))
        try:
            seen, pause = _wait_once(conn, job_id, asked)
            if seen.get("status") in FINISHED:
                return seen
            tries = 0
        except ProblemError as exc:
            if not exc.transient:
                raise
            pause, tries = max(backoff(tries, first), exc.retry_after or 0), tries + 1
        except Unreachable:
            pause, tries = backoff(tries, first), tries + 1
        left = float("inf") if end is None else end - time.monotonic()
        if left <= 0:
            raise JobWaitTimeout(job_id, seen, timeout or 0.0)
        if pause and conn.closed.wait(min(pause, RETRY_MAX_SECONDS, left)):
            raise Unreachable(f"{conn.url}: the client was closed")


def _wait_once(conn: Connection, job_id: int, asked: float) -> tuple[dict[str, Any], float]:
    """One waiting read: the job, and how long to pause before the next (0: none)."""
    started = time.monotonic()
    resp = conn.send("GET", f"jobs/{job_id}", params={"wait": _seconds(asked)},
                     timeout=conn.waiting(asked))
    job = json_of(resp, conn.url)
    if not isinstance(job, dict):
        raise ClientError(f"{conn.url}: the answer to GET /jobs/{job_id} is no job")
    pause = retry_after(resp)  # the server's long-poll slots were all taken
    if pause is None and time.monotonic() - started < asked / 2:
        pause = EARLY_ANSWER_PAUSE  # answered early, unfinished: do not ask again at once
    return job, pause or 0.0


def _seconds(value: float) -> str:
    """Seconds as a query string value: ``30``, ``0.5`` (milliseconds at most)."""
    return f"{value:.3f}".rstrip("0").rstrip(".")

"""``Client``: one method per API call; here those of producers, workers and readers.

Jobs are plain dicts, as the API sends them. The repair and operating calls are inherited from
``operating.py``; the HTTP itself is ``transport.py``, the retries of fenced answers and of
waits ``retries.py``, the errors ``errors.py``.
"""
from __future__ import annotations

from typing import Any, Iterator

import httpx

from queuelog.client.errors import ClientError
from queuelog.client.operating import OperatingCalls
from queuelog.client.retries import (RETRY_FIRST_SECONDS, HeldJob, Leases, attempt_outcome,
                                     fence, fences, post_answer, wait_for)
from queuelog.client.transport import TIMEOUT, Connection
from queuelog.model.claimed import parse_stamp


class Client(OperatingCalls):
    """One queuelog server and one API key, over a kept-alive connection pool.

    ``heartbeat``, ``complete`` and ``fail`` are fenced by the job's attempt, so they are safe
    to repeat: when the server is unreachable or answers 5xx they are retried until they land
    or the job's lease would have run out. A retried ``complete`` or ``fail`` that then gets a
    409 looks at the job's history: if its own attempt's outcome was recorded, the earlier try
    landed and the call succeeds. The client can be shared between threads.
    """

    def __init__(self, url: str, token: str, *, timeout: float | httpx.Timeout = TIMEOUT,
                 transport: httpx.BaseTransport | None = None,
                 retry_first: float = RETRY_FIRST_SECONDS) -> None:
        self._conn = Connection(url, token, timeout=timeout, transport=transport)
        self.url = self._conn.url
        # The first retry's pause (seconds); each later one doubles, up to RETRY_MAX_SECONDS.
        self.retry_first = retry_first
        self._leases = Leases()  # lease ends heartbeats got: how long an answer is retried

    def close(self) -> None:
        """Close the connections; retries in other threads give up."""
        self._conn.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- producers ---------------------------------------------------------------------------

    def enqueue(self, type: str, payload: dict[str, Any] | None = None, *,
                wait: float | bool | None = None, **fields: Any) -> dict[str, Any]:
        """Enqueue one job (``priority``, ``max_retries``, ``run_at``, ``idempotency_key``...).

        ``depends_on=[ids]`` and ``on_parent_failure="cancel"|"run"`` make it a workflow's
        step: ``blocked`` until its parents finish (docs/workflows.md).

        ``wait=S``: then wait up to S seconds for it to finish (``True``: as long as it
        takes) and return the finished job; ``JobWaitTimeout`` (with the job) after S.
        """
        body = {"type": type, **{k: v for k, v in fields.items() if v is not None}}
        if payload is not None:
            body["payload"] = payload
        job: dict[str, Any] = self._conn.request("POST", "jobs", body)
        if wait is None or wait is False:
            return job
        return self.wait(job["id"], timeout=None if wait is True else float(wait))

    def enqueue_many(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Enqueue a batch (each item a ``POST /jobs`` body), all or nothing; jobs in order.

        An item's ``depends_on`` may name an earlier item as ``{"item": N}`` (its index).
        """
        return list(self._conn.request("POST", "jobs/batch", {"jobs": list(items)})["jobs"])

    # -- workers -----------------------------------------------------------------------------

    def claim(self, types: list[str] | None = None, wait: float = 0,
              max_jobs: int | None = None,
              lease_seconds: float | None = None) -> dict[str, Any] | list[dict[str, Any]] | None:
        """Claim a job (or ``None``); with ``max_jobs`` a list of up to that many (maybe empty).

        ``wait`` (up to 30 s) long-polls: the server answers as soon as a job is due.
        """
        body: dict[str, Any] = {}
        if types is not None:
            body["types"] = list(types)
        if wait:
            body["wait"] = wait
        if max_jobs is not None:
            body["max_jobs"] = max_jobs
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        answer = self._conn.request("POST", "jobs/claim", body, timeout=self._conn.waiting(wait))
        if max_jobs is not None:
            return list(answer["jobs"]) if answer else []
        return answer  # None on 204

    def heartbeat(self, job: HeldJob, lease_seconds: float | None = None, *,
                  progress: dict[str, Any] | None = None) -> dict[str, Any]:
        """Extend the lease of a held job (and report its ``progress``, an object up to 1 KiB).

        Returns the job with its new ``lease_expires_at``. A job cancelled meanwhile is a
        409 ``ProblemError`` whose ``cancelled`` is True: stop working on it.
        """
        body: dict[str, Any] = {"attempt": fence(job)[1]}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        if progress is not None:
            body["progress"] = progress
        answer = self._answer(job, "heartbeat", body, outcome=None)
        until = parse_stamp(answer.get("lease_expires_at")) if isinstance(answer, dict) else None
        if until is not None:
            self._leases.keep(fence(job), until)
        return answer

    def complete(self, job: HeldJob, result: dict[str, Any] | None = None,
                 next: dict[str, Any] | None = None) -> dict[str, Any]:
        """Complete a held job, with an optional result object.

        With ``next`` (a claim's ``types``, ``wait``, ``lease_seconds``; ``{}`` for the
        defaults) it also claims the worker's next job: ``{"job": <completed>, "next": <a
        claimed job or None>}``, as the API answers.
        """
        body: dict[str, Any] = {"attempt": fence(job)[1]}
        if result is not None:
            body["result"] = result
        answer = self._answer(job, "complete", body, outcome="completed", next=next)
        self._leases.forget([fence(job)])
        return answer

    def fail(self, job: HeldJob, error: str, retry: bool = True,
             retry_in: float | None = None, next: dict[str, Any] | None = None
             ) -> dict[str, Any]:
        """Fail a held attempt: retried later as the job's retries allow, unless ``retry`` is False.

        ``next`` claims the next job in the same request, as on ``complete``.
        """
        body: dict[str, Any] = {"attempt": fence(job)[1], "error": error, "retry": retry}
        if retry_in is not None:
            body["retry_in"] = retry_in
        answer = self._answer(job, "fail", body, outcome="failed", next=next)
        self._leases.forget([fence(job)])
        return answer

    def complete_many(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Complete several held jobs in one request (items: ``id``, ``attempt``, ``result``).

        Each item is fenced on its own; the answer lists, in order, ``{"id", "status": 200,
        "job_status"}`` or the item's problem (``status``, ``type``, ``detail``). Not retried.
        """
        answer = self._conn.request("POST", "jobs/complete", {"jobs": list(items)})
        results = list(answer["results"])
        self._leases.forget(fences(items))
        return results

    def fail_many(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Fail several held attempts in one request (``id``, ``attempt``, ``error``...)."""
        answer = self._conn.request("POST", "jobs/fail", {"jobs": list(items)})
        results = list(answer["results"])
        self._leases.forget(fences(items))
        return results

    def landed(self, job: HeldJob, outcome: str) -> dict[str, Any] | None:
        """The job, if its history shows that this attempt ended with ``outcome`` (else None).

        An earlier try whose answer was lost (a 503, a dropped connection) may have been
        committed; the retry then gets 409 and only the history can tell.
        """
        job_id, attempt = fence(job)
        try:
            current = self.get(job_id)
        except ClientError:
            return None
        return current if attempt_outcome(current, attempt) == outcome else None

    def _answer(self, job: HeldJob, verb: str, body: dict[str, Any],
                outcome: str | None, next: dict[str, Any] | None = None) -> dict[str, Any]:
        """POST a fenced answer, retried until it lands or the job's lease runs out."""
        return post_answer(self._conn, job, verb, body, outcome=outcome, next=next,
                           deadline=self._leases.deadline(job), first=self.retry_first,
                           landed=self.landed)

    @property
    def closed(self) -> bool:
        """True once ``close`` was called."""
        return self._conn.closed.is_set()

    # -- reads -------------------------------------------------------------------------------

    def get(self, id: int) -> dict[str, Any]:
        """One job, with ``attempts``: its history."""
        return self._conn.request("GET", f"jobs/{int(id)}")

    def wait(self, id: int, timeout: float | None = None) -> dict[str, Any]:
        """The job once it has finished (completed, failed or cancelled), with its history.

        Each request waits on the server (``GET /jobs/{id}?wait=``, 30 s at most), which
        answers as soon as the job finishes. ``timeout`` None waits as long as it takes, a
        server outage included; after ``timeout`` seconds: ``JobWaitTimeout``.
        """
        return wait_for(self._conn, id, timeout, self.retry_first)

    def list(self, **filters: Any) -> Iterator[dict[str, Any]]:
        """Every job the key may see (``status``, ``type``, ``priority``, ``limit`` per page)."""
        return self._conn.pages("jobs", "jobs", filters)

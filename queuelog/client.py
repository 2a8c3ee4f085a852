"""A small HTTP client for any queuelog server (the worker runner is built on it).

It imports nothing from the server side (no Flask, no SQLAlchemy), so a worker host needs only
this module and httpx. Jobs are plain dicts, as the API sends them; every error answer is a
``ProblemError``, and a server that does not answer at all is ``Unreachable``.
"""
from __future__ import annotations

import json
import threading
import time
from typing import Any, Iterator
from urllib.parse import quote

import httpx

from queuelog.model.claimed import ClaimedJob, parse_stamp
from queuelog.model.jobs import backoff_seconds

# A held job: the dict a claim returned, or the worker runner's parsed ``ClaimedJob``.
HeldJob = dict[str, Any] | ClaimedJob

# Long enough for a slow database; a long poll adds its ``wait`` to the read timeout.
TIMEOUT = httpx.Timeout(10.0, connect=5.0)
# A keep-alive connection idle this long is not used again. gunicorn closes one idle for 2 s
# (its default --keep-alive), and a request sent as it closes one is lost ("Server
# disconnected without sending a response"; httpx's own default keeps them 5 s).
KEEPALIVE_EXPIRY = 1.5
# Retries of an answer (heartbeat, complete, fail): capped exponential backoff with jitter.
RETRY_FIRST_SECONDS = 0.25
RETRY_MAX_SECONDS = 10.0
# Answers whose outcome is unknown: the request may or may not have been applied.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
# The longest a server waits in one request (a claim's ``wait``, ``GET /jobs/{id}?wait=``).
MAX_WAIT = 30.0
# A wait answered this early with the job unfinished and no Retry-After (a server shutting
# down, or one without waits) is looked at again after this long, not at once.
EARLY_ANSWER_PAUSE = 0.25
FINISHED = frozenset({"completed", "failed", "cancelled"})
# Lease ends that heartbeats reported, kept per held attempt (see Client._leases): at most
# this many, the oldest dropped first (an attempt never answered must not grow it forever).
MAX_LEASES_KEPT = 10_000


class ClientError(Exception):
    """Base of the errors raised by ``Client``."""


class ProblemError(ClientError):
    """An error answer (RFC 9457 problem+json), or any non-2xx answer turned into one."""

    def __init__(self, status: int, type: str, detail: str,
                 errors: list[dict[str, Any]] | None = None, *, title: str = "",
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} {type}: {detail}")
        self.status = status
        self.type = type
        self.title = title
        self.detail = detail
        self.errors = errors or []
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        """True when retrying the same request later may succeed (5xx, 429)."""
        return self.status in TRANSIENT_STATUSES or self.status > 500

    @property
    def cancelled(self) -> bool:
        """True for the 409 its holder gets once a running job was cancelled."""
        return self.status == 409 and self.type.endswith("cancelled")


class JobWaitTimeout(ClientError, TimeoutError):
    """``wait`` (or ``enqueue(wait=)``) ran out before the job finished.

    A ``TimeoutError``, as Celery's ``AsyncResult.get`` and RQ raise, so that an unfinished
    job is never mistaken for a finished one; it keeps the job's ``id`` and the ``job`` as
    last seen (``None`` if no answer came), so the caller can wait again or cancel it.
    """

    def __init__(self, id: int, job: dict[str, Any] | None, timeout: float) -> None:
        status = job.get("status") if job else "unknown"
        super().__init__(f"job {id} did not finish within {timeout:g} s (status {status})")
        self.id = id
        self.job = job


class Unreachable(ClientError):
    """The server did not answer: connection refused or reset, or a timeout."""


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


def _fence(job: HeldJob) -> tuple[int, int]:
    """The job's id and attempt: what fences an answer."""
    if isinstance(job, ClaimedJob):
        return job.id, job.attempt
    return int(job["id"]), job["attempt"]


class Client:
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
        self.url = url.rstrip("/")
        # The first retry's pause (seconds); each later one doubles, up to RETRY_MAX_SECONDS.
        self.retry_first = retry_first
        self._closed = threading.Event()  # set by close(): retries stop waiting
        # The lease end each held attempt's last heartbeat got, by (id, attempt). A caller
        # may answer with the job its claim returned (the guide does: ``heartbeat(job)``, then
        # ``complete(job)``), whose ``lease_expires_at`` is the claim's: retries must last
        # until the lease the heartbeats extended runs out, not give up at the claim's.
        self._leases: dict[tuple[int, int], float] = {}
        self._leases_lock = threading.Lock()
        self._timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self._http = httpx.Client(
            base_url=self.url + "/", timeout=timeout, transport=transport,
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY),
            headers={"Authorization": f"Bearer {token}", "User-Agent": "queuelog-client"})

    def close(self) -> None:
        """Close the connections; retries in other threads give up."""
        self._closed.set()
        self._http.close()

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
        job: dict[str, Any] = self._request("POST", "jobs", body)
        if wait is None or wait is False:
            return job
        return self.wait(job["id"], timeout=None if wait is True else float(wait))

    def enqueue_many(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Enqueue a batch (each item a ``POST /jobs`` body), all or nothing; jobs in order.

        An item's ``depends_on`` may name an earlier item as ``{"item": N}`` (its index).
        """
        return list(self._request("POST", "jobs/batch", {"jobs": list(items)})["jobs"])

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
        answer = self._request("POST", "jobs/claim", body, timeout=self._waiting(wait))
        if max_jobs is not None:
            return list(answer["jobs"]) if answer else []
        return answer  # None on 204

    def heartbeat(self, job: HeldJob, lease_seconds: float | None = None, *,
                  progress: dict[str, Any] | None = None) -> dict[str, Any]:
        """Extend the lease of a held job (and report its ``progress``, an object up to 1 KiB).

        Returns the job with its new ``lease_expires_at``. A job cancelled meanwhile is a
        409 ``ProblemError`` whose ``cancelled`` is True: stop working on it.
        """
        body: dict[str, Any] = {"attempt": _fence(job)[1]}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        if progress is not None:
            body["progress"] = progress
        answer = self._answer(job, "heartbeat", body, outcome=None)
        until = parse_stamp(answer.get("lease_expires_at")) if isinstance(answer, dict) else None
        if until is not None:
            self._keep_lease(_fence(job), until)
        return answer

    def complete(self, job: HeldJob, result: dict[str, Any] | None = None,
                 next: dict[str, Any] | None = None) -> dict[str, Any]:
        """Complete a held job, with an optional result object.

        With ``next`` (a claim's ``types``, ``wait``, ``lease_seconds``; ``{}`` for the
        defaults) it also claims the worker's next job: ``{"job": <completed>, "next": <a
        claimed job or None>}``, as the API answers.
        """
        body: dict[str, Any] = {"attempt": _fence(job)[1]}
        if result is not None:
            body["result"] = result
        answer = self._answer(job, "complete", body, outcome="completed", next=next)
        self._forget_leases([_fence(job)])
        return answer

    def fail(self, job: HeldJob, error: str, retry: bool = True,
             retry_in: float | None = None, next: dict[str, Any] | None = None
             ) -> dict[str, Any]:
        """Fail a held attempt: retried later as the job's retries allow, unless ``retry`` is False.

        ``next`` claims the next job in the same request, as on ``complete``.
        """
        body: dict[str, Any] = {"attempt": _fence(job)[1], "error": error, "retry": retry}
        if retry_in is not None:
            body["retry_in"] = retry_in
        answer = self._answer(job, "fail", body, outcome="failed", next=next)
        self._forget_leases([_fence(job)])
        return answer

    def complete_many(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Complete several held jobs in one request (items: ``id``, ``attempt``, ``result``).

        Each item is fenced on its own; the answer lists, in order, ``{"id", "status": 200,
        "job_status"}`` or the item's problem (``status``, ``type``, ``detail``). Not retried.
        """
        results = list(self._request("POST", "jobs/complete", {"jobs": list(items)})["results"])
        self._forget_leases(_fences(items))
        return results

    def fail_many(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Fail several held attempts in one request (``id``, ``attempt``, ``error``...)."""
        results = list(self._request("POST", "jobs/fail", {"jobs": list(items)})["results"])
        self._forget_leases(_fences(items))
        return results

    @property
    def closed(self) -> bool:
        """True once ``close`` was called."""
        return self._closed.is_set()

    # -- reads -------------------------------------------------------------------------------

    def get(self, id: int) -> dict[str, Any]:
        """One job, with ``attempts``: its history."""
        return self._request("GET", f"jobs/{int(id)}")

    def wait(self, id: int, timeout: float | None = None) -> dict[str, Any]:
        """The job once it has finished (completed, failed or cancelled), with its history.

        Each request waits on the server (``GET /jobs/{id}?wait=``, 30 s at most), which
        answers as soon as the job finishes. ``timeout`` None waits as long as it takes, a
        server outage included; after ``timeout`` seconds: ``JobWaitTimeout``.
        """
        job_id = int(id)
        end = None if timeout is None else time.monotonic() + max(0.0, timeout)
        seen: dict[str, Any] | None = None
        tries = 0
        while True:
            asked = MAX_WAIT if end is None else min(MAX_WAIT, max(0.0, end - time.monotonic()))
            try:
                seen, pause = self._wait_once(job_id, asked)
                if seen.get("status") in FINISHED:
                    return seen
                tries = 0
            except ProblemError as exc:
                if not exc.transient:
                    raise
                pause, tries = max(backoff(tries, self.retry_first), exc.retry_after or 0), tries + 1
            except Unreachable:
                pause, tries = backoff(tries, self.retry_first), tries + 1
            left = float("inf") if end is None else end - time.monotonic()
            if left <= 0:
                raise JobWaitTimeout(job_id, seen, timeout or 0.0)
            if pause and self._closed.wait(min(pause, RETRY_MAX_SECONDS, left)):
                raise Unreachable(f"{self.url}: the client was closed")

    def _wait_once(self, job_id: int, asked: float) -> tuple[dict[str, Any], float]:
        """One waiting read: the job, and how long to pause before the next (0: none)."""
        started = time.monotonic()
        resp = self._send("GET", f"jobs/{job_id}", params={"wait": _seconds(asked)},
                          timeout=self._waiting(asked))
        job = _json_of(resp, self.url)
        if not isinstance(job, dict):
            raise ClientError(f"{self.url}: the answer to GET /jobs/{job_id} is no job")
        pause = _retry_after(resp)  # the server's long-poll slots were all taken
        if pause is None and time.monotonic() - started < asked / 2:
            pause = EARLY_ANSWER_PAUSE  # answered early, unfinished: do not ask again at once
        return job, pause or 0.0

    def list(self, **filters: Any) -> Iterator[dict[str, Any]]:
        """Every job the key may see (``status``, ``type``, ``priority``, ``limit`` per page)."""
        return self._pages("jobs", "jobs", filters)

    # -- repair: cancel and retry (a producer cancels its own jobs; admins do both) ----------

    def cancel(self, job: int | dict[str, Any]) -> dict[str, Any]:
        """Cancel a pending, blocked or running job (an id or a job); 409 once finished."""
        return self._request("POST", f"jobs/{_id(job)}/cancel")

    def retry(self, job: int | dict[str, Any]) -> dict[str, Any]:
        """Admin: send a failed or cancelled job back to pending, with fresh retries."""
        return self._request("POST", f"jobs/{_id(job)}/retry")

    def run(self, job_id: int | dict[str, Any]) -> dict[str, Any]:
        """Admin: make a delayed or retrying pending job due now; 409 unless pending."""
        return self._request("POST", f"jobs/{_id(job_id)}/run")

    def cancel_many(self, ids: list[int] | None = None, *,
                    filter: dict[str, Any] | None = None) -> int:
        """Cancel the pending jobs named by ``ids`` or matched by ``filter``; how many changed."""
        return int(self._request("POST", "jobs/cancel", _bulk(ids, filter))["count"])

    def retry_many(self, ids: list[int] | None = None, *,
                   filter: dict[str, Any] | None = None) -> int:
        """Admin: retry the failed or cancelled jobs named or matched; how many changed."""
        return int(self._request("POST", "jobs/retry", _bulk(ids, filter))["count"])

    # -- operating: job types, limits, schedules, workers, audit -----------------------------

    def types(self) -> list[dict[str, Any]]:
        """Every configured job type: paused, counts, oldest pending age, last hour."""
        return list(self._request("GET", "types")["types"])

    def pause(self, type: str) -> dict[str, Any]:
        """Admin: pause a job type (no claim returns it; enqueues still succeed)."""
        return self._request("POST", f"types/{_seg(type)}/pause")

    def resume(self, type: str) -> dict[str, Any]:
        """Admin: resume a paused job type."""
        return self._request("POST", f"types/{_seg(type)}/resume")

    def set_limits(self, type: str, **limits: Any) -> dict[str, Any]:
        """Admin: change ``concurrency``, ``rate`` or ``burst`` (``None`` removes that limit)."""
        return self._request("PUT", f"types/{_seg(type)}/limits", dict(limits))

    def clear_limits(self, type: str) -> dict[str, Any]:
        """Admin: back to the limits configured in ``JOB_TYPES``."""
        return self._request("DELETE", f"types/{_seg(type)}/limits")

    def schedules(self) -> list[dict[str, Any]]:
        """Every schedule: cron, timezone, type, paused, next and last run, last job."""
        return list(self._request("GET", "schedules")["schedules"])

    def pause_schedule(self, name: str) -> dict[str, Any]:
        """Admin: pause a schedule (its ticks are skipped until it is resumed)."""
        return self._request("POST", f"schedules/{_seg(name)}/pause")

    def resume_schedule(self, name: str) -> dict[str, Any]:
        """Admin: resume a paused schedule."""
        return self._request("POST", f"schedules/{_seg(name)}/resume")

    def run_schedule(self, name: str) -> dict[str, Any]:
        """Admin: enqueue one job of the schedule now, outside its ticks; the job."""
        return self._request("POST", f"schedules/{_seg(name)}/run")

    def workers(self) -> list[dict[str, Any]]:
        """The worker keys that claimed in the last 24 hours or hold a job now."""
        return list(self._request("GET", "workers")["workers"])

    def audit(self, **filters: Any) -> Iterator[dict[str, Any]]:
        """Admin: every audit event (``action``, ``actor``, ``limit`` per page), newest first."""
        return self._pages("audit", "events", filters)

    # -- service -----------------------------------------------------------------------------

    def healthz(self) -> dict[str, Any]:
        """``{"status": "ok"}``; a ProblemError (503) when the database does not answer."""
        return self._request("GET", "healthz")

    def metrics(self) -> str:
        """The Prometheus text exposition (admin and metrics keys)."""
        return self._send("GET", "metrics").text

    def openapi(self) -> dict[str, Any]:
        """The server's OpenAPI 3.1 document."""
        return self._request("GET", "openapi.json")

    # -- plumbing ----------------------------------------------------------------------------

    def _pages(self, path: str, field: str, filters: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Every item of a paged list (``next_cursor``), fetched a page at a time."""
        params = {k: v for k, v in filters.items() if v is not None}
        while True:
            page = self._request("GET", path, params=params)
            yield from page[field]
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]

    def _answer(self, job: HeldJob, verb: str, body: dict[str, Any],
                outcome: str | None, next: dict[str, Any] | None = None) -> dict[str, Any]:
        """POST a fenced answer; retry what may not have landed until the lease runs out.

        ``next`` goes with the first try only. A finish commits once, so no retry could
        claim twice anyway; but a retry comes after an outage, and then the answer alone
        is what matters (the runner claims the usual way): it is ``{"job", "next": None}``.
        """
        fence = _fence(job)
        path = f"jobs/{fence[0]}/{verb}"
        with self._leases_lock:
            deadline = max(lease_deadline(job), self._leases.get(fence, 0.0))
        tries = 0
        while True:
            try:
                if next is None:
                    return self._request("POST", path, body)  # type: ignore[no-any-return]
                if not tries:
                    return self._request(  # type: ignore[no-any-return]
                        "POST", path, {**body, "next": next},
                        timeout=self._waiting(float(next.get("wait") or 0)))
                return {"job": self._request("POST", path, body), "next": None}
            except ProblemError as exc:
                if exc.status == 409 and tries and outcome is not None:
                    landed = self.landed(job, outcome)
                    if landed is not None:
                        return landed if next is None else {"job": landed, "next": None}
                if not exc.transient or self._give_up(deadline, tries):
                    raise
                delay = max(backoff(tries, self.retry_first),
                            min(exc.retry_after or 0, RETRY_MAX_SECONDS))
            except Unreachable:
                if self._give_up(deadline, tries):
                    raise
                delay = backoff(tries, self.retry_first)
            tries += 1
            self._closed.wait(min(delay, max(0.05, deadline - time.time())))

    def _keep_lease(self, fence: tuple[int, int], until: float) -> None:
        """Remember the lease end a heartbeat of the attempt ``fence`` got."""
        with self._leases_lock:
            self._leases.pop(fence, None)  # re-inserted last: the oldest go first
            self._leases[fence] = until
            while len(self._leases) > MAX_LEASES_KEPT:
                del self._leases[next(iter(self._leases))]

    def _forget_leases(self, fences: list[tuple[int, int]]) -> None:
        """The attempts were answered: their heartbeats' lease ends are no longer needed."""
        if fences:
            with self._leases_lock:
                for fence in fences:
                    self._leases.pop(fence, None)

    def _waiting(self, wait: float) -> httpx.Timeout | None:
        """The timeout of a request the server may hold ``wait`` seconds (None: the usual)."""
        if not wait:
            return None
        t = self._timeout
        return httpx.Timeout(connect=t.connect, read=(t.read or TIMEOUT.read) + wait,
                             write=t.write, pool=t.pool)

    def _give_up(self, deadline: float, tries: int) -> bool:
        return self._closed.is_set() or time.time() >= deadline

    def landed(self, job: HeldJob, outcome: str) -> dict[str, Any] | None:
        """The job, if its history shows that this attempt ended with ``outcome`` (else None).

        An earlier try whose answer was lost (a 503, a dropped connection) may have been
        committed; the retry then gets 409 and only the history can tell.
        """
        job_id, attempt = _fence(job)
        try:
            current = self.get(job_id)
        except ClientError:
            return None
        return current if _attempt_outcome(current, attempt) == outcome else None

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                 params: dict[str, Any] | None = None,
                 timeout: httpx.Timeout | None = None) -> Any:
        """One request; the decoded JSON answer (None for 204), or an exception."""
        resp = self._send(method, path, body, params=params, timeout=timeout)
        if resp.status_code == 204:
            return None
        return _json_of(resp, self.url)

    def _send(self, method: str, path: str, body: dict[str, Any] | None = None, *,
              params: dict[str, Any] | None = None,
              timeout: httpx.Timeout | None = None) -> httpx.Response:
        """One request; the 2xx response, or an exception (ProblemError, Unreachable)."""
        extra: dict[str, Any] = {}
        if timeout is not None:
            extra["timeout"] = timeout
        try:
            resp = self._http.request(method, path, json=body, params=params, **extra)
        except httpx.TransportError as exc:
            raise Unreachable(f"{self.url}: {type(exc).__name__}: {exc}") from exc
        except RuntimeError as exc:  # the client was closed by another thread
            raise Unreachable(f"{self.url}: {exc}") from exc
        if not resp.is_success:
            raise _problem(resp)
        return resp


def _json_of(resp: httpx.Response, url: str) -> Any:
    """The decoded JSON of a 2xx answer; ``ClientError`` when it is not JSON."""
    try:
        return resp.json()
    except ValueError:
        req = resp.request
        raise ClientError(f"{url}: the answer to {req.method} {req.url.path} is not JSON; "
                          "is this a queuelog server?") from None


def _seconds(value: float) -> str:
    """Seconds as a query string value: ``30``, ``0.5`` (milliseconds at most)."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _retry_after(resp: httpx.Response) -> float | None:
    """The answer's ``Retry-After`` in seconds, if it has one."""
    try:
        return float(resp.headers.get("Retry-After", ""))
    except ValueError:
        return None


def _id(job: int | dict[str, Any]) -> int:
    """A job's id, from the job or the id itself."""
    return int(job["id"] if isinstance(job, dict) else job)


def _seg(name: str) -> str:
    """A name as one URL path segment (a ``/`` or ``?`` in it cannot reach another route)."""
    return quote(name, safe="")


def _bulk(ids: list[int] | None, filter: dict[str, Any] | None) -> dict[str, Any]:
    """The body of a bulk cancel or retry: exactly one of ids and filter (``{}``: every job)."""
    if (ids is None) == (filter is None):
        raise TypeError("give ids or filter (filter={} matches every job), not both")
    return {"ids": [int(i) for i in ids]} if ids is not None else {"filter": dict(filter or {})}


def _fences(items: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """The (id, attempt) of each well-formed item of a batch answer."""
    return [(i["id"], i["attempt"]) for i in items
            if isinstance(i, dict) and isinstance(i.get("id"), int)
            and isinstance(i.get("attempt"), int)]


def _attempt_outcome(job: dict[str, Any], attempt: int) -> str | None:
    """The outcome of ``attempt`` in the job's history (``attempts``), if it is there."""
    for entry in job.get("attempts") or ():
        if entry.get("attempt") == attempt:
            return entry.get("outcome")  # type: ignore[no-any-return]
    return None


def _problem(resp: httpx.Response) -> ProblemError:
    """A ``ProblemError`` from an error answer, problem+json or not (a proxy's HTML page)."""
    retry_after = _retry_after(resp)
    try:
        body = resp.json()
    except (ValueError, json.JSONDecodeError):
        body = None
    if isinstance(body, dict) and "type" in body:
        return ProblemError(resp.status_code, str(body.get("type")), str(body.get("detail", "")),
                            body.get("errors") if isinstance(body.get("errors"), list) else None,
                            title=str(body.get("title", "")), retry_after=retry_after)
    text = " ".join(resp.text.split())[:200] or resp.reason_phrase
    return ProblemError(resp.status_code, "about:blank", text, None, title=resp.reason_phrase,
                        retry_after=retry_after)

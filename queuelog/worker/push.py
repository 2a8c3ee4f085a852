"""``queuelog work --post URL``: each claimed job delivered as a signed HTTP request.

A delivery is one more kind of job work for the runner: ``PushRun`` is a ``JobRun`` whose
work is a ``PushCall`` instead of a process, so slots, heartbeats, leases, batched answers,
SIGTERM and ``--grace`` and the one line per job are the runner's own. The request runs in a
thread of its own and the job's thread watches it as it watches a command: a lost lease or the
end of the grace period abandons it (its own timeout ends it soon after).
"""
from __future__ import annotations

import json
import ssl
import threading
import time
from datetime import datetime, timezone
from typing import Any

import httpx
from standardwebhooks import Webhook

from queuelog.model.claimed import ClaimedJob
from queuelog.model.tracecontext import carried
from queuelog.worker.job import JobRun, NextBody
from queuelog.worker.verdict import Verdict, of_answer, of_failure

DEFAULT_TIMEOUT = 30.0  # seconds a delivery may take (CONTRACT)
READ_LIMIT = 1 << 20    # a larger answer is not a result: only its start is kept
ABANDON_SECONDS = 1.0   # how long past --timeout an abandoned request may hold its socket


class SecretError(ValueError):
    """A ``--secret-file`` that holds no Standard Webhooks secret."""


def read_secret(path: str) -> Webhook:
    """The signer of a ``--secret-file``: a Standard Webhooks secret, ``whsec_<base64>``."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read().strip()
    if not text.startswith("whsec_"):
        raise SecretError(f"{path} holds no Standard Webhooks secret (whsec_<base64>)")
    try:
        return Webhook(text)
    except Exception as exc:  # binascii.Error, or an empty secret
        raise SecretError(f"{path}: the secret is not valid base64 ({exc})") from None


class PushTarget:
    """The URL every job goes to: one kept-alive HTTP client, no token, no redirects."""

    def __init__(self, url: str, *, signer: Webhook | None = None, with_job: bool = False,
                 ca_file: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                 concurrency: int = 1) -> None:
        self.url, self.signer, self.with_job, self.timeout = url, signer, with_job, timeout
        # Its own client: the runner's (with its Authorization header) never talks to it.
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) \
            if ca_file else True
        # The job's thread ends a delivery at ``timeout`` (outcome timed-out, as a command's);
        # httpx's own timeout, a little later, only ends the abandoned request.
        self.http = httpx.Client(
            timeout=timeout + ABANDON_SECONDS, verify=verify, follow_redirects=False,
            # Room beside the slots' connections for requests abandoned (a lost lease) and
            # still open until their timeout: the next job does not wait for the pool.
            limits=httpx.Limits(max_connections=2 * concurrency,
                                max_keepalive_connections=concurrency),
            headers={"User-Agent": "queuelog-push",
                     "Content-Type": "application/json"})

    def close(self) -> None:
        """Close the kept-alive connections."""
        self.http.close()

    def request(self, job: ClaimedJob, now: float) -> tuple[bytes, dict[str, str]]:
        """The body and headers of the job's delivery, signed at ``now`` (epoch seconds)."""
        value = {"job": dict(job.raw)} if self.with_job else job.payload
        body = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        headers = {"Queuelog-Job-Id": str(job.id), "Queuelog-Job-Type": job.type,
                   "Queuelog-Job-Attempt": str(job.attempt),
                   "Queuelog-Job-Priority": "" if job.priority is None else str(job.priority)}
        headers.update(carried(job.raw))  # checked again, as for a command's env
        if self.signer is not None:
            # webhook-id is the job's id on every attempt: a receiver drops repeats by it.
            msg_id, stamp = str(job.id), datetime.fromtimestamp(int(now), tz=timezone.utc)
            headers.update({"webhook-id": msg_id, "webhook-timestamp": str(int(now)),
                            "webhook-signature": self.signer.sign(msg_id, stamp,
                                                                  body.decode("utf-8"))})
        return body, headers

    def deliver(self, job: ClaimedJob) -> Verdict:
        """POST the job to the URL; the verdict on whatever came back (or did not)."""
        body, headers = self.request(job, time.time())
        # httpx's timeout is per read: an answer trickled a byte at a time never trips it,
        # and would hold its pooled connection (the next jobs waiting for it) for as long.
        deadline = time.monotonic() + self.timeout + ABANDON_SECONDS
        try:
            with self.http.stream("POST", self.url, content=body, headers=headers) as resp:
                data, whole = _read(resp, deadline)
                return of_answer(resp.status_code, resp.headers, data, whole,
                                 resp.reason_phrase)
        except httpx.TimeoutException:
            return of_failure(f"timed out after {self.timeout:g} s")
        except httpx.HTTPError as exc:  # refused, reset, TLS, a malformed answer
            return of_failure(f"POST {self.url} failed: {type(exc).__name__}: {exc}")


def _read(resp: httpx.Response, deadline: float) -> tuple[bytes, bool]:
    """Up to READ_LIMIT bytes of the answer, and whether that is all of it; past
    ``deadline`` (monotonic), a timeout."""
    data = bytearray()
    for chunk in resp.iter_bytes():
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("the answer took too long as a whole")
        data += chunk
        if len(data) > READ_LIMIT:
            return bytes(data[:READ_LIMIT]), False
    return bytes(data), True


class PushCall:
    """One delivery in a thread of its own, watched as a command is (wait, kill, finish)."""

    def __init__(self, target: PushTarget, job: ClaimedJob) -> None:
        self.target, self.job = target, job
        self.verdict: Verdict | None = None
        self._done = threading.Event()
        threading.Thread(target=self._run, name=f"queuelog-push-{job.id}", daemon=True).start()

    def _run(self) -> None:
        try:
            self.verdict = self.target.deliver(self.job)
        except Exception as exc:  # a bug here must fail the job, not leave it held
            self.verdict = of_failure(f"cannot deliver: {type(exc).__name__}: {exc}")
        finally:
            self._done.set()

    def wait(self, seconds: float) -> bool:
        """True once the target has answered (or the request failed)."""
        return self._done.wait(max(0.0, seconds))

    def kill(self) -> None:
        """Abandon the request: its answer is not ours to give (its timeout ends it)."""

    def stop(self, hurry: Any) -> None:
        """Abandon the request at the end of the grace period (the job is failed with retry)."""

    def finish(self) -> int:
        """No exit status: the verdict says how it went."""
        return 0


class PushRun(JobRun):
    """A claimed job delivered to the push target instead of run as a command."""

    def start(self) -> PushCall:
        """Send the request (the target is in the runner's settings)."""
        return PushCall(self.settings.target, self.job)

    def stopped_error(self, proc: Any) -> str:
        """The error of a delivery still unanswered at the end of the grace period."""
        return "stopped: the worker shut down and the grace period ended before the answer"

    def exited(self, code: int, proc: Any, nxt: NextBody | None) -> ClaimedJob | None:
        """Answer the job as the target did (verdict.py's rules)."""
        v: Verdict = proc.verdict
        if v.completed:
            return self._complete(v.result, v.as_text, nxt)
        return self._fail("failed", v.error, retry=v.retry, retry_in=v.retry_in, nxt=nxt)

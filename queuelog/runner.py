"""``queuelog work``: claim jobs and run a command for each, over the HTTP API.

Threads: the main thread waits and handles signals; one poller claims (long polls) while a
slot is free; each job has a thread that runs its command and answers, and a heartbeat thread.
It imports nothing from the server side: a worker host needs only the client.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from datetime import datetime
from typing import Any, Callable, TextIO

from .client import Client, ClientError, ProblemError, Unreachable, backoff
from .jobprocess import ERROR_BYTES, JobProcess, describe_exit, parse_result

POLL_WAIT = 30            # seconds a claim long-polls (the server's maximum)
CLAIM_BACKOFF_CAP = 15.0  # seconds between claims while the server is down, at most
HARD_STOP_SECONDS = 5.0   # after a second signal: time left to report the killed jobs
# Never passed to the command: the runner's own credentials.
SECRET_ENV = ("QUEUELOG_TOKEN", "QUEUELOG_TOKEN_FILE")


class Fatal(Exception):
    """The server refused the runner's key (401, 403): retrying cannot help."""


class Runner:
    """Runs COMMAND for every job it claims, ``concurrency`` at a time."""

    def __init__(self, client: Client, command: list[str], *, types: list[str] | None = None,
                 concurrency: int = 1, lease: float | None = None, timeout: float | None = None,
                 grace: float = 30.0, log: TextIO | None = None) -> None:
        self.client, self.command = client, list(command)
        self.types, self.concurrency = types, concurrency
        self.lease, self.timeout, self.grace = lease, timeout, grace
        self._log_to = log or sys.stderr
        self._log_lock = threading.Lock()
        self._state = threading.Condition()
        self._active = 0
        self._stop = threading.Event()       # SIGTERM/SIGINT: no new claims
        self._hard = threading.Event()       # second signal or a refused key: kill now
        self._grace_end = float("inf")
        self._hard_end = float("inf")
        self._fatal: str | None = None
        self._batch_claims = concurrency > 1
        self._env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}

    # -- the main thread -----------------------------------------------------------------------

    def run(self) -> int:
        """Work until stopped; 0 after a signal, 1 when the server refuses the key."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        poller = threading.Thread(target=self._poll, name="queuelog-poller", daemon=True)
        poller.start()
        with self._state:
            # Once stopped and idle, an open long poll is abandoned rather than waited for
            # (up to 30 s): an idle worker stops at once.
            while self._active or not (self._stop.is_set() or not poller.is_alive()):
                if self._hard.is_set() and time.monotonic() >= self._hard_end:
                    break  # answers that cannot land now are given up
                # Short waits: signal handlers run in this thread between them.
                self._state.wait(0.2)
        self.client.close()
        return 1 if self._fatal else 0

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._stop.is_set():
            self.log(f"{signal.Signals(signum).name} again: killing the running commands")
            self._hard_end = time.monotonic() + HARD_STOP_SECONDS
            self._hard.set()
        else:
            self.log(f"{signal.Signals(signum).name}: no new jobs; running ones get "
                     f"{self.grace:g} s to finish")
            self._grace_end = time.monotonic() + self.grace
            self._stop.set()
        with self._state:
            self._state.notify_all()

    def stop(self) -> None:
        """Stop as SIGTERM does (for callers that are not the main thread)."""
        self._on_signal(signal.SIGTERM, None)

    def log(self, line: str) -> None:
        """One line on standard error."""
        with self._log_lock:
            print(f"queuelog work: {line}", file=self._log_to, flush=True)

    def _refused(self, exc: ProblemError) -> None:
        if self._fatal is None:
            self._fatal = f"the server refused this key ({exc.status}): {exc.detail}"
            self.log(self._fatal)
        self._stop.set()
        self._hard_end = time.monotonic() + HARD_STOP_SECONDS
        self._hard.set()
        with self._state:
            self._state.notify_all()

    # -- the poller ----------------------------------------------------------------------------

    def _poll(self) -> None:
        tries = 0
        while not self._stop.is_set():
            with self._state:
                while self._active >= self.concurrency and not self._stop.is_set():
                    self._state.wait()
                free = self.concurrency - self._active
            if self._stop.is_set():
                return
            started = time.monotonic()
            try:
                jobs = self._claim(free)
            except ProblemError as exc:
                if not exc.transient:
                    self._refused(exc) if exc.status in (401, 403) else self._bad_request(exc)
                    return
                tries = self._pause(tries, f"{exc.status} {exc.detail}", exc.retry_after)
                continue
            except Unreachable as exc:
                tries = self._pause(tries, str(exc), None)
                continue
            if tries:
                self.log("the server answers again")
                tries = 0
            for job in jobs:
                self._start(job)
            if not jobs and time.monotonic() - started < POLL_WAIT / 2:
                # Answered early with nothing (the server's long-poll slots were full, or it
                # is shutting down): do not hammer it.
                self._stop.wait(backoff(2, cap=1.0))

    def _claim(self, free: int) -> list[dict[str, Any]]:
        if self._batch_claims and free > 1:
            try:
                got = self.client.claim(self.types, wait=POLL_WAIT, max_jobs=free,
                                        lease_seconds=self.lease)
                return list(got or [])  # type: ignore[arg-type]
            except ProblemError as exc:
                if exc.status != 422 or "max_jobs" not in str(exc.errors):
                    raise
                self._batch_claims = False  # an older server: claim one at a time
        job = self.client.claim(self.types, wait=POLL_WAIT, lease_seconds=self.lease)
        return [job] if job else []  # type: ignore[list-item]

    def _pause(self, tries: int, why: str, retry_after: float | None) -> int:
        if tries == 0:
            self.log(f"cannot claim, retrying with backoff: {why}")
        delay = max(backoff(tries, first=0.5, cap=CLAIM_BACKOFF_CAP),
                    min(retry_after or 0, CLAIM_BACKOFF_CAP))
        self._stop.wait(delay)
        return tries + 1

    def _bad_request(self, exc: ProblemError) -> None:
        # A 4xx to a claim (an unknown type, say) repeats forever: stop with the reason.
        self._fatal = f"the server refused the claim ({exc.status}): {exc.detail}"
        self.log(self._fatal)
        self._stop.set()
        with self._state:
            self._state.notify_all()

    def _start(self, job: dict[str, Any]) -> None:
        with self._state:
            self._active += 1
        threading.Thread(target=self._job_thread, args=(job,), daemon=True,
                         name=f"queuelog-job-{job['id']}").start()

    # -- one job -------------------------------------------------------------------------------

    def _job_thread(self, job: dict[str, Any]) -> None:
        try:
            JobRun(self, job).run()
        except Exception as exc:  # a bug here must not stop the other jobs or hang the exit
            self.log(f"job={job.get('id')} internal error: {type(exc).__name__}: {exc}")
        finally:
            with self._state:
                self._active -= 1
                self._state.notify_all()

    def child_env(self, job: dict[str, Any]) -> dict[str, str]:
        """The command's environment: the runner's, less its token, plus the job's fields."""
        return {**self._env, "QUEUELOG_JOB_ID": str(job["id"]),
                "QUEUELOG_JOB_TYPE": str(job["type"]),
                "QUEUELOG_JOB_ATTEMPT": str(job["attempt"]),
                "QUEUELOG_JOB_PRIORITY": str(job.get("priority", ""))}

    def must_stop(self) -> bool:
        """True when running commands must be killed now (second signal, grace over)."""
        return self._hard.is_set() or time.monotonic() >= self._grace_end


class JobRun:
    """Run one claimed job's command, heartbeat meanwhile, and report how it ended."""

    def __init__(self, runner: Runner, job: dict[str, Any]) -> None:
        self.runner, self.job = runner, job
        self.client = runner.client
        self.lease = runner.lease or lease_of(job)
        self.lost = threading.Event()
        self.done = threading.Event()
        self.started = time.monotonic()

    def run(self) -> None:
        """The whole life of the job in this runner."""
        try:
            proc = JobProcess(self.runner.command, self.job.get("payload"),
                              self.runner.child_env(self.job))
        except OSError as exc:  # deleted or made unexecutable since the runner started
            error = f"cannot run {self.runner.command[0]}: {exc}"
            self._answer("failed", lambda: self.client.fail(self.job, error))
            return
        beat = threading.Thread(target=self._heartbeats, args=(proc,), daemon=True)
        beat.start()
        ended = self._watch(proc)
        self.done.set()
        code = proc.finish()
        if self.lost.is_set():
            self._log("lost")  # the lease went to someone else: the answer is theirs now
            return
        if ended == "timeout":
            error = f"timed out after {self.runner.timeout:g} s"
            self._answer("timed-out", lambda: self.client.fail(self.job, error))
        elif ended == "stopped":
            error = _with_stderr("stopped: the worker shut down and the grace period ended",
                                 proc)
            self._answer("stopped", lambda: self.client.fail(self.job, error, retry_in=0))
        elif code == 0:
            self._complete(parse_result(proc.stdout))
        else:
            error = _with_stderr(describe_exit(code), proc)
            self._answer("failed", lambda: self.client.fail(self.job, error))

    def _watch(self, proc: JobProcess) -> str:
        """Wait for the command to exit, or kill it; returns why it ended."""
        deadline = self.started + self.runner.timeout if self.runner.timeout else float("inf")
        while not proc.wait(min(0.1, deadline - time.monotonic())):
            if self.lost.is_set():
                proc.kill()
                return "lost"
            if time.monotonic() >= deadline:
                proc.kill()
                return "timeout"
            if self.runner.must_stop():
                proc.kill()
                return "stopped"
        return "exited"

    def _heartbeats(self, proc: JobProcess) -> None:
        """Heartbeat every third of the lease; a 409 means the lease is gone: kill, say nothing."""
        interval = max(self.lease / 3, 0.2)
        while not self.done.wait(interval):
            try:
                self.job = self.client.heartbeat(self.job, lease_seconds=self.runner.lease)
            except ProblemError as exc:
                if self.done.is_set():
                    return
                if exc.status in (401, 403):
                    self.runner._refused(exc)
                    return
                if exc.status in (404, 409):
                    self.lost.set()
                    proc.kill()
                    return
            except Unreachable:
                pass  # retried until the lease would have run out; keep trying on schedule

    def _complete(self, result: dict[str, Any] | None) -> None:
        try:
            self._answer("completed", lambda: self.client.complete(self.job, result),
                         quiet_422=True)
        except ProblemError as exc:  # 422: a result over the server's size limit
            error = f"the server refused the result ({exc.status}): {exc.detail}"
            self._answer("failed", lambda: self.client.fail(self.job, error, retry=False))

    def _answer(self, outcome: str, send: Callable[[], Any], quiet_422: bool = False) -> None:
        """Send the answer (the client retries it until it lands or the lease runs out)."""
        try:
            send()
        except ProblemError as exc:
            if exc.status == 422 and quiet_422:
                raise
            if exc.status in (401, 403):
                self.runner._refused(exc)
            # 409: the lease ran out and the job went back (or to someone else) meanwhile.
            self._log("lost" if exc.status in (404, 409) else f"unreported ({exc.status})")
            return
        except ClientError as exc:
            self._log(f"unreported ({type(exc).__name__})")
            return
        self._log(outcome)

    def _log(self, outcome: str) -> None:
        j = self.job
        self.runner.log(f"job={j['id']} type={j['type']} attempt={j['attempt']} "
                        f"outcome={outcome} seconds={time.monotonic() - self.started:.3f}")


def _with_stderr(head: str, proc: JobProcess) -> str:
    """The error text: what happened, then as much of the end of stderr as fits."""
    room = ERROR_BYTES - len(head.encode("utf-8")) - 1
    tail = proc.stderr.last(room)
    return f"{head}\n{tail}" if tail else head


def lease_of(job: dict[str, Any]) -> float:
    """The job's lease in seconds, from its claim's ``claimed_at`` and ``lease_expires_at``."""
    try:
        start = datetime.fromisoformat(job["claimed_at"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(job["lease_expires_at"].replace("Z", "+00:00"))
        return max((end - start).total_seconds(), 1.0)
    except (KeyError, AttributeError, ValueError):
        return 300.0  # LEASE_SECONDS' default


def read_token(token_file: str | None, token: str | None) -> str:
    """The worker key: from the token file if one is named, else the given value."""
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as fh:
                mode = os.fstat(fh.fileno()).st_mode
                text = fh.read().strip()
        except OSError as exc:
            raise ValueError(f"cannot read the token file: {exc}") from None
        if not text:
            raise ValueError(f"the token file {token_file} is empty")
        if mode & 0o077:
            print(f"queuelog work: warning: {token_file} is readable by other users; "
                  f"chmod 600 it", file=sys.stderr, flush=True)
        return text
    if token and token.strip():
        return token.strip()
    raise ValueError("no token: give --token-file, or set QUEUELOG_TOKEN_FILE or QUEUELOG_TOKEN")

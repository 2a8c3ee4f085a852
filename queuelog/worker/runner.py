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
from typing import Any, TextIO

from queuelog.worker.answers import Answers
from queuelog.client import Client, ProblemError, Unreachable, backoff
from queuelog.worker.job import JobRun

POLL_WAIT = 30            # seconds a claim long-polls (the server's maximum)
CLAIM_BACKOFF_CAP = 15.0  # seconds between claims while the server is down, at most
HARD_STOP_SECONDS = 5.0   # after a second signal: time left to report the killed jobs
CLAIM_GATHER_SECONDS = 0.01  # how long a claim waits for more running jobs to end
# Never passed to the command: the runner's own credentials.
SECRET_ENV = ("QUEUELOG_TOKEN", "QUEUELOG_TOKEN_FILE")


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
        self._active = 0    # commands running: the slots taken
        self._reserved = 0  # slots a claim in flight may fill
        self._outage = False  # claims are failing: said once, and once when they work again
        self._jobs = 0      # job threads alive: running, or answering after their command
        self._stop = threading.Event()       # SIGTERM/SIGINT: no new claims
        self._hard = threading.Event()       # second signal or a refused key: kill now
        self._grace_end = float("inf")
        self._hard_end = float("inf")
        self._fatal: str | None = None
        self._batch_claims = concurrency > 1
        self._env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
        self.answers = Answers(client)

    # -- the main thread -----------------------------------------------------------------------

    def run(self) -> int:
        """Work until stopped; 0 after a signal, 1 when the server refuses the key."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        # Two pollers: while one claim is in flight, slots freed meanwhile can be claimed by
        # the other. An idle runner has one long poll open: the first reserves every slot.
        pollers = [threading.Thread(target=self._poll, name=f"queuelog-poller-{n}",
                                    daemon=True) for n in range(min(2, self.concurrency))]
        for poller in pollers:
            poller.start()
        with self._state:
            # Once stopped and idle, an open long poll is abandoned rather than waited for
            # (up to 30 s): an idle worker stops at once.
            while self._jobs or not (self._stop.is_set()
                                     or not any(p.is_alive() for p in pollers)):
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

    def give_up(self, reason: str, *, kill: bool) -> None:
        """Stop for good, exit status 1, with one line; ``kill``: the running commands too."""
        if self._fatal is None:
            self._fatal = reason
            self.log(reason)
        self._stop.set()
        if kill:
            self._hard_end = time.monotonic() + HARD_STOP_SECONDS
            self._hard.set()
        with self._state:
            self._state.notify_all()

    def refused(self, exc: ProblemError) -> None:
        """The server refused the key (401, 403): nothing this runner sends can land."""
        self.give_up(f"the server refused this key ({exc.status}): {exc.detail}", kill=True)

    # -- the poller ----------------------------------------------------------------------------

    def _poll(self) -> None:
        try:
            self._poll_loop()
        except Exception as exc:  # a bug, or a URL that is not a queuelog server's
            self.give_up(f"stopped claiming: {type(exc).__name__}: {exc}", kill=False)

    def _free(self) -> int:
        return self.concurrency - self._active - self._reserved

    def _poll_loop(self) -> None:
        tries = 0
        while not self._stop.is_set():
            with self._state:
                while self._free() <= 0 and not self._stop.is_set():
                    self._state.wait()
                self._gather()
                free = self._free()
                self._reserved += free
            if self._stop.is_set():
                return
            started = time.monotonic()
            try:
                jobs = self._claim(free)
            except ProblemError as exc:
                if exc.status in (401, 403):
                    self.refused(exc)
                    return
                if not exc.transient:  # a 4xx to a claim (an unknown type) repeats forever
                    self.give_up(f"the server refused the claim ({exc.status}): {exc.detail}",
                                 kill=False)
                    return
                tries = self._pause(tries, f"{exc.status} {exc.detail}", exc.retry_after)
                continue
            except Unreachable as exc:
                tries = self._pause(tries, str(exc), None)
                continue
            else:
                with self._state:  # the claimed jobs take their slots before the rest is freed
                    self._active += len(jobs)
                    self._jobs += len(jobs)
            finally:
                with self._state:
                    self._reserved -= free
                    self._state.notify_all()
            tries = 0
            with self._state:
                if self._outage:
                    self._outage = False
                    self.log("the server answers again")
            for job in jobs:
                self._start(job)
            if not jobs and time.monotonic() - started < POLL_WAIT / 2:
                # Answered early with nothing (the server's long-poll slots were full, or it
                # is shutting down): do not hammer it.
                self._stop.wait(backoff(2, cap=1.0))

    def _gather(self) -> None:
        # Called holding _state with a slot free. While other jobs still run, give them a
        # moment to finish too, so that one claim (max_jobs) fills several slots: short jobs
        # otherwise free their slots one by one, and every claim would be for one job.
        if not self._batch_claims:
            return
        until = time.monotonic() + CLAIM_GATHER_SECONDS
        while self._active and self._free() < (self.concurrency + 1) // 2:
            left = until - time.monotonic()
            if left <= 0 or self._stop.is_set():
                return
            self._state.wait(left)

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
        with self._state:
            if not self._outage:
                self._outage = True
                self.log(f"cannot claim, retrying with backoff: {why}")
        delay = max(backoff(tries, first=0.5, cap=CLAIM_BACKOFF_CAP),
                    min(retry_after or 0, CLAIM_BACKOFF_CAP))
        self._stop.wait(delay)
        return tries + 1

    def _start(self, job: dict[str, Any]) -> None:
        # Its slot is already counted (in _active and _jobs) by the claim that got it.
        threading.Thread(target=self._job_thread, args=(job,), daemon=True,
                         name=f"queuelog-job-{job['id']}").start()

    # -- one job -------------------------------------------------------------------------------

    def _job_thread(self, job: dict[str, Any]) -> None:
        run = JobRun(self, job)
        try:
            run.run()
        except Exception as exc:  # a bug here must not stop the other jobs or hang the exit
            self.log(f"job={job.get('id')} internal error: {type(exc).__name__}: {exc}")
        finally:
            run.release()
            with self._state:
                self._jobs -= 1
                self._state.notify_all()

    def release(self) -> None:
        """A job's command has ended: its slot is free while its answer is on the way."""
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

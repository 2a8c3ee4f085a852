"""``queuelog work``: claim jobs and run a command for each, over the HTTP API.

Threads: the main thread waits and handles signals; one poller claims (long polls) while a
slot is free; each job has a thread that runs its command and answers, and a heartbeat thread.
It imports nothing from the server side: a worker host needs only the client.
"""
from __future__ import annotations

import os
import signal
import ssl
import sys
import threading
from typing import Any, Callable, TextIO

from queuelog.client import Client, ProblemError, Unreachable, backoff
from queuelog.model.claimed import ClaimedJob, MalformedJob
from queuelog.worker.answers import Answers
from queuelog.worker.clock import SYSTEM, Clock
from queuelog.worker.job import JobRun, Settings
from queuelog.worker.process import ERROR_BYTES, prepare
from queuelog.worker.push import PushRun, PushTarget
from queuelog.worker.slots import Slots

POLL_WAIT = 30            # seconds a claim long-polls (the server's maximum)
CLAIM_BACKOFF_CAP = 15.0  # seconds between claims while the server is down, at most
HARD_STOP_SECONDS = 5.0   # after a second signal: time left to report the killed jobs
# Never passed to the command: the runner's own credentials.
SECRET_ENV = ("QUEUELOG_TOKEN", "QUEUELOG_TOKEN_FILE")


class Runner:
    """Runs COMMAND for every job it claims (or posts it to ``target``), N at a time."""

    def __init__(self, client: Client, command: list[str], *, types: list[str] | None = None,
                 concurrency: int = 1, lease: float | None = None, timeout: float | None = None,
                 grace: float = 30.0, log: TextIO | None = None, clock: Clock = SYSTEM,
                 spawn: Callable[..., Any] = threading.Thread,
                 target: PushTarget | None = None, error_bytes: int = ERROR_BYTES) -> None:
        self.client, self.types, self.grace, self.clock = client, types, grace, clock
        self._spawn = spawn  # makes the job threads (a test's may fail to start, as a host can)
        self.concurrency = concurrency
        env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
        self.settings = Settings(list(command), env, lease, timeout, target, error_bytes)
        # --post: each job is a request to the target instead of a command (push.py).
        self._run_kind = JobRun if target is None else PushRun
        self._log_to = log or sys.stderr
        self._log_lock = threading.Lock()
        self._stop = threading.Event()       # SIGTERM/SIGINT: no new claims
        self._hard = threading.Event()       # second signal or a refused key: kill now
        self.slots = Slots(concurrency, stopped=self._stop.is_set, clock=clock)
        self._state = self.slots.cond        # one lock for the slots and the job count
        self._jobs = 0      # jobs held: running, answering after their command, or handed back
        self._outage = False  # claims are failing: said once, and once when they work again
        self._grace_end = float("inf")
        self._hard_end = float("inf")
        self._fatal: str | None = None
        self._batch_claims = concurrency > 1
        # The one-request loop (a job's answer claims the next, ``next``) with one slot.
        # With more, answers and claims of jobs that end together go in batches (one
        # transaction for several jobs, where ``next`` costs two per job), and one long
        # poll per slot would take more than the server's long-poll slots.
        self._chaining = concurrency == 1
        self.answers = Answers(client, log=self.log, clock=clock)

    # -- the main thread -----------------------------------------------------------------------

    def run(self) -> int:
        """Work until stopped; 0 after a signal, 1 when the server refuses the key."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        if self.settings.target is None:  # --post starts no process: no reaper to start
            prepare()  # the reaper and the death signal's wrapper: not in the first job's time
        # Two pollers: while one claim is in flight, slots freed meanwhile can be claimed by
        # the other. An idle runner has one long poll open: the first reserves every slot.
        pollers = [threading.Thread(target=self._poll, name=f"queuelog-poller-{n}",
                                    daemon=True) for n in range(min(2, self.concurrency))]
        for poller in pollers:
            poller.start()
        with self._state:
            # Once stopped, an open long poll is abandoned rather than waited for (up to
            # 30 s), busy or idle: only the jobs held are waited for, and whatever that poll
            # still returns goes back unrun (poll_once).
            while self._jobs or not (self._stop.is_set()
                                     or not any(p.is_alive() for p in pollers)):
                if self._hard.is_set() and self.clock.monotonic() >= self._hard_end:
                    break  # answers that cannot land now are given up
                # Short waits: signal handlers run in this thread between them.
                self._state.wait(0.2)
        self.client.close()
        if self.settings.target is not None:
            self.settings.target.close()
        return 1 if self._fatal else 0

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._stop.is_set():
            self.log(f"{signal.Signals(signum).name} again: killing the running commands")
            self._hard_end = self.clock.monotonic() + HARD_STOP_SECONDS
            self._hard.set()
        else:
            self.log(f"{signal.Signals(signum).name}: no new jobs; running ones get "
                     f"{self.grace:g} s to finish")
            self._grace_end = self.clock.monotonic() + self.grace
            self._stop.set()
        self.slots.wake()

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
            self._hard_end = self.clock.monotonic() + HARD_STOP_SECONDS
            self._hard.set()
        self.slots.wake()

    def refused(self, exc: ProblemError) -> None:
        """The server refused the key (401, 403): nothing this runner sends can land."""
        self.give_up(f"the server refused this key ({exc.status}): {exc.detail}", kill=True)

    def must_stop(self) -> bool:
        """True when running commands must be killed now (second signal, grace over)."""
        return self._hard.is_set() or self.clock.monotonic() >= self._grace_end

    # -- the poller ----------------------------------------------------------------------------

    def _poll(self) -> None:
        tries = 0
        while not self._stop.is_set():
            try:
                tries = self.poll_once(tries)
            except Exception as exc:  # a bug, or a URL that is not a queuelog server's
                tries = self._pause(tries, f"{type(exc).__name__}: {exc}", None)

    def poll_once(self, tries: int) -> int:
        """Reserve the free slots, claim, start the jobs; returns the claim's failure count."""
        free = self.slots.reserve()
        if not free:
            return tries  # stopped
        started, jobs = self.clock.monotonic(), []
        try:
            jobs = self._claim(free)
        except ProblemError as exc:
            return self._claim_refused(exc, tries)
        except Unreachable as exc:
            tls = _tls_failure(exc)
            if tls is not None:  # retrying cannot fix a certificate: say so and stop
                self.give_up(f"TLS verification failed for {self.client.url}: {tls}", kill=True)
                return tries
            return self._pause(tries, str(exc), None)
        finally:
            with self._state:  # the claimed jobs take their slots before the rest is freed
                self._jobs += len(jobs)  # run() waits for them, run or handed back
                stopping = self._stop.is_set()
            self.slots.settle(free, 0 if stopping else len(jobs))
        self._answered()
        if stopping:  # claimed after SIGTERM (a long poll open before it): not run (CONTRACT)
            for job in jobs:
                self._hand_back(job, "the worker was shutting down when it claimed this job")
            return 0
        for job in jobs:
            self._start(job)
        if not jobs and self.clock.monotonic() - started < POLL_WAIT / 2:
            # Answered early with nothing (the server's long-poll slots were full, or it
            # is shutting down): do not hammer it.
            self.clock.sleep(backoff(2, cap=1.0), self._stop)
        return 0

    def _claim_refused(self, exc: ProblemError, tries: int) -> int:
        if exc.status in (401, 403):
            self.refused(exc)
        elif not exc.transient:  # a 4xx to a claim (an unknown type) repeats forever
            self.give_up(f"the server refused the claim ({exc.status}): {exc.detail}",
                         kill=False)
        else:
            return self._pause(tries, f"{exc.status} {exc.detail}", exc.retry_after)
        return tries

    def _answered(self) -> None:
        with self._state:
            if self._outage:
                self._outage = False
                self.log("the server answers again")

    def _claim(self, free: int) -> list[ClaimedJob]:
        """Claim up to ``free`` jobs (at least one slot is reserved); only well-formed ones."""
        if self._batch_claims and free > 1:
            try:
                got: Any = self.client.claim(self.types, wait=POLL_WAIT, max_jobs=free,
                                             lease_seconds=self.settings.lease)
                return self._well_formed(got, free)
            except ProblemError as exc:
                if exc.status != 422 or "max_jobs" not in str(exc.errors):
                    raise
                self._batch_claims = False  # an older server: claim one at a time
        job = self.client.claim(self.types, wait=POLL_WAIT, lease_seconds=self.settings.lease)
        return self._well_formed([job] if job else [], 1)

    def _well_formed(self, jobs: Any, free: int) -> list[ClaimedJob]:
        """The claimed jobs the runner can run; a malformed answer is one line, then skipped."""
        good = [j for j in map(_parsed, jobs) if j] if isinstance(jobs, list) else []
        if len(good) != (len(jobs) if isinstance(jobs, list) else 1) or len(good) > free:
            self.log(f"the server's claim answer is malformed ({str(jobs)[:200]}); "
                     "claiming again")
            return good[:free]  # a job beyond the free slots would break --concurrency
        return good

    def _pause(self, tries: int, why: str, retry_after: float | None) -> int:
        with self._state:
            if not self._outage:
                self._outage = True
                self.log(f"cannot claim, retrying with backoff: {why}")
        delay = max(backoff(tries, first=0.5, cap=CLAIM_BACKOFF_CAP),
                    min(retry_after or 0, CLAIM_BACKOFF_CAP))
        self.clock.sleep(delay, self._stop)
        return tries + 1

    def _start(self, job: ClaimedJob) -> None:
        # Its slot is already counted (in the slots and _jobs) by the claim that got it.
        try:
            self._spawn(target=self._job_thread, args=(job,), daemon=True,
                        name=f"queuelog-job-{job.id}").start()
        except Exception as exc:  # RuntimeError "can't start new thread": out of threads
            why = f"{type(exc).__name__}: {exc}"
            self.slots.release()
            self.log(f"job={job.id} cannot start a thread to run it ({why}); handing it back")
            self._hand_back(job, f"the worker could not start it ({why})")

    def _hand_back(self, job: ClaimedJob, why: str) -> None:
        """Give a claimed job back unrun (failed with retry, due at once); it holds no slot."""
        try:
            self._job_run(job).hand_back(why)
        except Exception as exc:  # a bug here must not keep run() waiting for this job
            self.log(f"job={job.id} internal error: {type(exc).__name__}: {exc}")
        finally:
            with self._state:
                self._jobs -= 1
                self._state.notify_all()

    def _job_run(self, job: ClaimedJob) -> JobRun:
        """The job's run, with this runner's narrow collaborators."""
        return self._run_kind(job, settings=self.settings, client=self.client, answers=self.answers,
                      must_stop=self.must_stop, refused=self.refused, log=self.log,
                      clock=self.clock, hurry=self._hard.is_set, chain=self._next_body,
                      stopping=self._stop.is_set, unchained=self._unchain,
                      hand_back=self._return_unrun)

    def _next_body(self) -> dict[str, Any] | None:
        """The ``next`` of a job's answer: claim for its slot (None: not now)."""
        if not self._chaining or self._stop.is_set():
            return None
        body: dict[str, Any] = {"wait": POLL_WAIT}
        if self.types is not None:
            body["types"] = list(self.types)
        if self.settings.lease is not None:
            body["lease_seconds"] = self.settings.lease
        return body

    def _unchain(self) -> None:
        self._chaining = False  # the server does not know ``next``: claim the usual way

    def _return_unrun(self, job: ClaimedJob, why: str) -> None:
        """Hand back a job a request claimed after the stop; it never held a slot."""
        self._job_run(job).hand_back(why)

    # -- one job -------------------------------------------------------------------------------

    def _job_thread(self, job: ClaimedJob) -> None:
        released = threading.Event()

        def release() -> None:  # once, whichever way the jobs of this slot end
            if not released.is_set():
                released.set()
                self.slots.release()
        current: ClaimedJob | None = job
        try:
            while current is not None:  # a job's answer may bring the slot's next job
                job = current
                current = self._job_run(job).run(release)
        except Exception as exc:  # a bug here must not stop the other jobs or hang the exit
            self.log(f"job={job.id} internal error: {type(exc).__name__}: {exc}")
        finally:
            release()
            with self._state:
                self._jobs -= 1
                self._state.notify_all()


def _tls_failure(exc: BaseException) -> str | None:
    """The certificate error behind an Unreachable, if that is what it is; else None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen.verify_message or str(seen)
        seen = seen.__cause__ or seen.__context__
    return None


def _parsed(job: Any) -> ClaimedJob | None:
    """A claimed job as the runner needs it (an id, a type and an attempt), else None."""
    try:
        return ClaimedJob.from_json(job)
    except MalformedJob:
        return None


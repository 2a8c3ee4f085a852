"""One claimed job in ``queuelog work``: run its command, heartbeat meanwhile, answer.

A ``JobRun`` gets narrow collaborators (the client, the answers, a few callables), never the
runner itself, as dramatiq's worker threads take keyword arguments and not the Worker.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from queuelog.client import Client, ClientError, ProblemError
from queuelog.model.claimed import ClaimedJob
from queuelog.worker.answers import Answers
from queuelog.worker.clock import SYSTEM, Clock
from queuelog.worker.process import (ERROR_BYTES, STDOUT_TAIL, JobProcess, describe_exit,
                                     parse_result)


@dataclass(frozen=True)
class Settings:
    """What every job of a runner shares: the command and its limits."""

    command: list[str]
    env: dict[str, str]            # the runner's environment, less its token
    lease: float | None = None     # --lease; None: the server's per type
    timeout: float | None = None   # --timeout


class JobRun:
    """Run one claimed job's command, heartbeat meanwhile, and report how it ended."""

    def __init__(self, job: ClaimedJob, *, settings: Settings, client: Client,
                 answers: Answers, must_stop: Callable[[], bool],
                 refused: Callable[[ProblemError], None], log: Callable[[str], None],
                 clock: Clock = SYSTEM, hurry: Callable[[], bool] = lambda: False) -> None:
        self.job, self.settings, self.client, self.answers = job, settings, client, answers
        self.must_stop, self.refused, self.log, self.clock = must_stop, refused, log, clock
        self.hurry = hurry  # a second signal: a stopped command gets no 5 s after SIGTERM
        self.lease = settings.lease or job.lease_seconds
        self.lost = threading.Event()
        self.done = threading.Event()
        self.started = clock.monotonic()

    def run(self, release: Callable[[], None]) -> None:
        """The whole life of the job in this runner; ``release`` once its command is over."""
        try:
            proc = JobProcess(self.settings.command, self.job.payload, self.child_env())
        except OSError as exc:  # deleted or made unexecutable since the runner started
            release()
            self._fail("failed", f"cannot run {self.settings.command[0]}: {exc}")
            return
        try:
            threading.Thread(target=self.heartbeats, args=(proc.kill,), daemon=True).start()
            ended = self._watch(proc)
            code = proc.finish()
        finally:
            self.done.set()
            release()  # the next job may start while this one's answer is sent
        self._report(ended, code, proc)

    def hand_back(self, why: str) -> None:
        """Give the job back unrun: failed with retry, due again at once (``retry_in`` 0)."""
        self._fail("returned", why, retry_in=0)

    def child_env(self) -> dict[str, str]:
        """The command's environment: the runner's, less its token, plus the job's fields."""
        j = self.job
        return {**self.settings.env, "QUEUELOG_JOB_ID": str(j.id),
                "QUEUELOG_JOB_TYPE": j.type, "QUEUELOG_JOB_ATTEMPT": str(j.attempt),
                "QUEUELOG_JOB_PRIORITY": "" if j.priority is None else str(j.priority)}

    def _report(self, ended: str, code: int, proc: JobProcess) -> None:
        if self.lost.is_set():
            self._log("lost")  # the lease went to someone else: the answer is theirs now
        elif ended == "timeout":
            self._fail("timed-out", f"timed out after {self.settings.timeout:g} s")
        elif ended == "stopped":
            error = _with_stderr("stopped: the worker shut down and the grace period ended",
                                 proc)
            self._fail("stopped", error, retry_in=0)
        elif code == 0:
            self._complete(parse_result(proc.stdout), proc.stdout.last(STDOUT_TAIL))
        else:
            self._fail("failed", _with_stderr(describe_exit(code), proc))

    def _watch(self, proc: JobProcess) -> str:
        """Wait for the command to exit, or kill it; returns why it ended."""
        timeout = self.settings.timeout
        deadline = self.started + timeout if timeout else float("inf")
        while not proc.wait(min(0.1, deadline - self.clock.monotonic())):
            why = ("lost" if self.lost.is_set() else "timeout"
                   if self.clock.monotonic() >= deadline else "stopped"
                   if self.must_stop() else None)
            if why == "stopped":  # grace is over: SIGTERM, SIGKILL 5 s later (CONTRACT)
                proc.stop(self.hurry)
                return why
            if why:
                proc.kill()
                return why
        return "exited"

    def heartbeats(self, kill: Callable[[], None]) -> None:
        """Heartbeat every third of the lease; a 409 means the lease is gone: kill, say nothing."""
        interval = max(self.lease / 3, 0.2)
        while not self.done.wait(interval):
            try:
                answer = self.client.heartbeat(self.job, lease_seconds=self.settings.lease)
                self.job = self.job.renewed(answer)
            except ProblemError as exc:
                if self.done.is_set():
                    return
                if exc.status in (401, 403):
                    self.refused(exc)
                    return
                if exc.status in (404, 409):
                    self.lost.set()
                    kill()
                    return
                self._beat_failed(f"{exc.status} {exc.detail}")
            except Exception as exc:  # unreachable, or an answer that is not the server's
                if self.done.is_set():
                    return
                self._beat_failed(f"{type(exc).__name__}: {exc}")

    def _beat_failed(self, why: str) -> None:
        # Tried again on schedule; the lease may still run out, and the log says why.
        self.log(f"job={self.job.id} heartbeat failed, retrying: {why}")

    def _complete(self, result: dict[str, Any] | None, stdout: str) -> None:
        item = {} if result is None else {"result": result}
        try:
            self._answer("completed", "complete", item, refusals=(400, 422))
        except ProblemError as exc:
            if exc.status == 400 and result is not None and result != {"stdout": stdout}:
                # The server refused the JSON itself (nesting too deep): keep it as text.
                return self._complete({"stdout": stdout}, stdout)
            error = f"the server refused the result ({exc.status}): {exc.detail}"
            self._fail("failed", error, retry=False)
        return None

    def _fail(self, outcome: str, error: str, *, retry: bool = True,
              retry_in: float | None = None) -> None:
        item: dict[str, Any] = {"error": error, "retry": retry}
        if retry_in is not None:
            item["retry_in"] = retry_in
        self._answer(outcome, "fail", item)

    def _answer(self, outcome: str, verb: str, item: dict[str, Any],
                refusals: tuple[int, ...] = ()) -> None:
        """Send the answer; raises a ProblemError whose status is in ``refusals``."""
        try:
            self.answers.send(verb, self.job, item)
        except ProblemError as exc:
            if exc.status in refusals:
                raise
            if exc.status in (401, 403):
                self.refused(exc)
            # 409: the lease ran out and the job went back (or to someone else) meanwhile.
            self._log("lost" if exc.status in (404, 409) else
                      f"unreported ({exc.status} {exc.detail})")
            return
        except ClientError as exc:
            self._log(f"unreported ({type(exc).__name__}: {exc})")
            return
        self._log(outcome)

    def _log(self, outcome: str) -> None:
        j = self.job
        self.log(f"job={j.id} type={j.type} attempt={j.attempt} "
                 f"outcome={outcome} seconds={self.clock.monotonic() - self.started:.3f}")


def _with_stderr(head: str, proc: JobProcess) -> str:
    """The error text: what happened, then as much of the end of stderr as fits."""
    room = ERROR_BYTES - len(head.encode("utf-8")) - 1
    tail = proc.stderr.last(room)
    return f"{head}\n{tail}" if tail else head


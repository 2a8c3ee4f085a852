"""One claimed job in ``queuelog work``: run its command, heartbeat meanwhile, answer."""
from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from queuelog.client import ClientError, ProblemError, Unreachable
from queuelog.worker.process import ERROR_BYTES, JobProcess, describe_exit, parse_result

if TYPE_CHECKING:
    from queuelog.worker.runner import Runner


class JobRun:
    """Run one claimed job's command, heartbeat meanwhile, and report how it ended."""

    def __init__(self, runner: Runner, job: dict[str, Any]) -> None:
        self.runner, self.job = runner, job
        self.client = runner.client
        self.lease = runner.lease or lease_of(job)
        self.lost = threading.Event()
        self.done = threading.Event()
        self.started = time.monotonic()
        self._released = False

    def release(self) -> None:
        """Give the slot back (once): the command is over."""
        if not self._released:
            self._released = True
            self.runner.release()

    def run(self) -> None:
        """The whole life of the job in this runner."""
        try:
            proc = JobProcess(self.runner.command, self.job.get("payload"),
                              self.runner.child_env(self.job))
        except OSError as exc:  # deleted or made unexecutable since the runner started
            error = f"cannot run {self.runner.command[0]}: {exc}"
            self._fail("failed", error)
            return
        beat = threading.Thread(target=self._heartbeats, args=(proc,), daemon=True)
        beat.start()
        ended = self._watch(proc)
        self.done.set()
        code = proc.finish()
        self.release()  # the next job may start while this one's answer is sent
        if self.lost.is_set():
            self._log("lost")  # the lease went to someone else: the answer is theirs now
            return
        if ended == "timeout":
            error = f"timed out after {self.runner.timeout:g} s"
            self._fail("timed-out", error)
        elif ended == "stopped":
            error = _with_stderr("stopped: the worker shut down and the grace period ended",
                                 proc)
            self._fail("stopped", error, retry_in=0)
        elif code == 0:
            self._complete(parse_result(proc.stdout))
        else:
            self._fail("failed", _with_stderr(describe_exit(code), proc))

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
                    self.runner.refused(exc)
                    return
                if exc.status in (404, 409):
                    self.lost.set()
                    proc.kill()
                    return
            except Unreachable:
                pass  # retried until the lease would have run out; keep trying on schedule

    def _complete(self, result: dict[str, Any] | None) -> None:
        item = {} if result is None else {"result": result}
        try:
            self._answer("completed", "complete", item, quiet_422=True)
        except ProblemError as exc:  # 422: a result over the server's size limit
            error = f"the server refused the result ({exc.status}): {exc.detail}"
            self._fail("failed", error, retry=False)

    def _fail(self, outcome: str, error: str, *, retry: bool = True,
              retry_in: float | None = None) -> None:
        item: dict[str, Any] = {"error": error, "retry": retry}
        if retry_in is not None:
            item["retry_in"] = retry_in
        self._answer(outcome, "fail", item)

    def _answer(self, outcome: str, verb: str, item: dict[str, Any],
                quiet_422: bool = False) -> None:
        """Send the answer; it is retried until it lands or the lease would have run out."""
        try:
            self.runner.answers.send(verb, self.job, item)
        except ProblemError as exc:
            if exc.status == 422 and quiet_422:
                raise
            if exc.status in (401, 403):
                self.runner.refused(exc)
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

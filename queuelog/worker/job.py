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
from queuelog.model.tracecontext import carried
from queuelog.worker import progress
from queuelog.worker.answers import Answers
from queuelog.worker.chain import Chained
from queuelog.worker.clock import SYSTEM, Clock
from queuelog.worker.process import (ERROR_BYTES, STDOUT_TAIL, JobProcess, describe_exit,
                                     parse_result)

# A cancelled job's command runs at most this long after the cancel (CONTRACT): the runner
# learns of it from a heartbeat's 409, so it beats at least this often.
CANCEL_NOTICE_SECONDS = 10.0
# While a command's progress changes, a heartbeat carries it at least this often (the
# contract's 2 s, less the file's look interval).
PROGRESS_GAP_SECONDS = 1.0
NextBody = dict[str, Any]


def beat_interval(lease: float) -> float:
    """Seconds between heartbeats: a third of the lease, at most the cancel notice."""
    return max(0.2, min(CANCEL_NOTICE_SECONDS, lease / 3))


@dataclass(frozen=True)
class Settings:
    """What every job of a runner shares: the command (or push target) and its limits."""

    command: list[str]
    env: dict[str, str]            # the runner's environment, less its token
    lease: float | None = None     # --lease; None: the server's per type
    timeout: float | None = None   # --timeout
    target: Any = None             # --post: the PushTarget every job goes to instead
    error_bytes: int = ERROR_BYTES  # --max-error-bytes: a failed command's error, at most


class JobRun:
    """Run one claimed job's command, heartbeat meanwhile, and report how it ended."""

    def __init__(self, job: ClaimedJob, *, settings: Settings, client: Client,
                 answers: Answers, must_stop: Callable[[], bool],
                 refused: Callable[[ProblemError], None], log: Callable[[str], None],
                 clock: Clock = SYSTEM, hurry: Callable[[], bool] = lambda: False,
                 chain: Callable[[], NextBody | None] = lambda: None,
                 stopping: Callable[[], bool] = lambda: False,
                 unchained: Callable[[], None] = lambda: None,
                 hand_back: Callable[[ClaimedJob, str], None] = lambda job, why: None) -> None:
        self.job, self.settings, self.client, self.answers = job, settings, client, answers
        self.must_stop, self.refused, self.log, self.clock = must_stop, refused, log, clock
        self.hurry = hurry  # a second signal: a stopped command gets no 5 s after SIGTERM
        # The one-request loop: ``chain`` gives the ``next`` of this job's answer (None: the
        # runner wants no job for this slot now); ``stopping``: a stop came (SIGTERM).
        self.chain, self.stopping, self.unchained = chain, stopping, unchained
        self.hand_back_job = hand_back  # a job a request answered after a stop
        self.lease = settings.lease or job.lease_seconds
        self.lost = threading.Event()
        self.cancelled = False  # the 409 that ended it said "cancelled"
        self.done = threading.Event()
        self.progress: progress.ProgressFile | None = None
        self.parents_path: str | None = None  # QUEUELOG_JOB_PARENTS_FILE, when it has parents
        self.started = clock.monotonic()
        self.sent_at: float | None = None  # when an answer with ``next`` was sent
        self.logged = False  # its line written already (an answer out waiting for a job)

    def run(self, release: Callable[[], None]) -> ClaimedJob | None:
        """The whole life of the job in this runner; ``release`` once its slot is free.

        Returns the next job, claimed for the same slot with this job's answer (``next``):
        its slot is still taken, and ``release`` was not called.
        """
        try:
            proc = self.start()
        except OSError as exc:  # the command gone or unexecutable since the start; a full disk
            self._remove_progress()
            release()
            self._fail("failed", f"cannot run {self.settings.command[0]}: {exc}")
            return None
        try:
            threading.Thread(target=self.heartbeats, args=(proc.kill,), daemon=True).start()
            ended = self._watch(proc)
            code = proc.finish()
        finally:
            self.done.set()
            self._remove_progress()
        body = None if self.lost.is_set() else self.chain()
        if body is None:
            release()  # the next job may start while this one's answer is sent
        nxt = self._report(ended, code, proc, body)
        if body is not None and nxt is None:
            release()
        return nxt

    def start(self) -> Any:
        """Start the job's work: its command, with its progress and parents files."""
        self.progress = progress.ProgressFile(self.job.id, log=self.log)
        self.parents_path = self._write_parents(self.progress)
        return JobProcess(self.settings.command, self.job.payload, self.child_env(),
                          error_bytes=self.settings.error_bytes)

    def _write_parents(self, folder: progress.ProgressFile) -> str | None:
        """The claimed job's ``parents`` as a JSON file in its folder; None without parents."""
        parents = self.job.raw.get("parents")
        if not parents:
            return None
        return folder.write("parents.json", parents)

    def _remove_progress(self) -> None:
        if self.progress is not None:
            self.progress.remove()

    def hand_back(self, why: str) -> None:
        """Give the job back unrun: failed with retry, due again at once (``retry_in`` 0)."""
        self._fail("returned", why, retry_in=0)

    def child_env(self) -> dict[str, str]:
        """The command's environment: the runner's, less its token, plus the job's fields."""
        j = self.job
        # A job's files are its own: a path the runner inherited (it was started by a job of
        # another runner, say) must not reach a job without parents as if it were its own.
        inherited = {k: v for k, v in self.settings.env.items()
                     if k not in (progress.ENV, progress.PARENTS_ENV)}
        env = {**inherited, "QUEUELOG_JOB_ID": str(j.id),
               "QUEUELOG_JOB_TYPE": j.type, "QUEUELOG_JOB_ATTEMPT": str(j.attempt),
               "QUEUELOG_JOB_PRIORITY": "" if j.priority is None else str(j.priority)}
        if self.progress is not None:
            env[progress.ENV] = self.progress.path
        if self.parents_path is not None:
            env[progress.PARENTS_ENV] = self.parents_path
        # The producer's trace, handed on; never the runner's own, which no job belongs to.
        env.pop("TRACEPARENT", None)
        env.pop("TRACESTATE", None)
        for name, value in carried(j.raw).items():
            env[name.upper()] = value
        return env

    def _report(self, ended: str, code: int, proc: Any,
                nxt: NextBody | None = None) -> ClaimedJob | None:
        """Answer as the command ended; the next job, when ``nxt`` claimed one."""
        if self.lost.is_set():
            # Cancelled, or the lease went to someone else: the answer is not ours to give.
            self._log("cancelled" if self.cancelled else "lost")
            return None
        if ended == "timeout":
            return self._fail("timed-out", f"timed out after {self.settings.timeout:g} s",
                              nxt=nxt)
        if ended == "stopped":
            return self._fail("stopped", self.stopped_error(proc), retry_in=0)
        return self.exited(code, proc, nxt)

    def stopped_error(self, proc: Any) -> str:
        """The error of work stopped at the end of the grace period."""
        return _with_stderr("stopped: the worker shut down and the grace period ended", proc,
                            self.settings.error_bytes)

    def exited(self, code: int, proc: Any, nxt: NextBody | None) -> ClaimedJob | None:
        """Answer as the work ended by itself: exit 0 completes, anything else fails."""
        if code == 0:
            stdout = {"stdout": proc.stdout.last(STDOUT_TAIL)}
            return self._complete(parse_result(proc.stdout), stdout, nxt)
        return self._fail("failed", _with_stderr(describe_exit(code), proc,
                                                self.settings.error_bytes), nxt=nxt)

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
        """Heartbeat every ``beat_interval``, and soon after the progress file changes.

        A 409 means the job is no longer this attempt's (its lease was lost, or it was
        cancelled): kill the command and say nothing to the server.
        """
        interval = beat_interval(self.lease)
        look = min(progress.LOOK_SECONDS, interval) if self.progress else interval
        since, pending = 0.0, None  # seconds since the last beat (counted in looks)
        while not self.done.wait(look):
            since += look
            if self.progress is not None:
                changed = self.progress.changed()
                pending = changed if changed is not None else pending
            if since < interval - 1e-6 and (pending is None or since < PROGRESS_GAP_SECONDS):
                continue
            since = 0.0
            beat = self._beat(kill, pending)
            if beat is None:
                return
            if beat:
                pending = None

    def _beat(self, kill: Callable[[], None], progress: dict[str, Any] | None) -> bool | None:
        """One heartbeat: True if it landed, False if not, None when the job is over."""
        extra = {} if progress is None else {"progress": progress}
        try:
            answer = self.client.heartbeat(self.job, lease_seconds=self.settings.lease,
                                           **extra)
            self.job = self.job.renewed(answer)
            return True
        except ProblemError as exc:
            if self.done.is_set():
                return None
            if exc.status in (401, 403):
                self.refused(exc)
                return None
            if exc.status in (404, 409):
                self.cancelled = exc.cancelled
                self.lost.set()
                kill()
                return None
            if exc.status == 422 and progress is not None:
                # The server refused the progress (not the lease): beat again without it.
                self.log(f"job={self.job.id} progress refused ({exc.detail}); the job goes on")
                again = self._beat(kill, None)
                return None if again is None else True  # that progress is dropped either way
            self._beat_failed(f"{exc.status} {exc.detail}")
        except Exception as exc:  # unreachable, or an answer that is not the server's
            if self.done.is_set():
                return None
            self._beat_failed(f"{type(exc).__name__}: {exc}")
        return False

    def _beat_failed(self, why: str) -> None:
        # Tried again on schedule; the lease may still run out, and the log says why.
        self.log(f"job={self.job.id} heartbeat failed, retrying: {why}")

    def _complete(self, result: dict[str, Any] | None, as_text: dict[str, Any],
                  nxt: NextBody | None = None) -> ClaimedJob | None:
        """Complete with ``result``; ``as_text`` is the result if the server refuses its JSON."""
        item = {} if result is None else {"result": result}
        try:
            return self._answer("completed", "complete", item, refusals=(400, 422), nxt=nxt)
        except ProblemError as exc:
            if exc.status == 400 and result is not None and result != as_text:
                # The server refused the JSON itself (nesting too deep): keep it as text.
                return self._complete(as_text, as_text, nxt)
            error = f"the server refused the result ({exc.status}): {exc.detail}"
            return self._fail("failed", error, retry=False, nxt=nxt)

    def _fail(self, outcome: str, error: str, *, retry: bool = True,
              retry_in: float | None = None, nxt: NextBody | None = None) -> ClaimedJob | None:
        item: dict[str, Any] = {"error": error, "retry": retry}
        if retry_in is not None:
            item["retry_in"] = retry_in
        return self._answer(outcome, "fail", item, nxt=nxt)

    def _answer(self, outcome: str, verb: str, item: dict[str, Any],
                refusals: tuple[int, ...] = (), nxt: NextBody | None = None
                ) -> ClaimedJob | None:
        """Send the answer (with ``nxt``: and claim); raises a refusal listed in ``refusals``."""
        claimed = None
        try:
            if nxt is None:
                self.answers.send(verb, self.job, item)
            else:
                claimed = self._chained(verb, item, nxt, outcome)
        except ProblemError as exc:
            if exc.status in refusals:
                raise
            if exc.status in (401, 403):
                self.refused(exc)
            # 409: the job was cancelled, or the lease ran out and the job went back (or to
            # someone else) meanwhile.
            self._log("cancelled" if exc.cancelled else "lost" if exc.status in (404, 409)
                      else f"unreported ({exc.status} {exc.detail})")
            return None
        except ClientError as exc:
            self._log(f"unreported ({type(exc).__name__}: {exc})")
            return None
        if not self.logged:
            self._log(outcome)
        return claimed

    def _chained(self, verb: str, item: dict[str, Any], nxt: NextBody,
                 outcome: str) -> ClaimedJob | None:
        """The answer with ``next``: one request; a server without ``next`` gets it alone.

        Its answer comes when the next job does (or the wait ends): the job's line is
        written when it comes, or once it has been out a moment (``Chained``), its seconds
        counted to the answer's sending, not to its return.
        """
        self.sent_at = self.clock.monotonic()
        chained = Chained(self.client, verb, self.job, item, nxt, hand_back=self.hand_back_job,
                          log=self.log)
        try:
            # Still out after a moment: the finish landed and the request waits for a next
            # job; the line is written now (a refusal that comes later writes its own).
            return chained.send(self.stopping, waiting=lambda: self._log_once(outcome))
        except ProblemError as exc:
            if exc.status != 422 or "next" not in str(exc.errors):
                raise
        self.unchained()  # an older server refused the field: answers go alone from now on
        self.answers.send(verb, self.job, item)
        return None

    def _log_once(self, outcome: str) -> None:
        """The job's line, written early (an answer waiting for a next job)."""
        self._log(outcome)
        self.logged = True

    def _log(self, outcome: str) -> None:
        j, end = self.job, self.sent_at or self.clock.monotonic()
        self.log(f"job={j.id} type={j.type} attempt={j.attempt} "
                 f"outcome={outcome} seconds={end - self.started:.3f}")


def _with_stderr(head: str, proc: JobProcess, size: int) -> str:
    """The error text, ``size`` bytes at most: what happened, then as much of the end of
    stderr as fits (the server keeps the first MAX_ERROR_BYTES of what it is sent)."""
    room = size - len(head.encode("utf-8")) - 1
    tail = proc.stderr.last(room)
    return f"{head}\n{tail}" if tail else head


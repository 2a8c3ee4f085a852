"""The runner's answers (complete, fail) gathered into batch requests.

With many short jobs, one request per answer (one transaction, one fsync on SQLite) would be
the runner's bottleneck. Job threads hand their answer here and wait; one sender thread
takes whatever answers are waiting and sends them as one ``POST /jobs/complete`` or
``POST /jobs/fail``. Under light load that is one answer per request and no added latency.
A batch that did not land is retried, each answer until its lease would have run out, with
the same history check as the client's single calls. The sender never dies: whatever a
batch raises or the server answers, every answer in it is settled (landed, or an error).
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from queuelog.client import Client, ClientError, ProblemError, Unreachable, backoff
from queuelog.model.claimed import ClaimedJob
from queuelog.worker.clock import SYSTEM, Clock

MAX_ITEMS = 100  # per request; the server's MAX_BATCH is 500 by default
OUTCOME = {"complete": "completed", "fail": "failed"}


@dataclass
class Answer:
    """One job's answer, waiting to land."""

    verb: str                      # "complete" or "fail"
    job: ClaimedJob
    item: dict[str, Any]           # the batch item: id, attempt, result / error, retry...
    deadline: float = 0.0          # epoch seconds: the job's lease end
    tries: int = 0
    error: ClientError | None = None
    single: bool = False           # send it alone (the batch as a whole was refused)
    done: threading.Event = field(default_factory=threading.Event)


class Answers:
    """Sends answers in batches from one thread; ``send`` blocks until its answer is settled."""

    def __init__(self, client: Client, *, log: Callable[[str], None],
                 clock: Clock = SYSTEM) -> None:
        self.client, self.log, self.clock = client, log, clock
        self._queue: queue.Queue[Answer] = queue.Queue()
        self._batches = True  # False against a server without the batch routes
        threading.Thread(target=self._run, name="queuelog-answers", daemon=True).start()

    def send(self, verb: str, job: ClaimedJob, item: dict[str, Any]) -> None:
        """Complete or fail ``job``; raises the ``ClientError`` that kept it from landing."""
        answer = Answer(verb, job, {"id": job.id, "attempt": job.attempt, **item},
                        deadline=job.deadline(self.clock.time()))
        self._queue.put(answer)
        answer.done.wait()
        if answer.single:  # alone, through the single route: its own 4xx is its own
            self._send_single(answer)
        if answer.error is not None:
            raise answer.error

    def _send_single(self, answer: Answer) -> None:
        answer.error = None
        try:
            if answer.verb == "complete":
                self.client.complete(answer.job, answer.item.get("result"))
            else:
                self.client.fail(answer.job, answer.item["error"],
                                 retry=answer.item.get("retry", True),
                                 retry_in=answer.item.get("retry_in"))
        except ClientError as exc:
            answer.error = exc
        except Exception as exc:  # e.g. a body httpx cannot encode: the answer cannot be sent
            answer.error = ClientError(f"cannot send the answer: {type(exc).__name__}: {exc}")

    def _run(self) -> None:
        while True:
            waiting = [self._queue.get()]
            while len(waiting) < MAX_ITEMS:
                try:
                    waiting.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            for verb in OUTCOME:
                group = [a for a in waiting if a.verb == verb]
                if group:
                    self._send_safely(verb, group)

    def _send_safely(self, verb: str, group: list[Answer]) -> None:
        """``_send``, and whatever it raises settles the group: each answer then goes alone."""
        try:
            self._send(verb, group)
        except Exception as exc:  # an answer httpx cannot encode, a body that is no JSON...
            self.log(f"a batch of {len(group)} answer(s) to {verb} failed "
                     f"({type(exc).__name__}: {exc}); sending each alone")
            self._settle([a for a in group if not a.done.is_set()], single=True)

    def _send(self, verb: str, group: list[Answer]) -> None:
        send = self.client.complete_many if verb == "complete" else self.client.fail_many
        while group:
            if not self._batches:
                return self._settle(group, single=True)
            try:
                results = send([a.item for a in group])
            except ProblemError as exc:
                if exc.status in (404, 405):   # an older server: every answer alone from now on
                    self._batches = False
                if not exc.transient:          # one item spoiled the batch: each goes alone
                    return self._settle(group, single=True)
                group = self._survivors(group, exc)
                continue
            except Unreachable as exc:
                group = self._survivors(group, exc)
                continue
            return self._settle_results(verb, group, results)
        return None

    def _settle_results(self, verb: str, group: list[Answer], results: Any) -> None:
        """Match the server's ``results`` to the answers; a malformed answer is an error."""
        if not isinstance(results, list) or len(results) != len(group) \
                or not all(isinstance(r, dict) for r in results):
            raise ClientError(f"the server's answer to {verb} lists no result per job")
        for answer, result in zip(group, results):
            if result.get("status") != 200:
                problem = _problem_of(result)
                # Refused now, but an earlier try whose answer was lost may have landed.
                landed = (problem.status == 409 and answer.tries > 0
                          and self.client.landed(answer.job, OUTCOME[verb]) is not None)
                answer.error = None if landed else problem
            answer.done.set()

    def _survivors(self, group: list[Answer], exc: ClientError) -> list[Answer]:
        """After a failed try: the answers worth another (after a pause); the rest get ``exc``."""
        now = self.clock.time()
        alive = []
        for answer in group:
            answer.tries += 1
            if now >= answer.deadline or self.client.closed:
                answer.error = exc  # its lease is over: the job is someone else's now
                answer.done.set()
            else:
                alive.append(answer)
        if alive:
            first = min(a.deadline for a in alive)
            self.clock.sleep(min(backoff(min(a.tries for a in alive) - 1),
                                 max(0.05, first - now)))
        return alive

    @staticmethod
    def _settle(group: list[Answer], *, single: bool) -> None:
        for answer in group:
            answer.single = single
            answer.done.set()


def _problem_of(result: dict[str, Any]) -> ProblemError:
    """One refused item of a batch answer as the single route's error."""
    try:
        status = int(result.get("status") or 0)
    except (TypeError, ValueError):
        status = 0
    return ProblemError(status, str(result.get("type")), str(result.get("detail", "")))

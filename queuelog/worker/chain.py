"""A job's answer that also claims the slot's next job (``next``): one request per job.

The request may wait on the server for a job (``next.wait``, up to 30 s), and a runner told
to stop must not wait that out. So the request runs in a thread of its own, and the job's
thread waits for it or for the stop. On a stop it asks the job's history whether the finish
landed (the server commits it before it waits for a next job) and sends it again alone if not;
the abandoned request dies with the runner, and a job it still brings back is handed back
unrun, as the poller does with a claim answered after a stop.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

from queuelog.client import Client, ClientError, ProblemError
from queuelog.model.claimed import ClaimedJob, MalformedJob

OUTCOME = {"complete": "completed", "fail": "failed"}
LOOK_SECONDS = 0.1  # how often the waiting job thread looks for a stop
# A finish whose answer has not come back by then is waiting on the server for a next job:
# the finish itself has (almost surely) landed, so its line is written then, not 30 s later.
PROMPT_SECONDS = 0.5


class Chained:
    """One answer with ``next``, sent from a thread of its own."""

    def __init__(self, client: Client, verb: str, job: ClaimedJob, item: dict[str, Any],
                 next_body: dict[str, Any], *, hand_back: Callable[[ClaimedJob, str], None],
                 log: Callable[[str], None]) -> None:
        self.client, self.verb, self.job, self.item = client, verb, job, item
        self.next_body, self.hand_back, self.log = next_body, hand_back, log
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._abandoned = False
        self._answer: Any = None
        self._error: BaseException | None = None

    def send(self, stopping: Callable[[], bool],
             waiting: Callable[[], None] = lambda: None) -> ClaimedJob | None:
        """Answer the job; the next job claimed for its slot, or None. ``waiting`` is
        called once if the answer is still out after PROMPT_SECONDS (it waits for a job).

        Raises what kept the answer from landing (a ``ClientError``), as a plain answer would.
        """
        threading.Thread(target=self._run, name=f"queuelog-next-{self.job.id}",
                         daemon=True).start()
        if not self._done.wait(PROMPT_SECONDS):
            waiting()
        while not self._done.wait(LOOK_SECONDS):
            if stopping() and self._abandon():
                self._settle_alone()
                return None
        if self._error is not None:
            raise self._error
        return self._next_of(self._answer)

    def _run(self) -> None:
        try:
            self._answer = self._call(self.next_body)
        except ClientError as exc:  # raised in the job's thread
            self._error = exc
        except Exception as exc:  # e.g. a body httpx cannot encode: the answer cannot be sent
            self._error = ClientError(f"cannot send the answer: {type(exc).__name__}: {exc}")
        with self._lock:
            self._done.set()
            abandoned = self._abandoned
        if abandoned and self._error is None:
            try:
                nxt = self._next_of(self._answer)
                if nxt is not None:
                    self.hand_back(nxt, "the worker was shutting down when it claimed this job")
            except Exception as exc:  # a bug here must not end the thread unsaid
                self.log(f"job={self.job.id} internal error: {type(exc).__name__}: {exc}")

    def _call(self, next_body: dict[str, Any] | None) -> Any:
        item = self.item
        if self.verb == "complete":
            return self.client.complete(self.job, item.get("result"), next=next_body)
        return self.client.fail(self.job, item["error"], retry=item.get("retry", True),
                                retry_in=item.get("retry_in"), next=next_body)

    def _abandon(self) -> bool:
        """Leave the request to itself; False if it has just answered."""
        with self._lock:
            if self._done.is_set():
                return False
            self._abandoned = True
            return True

    def _settle_alone(self) -> None:
        """After a stop: make sure the finish landed, sending it again without ``next``."""
        outcome = OUTCOME[self.verb]
        if self.client.landed(self.job, outcome) is not None:
            return
        try:
            self._call(None)
        except ProblemError as exc:
            # The abandoned request may have landed in between: its finish, not a loss.
            if exc.status != 409 or self.client.landed(self.job, outcome) is None:
                raise

    def _next_of(self, answer: Any) -> ClaimedJob | None:
        """The claimed job of an answer with ``next`` (None: none was due; malformed: said)."""
        nxt = answer.get("next") if isinstance(answer, dict) else None
        if nxt is None:
            return None
        try:
            return ClaimedJob.from_json(nxt)
        except MalformedJob:
            self.log(f"the server's next job after job={self.job.id} is malformed "
                     f"({str(nxt)[:200]}); claiming again")
            return None

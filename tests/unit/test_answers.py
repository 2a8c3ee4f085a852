"""queuelog.answers: the runner's answers in batches, against a scripted stand-in client."""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest

from queuelog.worker.answers import Answers
from queuelog.worker.clock import Clock
from queuelog.client import ClientError, ProblemError, Unreachable
from queuelog.model.claimed import ClaimedJob


def lease_in(seconds: float) -> str:
    """A ``lease_expires_at`` that many seconds from now."""
    moment = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def job(job_id: int, lease: float = 30) -> ClaimedJob:
    """A claimed job as the runner holds it."""
    return ClaimedJob.from_json({"id": job_id, "type": "email", "attempt": 1,
                                 "lease_expires_at": lease_in(lease)})


class FakeClient:
    """Answers batch calls with a script: a function of the items, or an exception."""

    def __init__(self, script: Callable[[str, list[dict[str, Any]]], Any]) -> None:
        self.script = script
        self.batches: list[tuple[str, list[int]]] = []
        self.singles: list[tuple[str, int]] = []
        self.outcomes: dict[int, str] = {}
        self.closed = False
        self.gate = threading.Event()
        self.gate.set()

    def _batch(self, verb: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.gate.wait(5)
        self.batches.append((verb, [i["id"] for i in items]))
        got = self.script(verb, items)
        if isinstance(got, Exception):
            raise got
        return got  # type: ignore[no-any-return]

    def complete_many(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self._batch("complete", items)

    def fail_many(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self._batch("fail", items)

    def complete(self, job: ClaimedJob, result: Any = None) -> dict[str, Any]:
        self.singles.append(("complete", job.id))
        if result and "huge" in result:
            raise ProblemError(422, "urn:x:validation-error", "result: too large")
        return dict(job.raw)

    def fail(self, job: ClaimedJob, error: str, retry: bool = True,
             retry_in: Any = None) -> dict[str, Any]:
        self.singles.append(("fail", job.id))
        return dict(job.raw)

    def landed(self, job: ClaimedJob, outcome: str) -> dict[str, Any] | None:
        return dict(job.raw) if self.outcomes.get(job.id) == outcome else None


def ok(verb: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every item lands."""
    status = "completed" if verb == "complete" else "pending"
    return [{"id": i["id"], "status": 200, "job_status": status} for i in items]


class FastClock(Clock):
    """Wall-clock time that a pause moves on at once: retries take no real time."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def time(self) -> float:
        return time.time() + self.ahead

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> None:
        self.ahead += max(0.0, seconds)


def answers_for(client: FakeClient, log: Callable[[str], None] = print,
                clock: Clock | None = None) -> Answers:
    """Answers on the fake client, pausing on a ``FastClock``."""
    return Answers(client, log=log, clock=clock or FastClock())  # type: ignore[arg-type]


SETTLE_SECONDS = 5.0  # every answer here settles well within this, or the test fails


def send_all(answers: Answers, calls: list[tuple[str, ClaimedJob, dict[str, Any]]]
             ) -> list[Exception | None]:
    """Send answers from one thread each, as job threads do; what each raised.

    Bounded: an answer still unsettled after ``SETTLE_SECONDS`` fails the test (its daemon
    thread cannot keep the run from ending).
    """
    out: list[Exception | None] = [None] * len(calls)

    def one(i: int) -> None:
        try:
            answers.send(*calls[i])
        except Exception as exc:  # collected for the test to look at
            out[i] = exc
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(calls))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + SETTLE_SECONDS
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [calls[i][1].id for i, t in enumerate(threads) if t.is_alive()]
    assert not stuck, f"answers for jobs {stuck} not settled within {SETTLE_SECONDS:g} s"
    return out


def test_answers_that_wait_together_go_in_one_request():
    client = FakeClient(ok)
    client.gate.clear()  # the first request hangs until the others have queued
    answers = answers_for(client)
    calls = [("complete", job(n), {"result": {"n": n}}) for n in range(1, 7)]
    calls.append(("fail", job(7), {"error": "boom", "retry": True}))
    threading.Timer(0.3, client.gate.set).start()
    assert send_all(answers, calls) == [None] * 7
    sent = sorted(i for verb, ids in client.batches for i in ids)
    assert sent == [1, 2, 3, 4, 5, 6, 7] and len(client.batches) <= 3
    assert ("fail", [7]) in client.batches


def test_a_batch_that_did_not_land_is_retried_and_a_lost_answer_is_found():
    tries: list[int] = []

    def script(verb: str, items: list[dict[str, Any]]) -> Any:
        tries.append(len(items))
        if len(tries) == 1:  # committed, but the reply was lost
            client.outcomes.update({i["id"]: "completed" for i in items})
            return ProblemError(503, "urn:x:unavailable", "database unavailable")
        return [{"id": i["id"], "status": 409, "type": "urn:x:wrong-state", "detail": "done"}
                for i in items]

    client = FakeClient(script)
    assert send_all(answers_for(client), [("complete", job(1), {})]) == [None]
    assert tries == [1, 1]


def test_a_409_for_an_answer_that_never_landed_is_raised():
    def script(verb: str, items: list[dict[str, Any]]) -> Any:
        return [{"id": i["id"], "status": 409, "type": "urn:x:not-holder", "detail": "gone"}
                for i in items]

    client = FakeClient(script)
    client.outcomes[1] = "lease_expired"
    (error,) = send_all(answers_for(client), [("complete", job(1), {})])
    assert isinstance(error, ProblemError) and error.status == 409


def test_retries_end_with_the_lease():
    client, clock = FakeClient(lambda verb, items: Unreachable("connection refused")), FastClock()
    (error,) = send_all(answers_for(client, clock=clock),
                        [("fail", job(1, lease=30), {"error": "x", "retry": True})])
    assert isinstance(error, Unreachable)
    assert len(client.batches) > 2  # retried, with backoff, for the whole lease...
    assert 29 <= clock.ahead < 45   # ...and not beyond it (less the real time spent)


def test_without_batch_routes_or_when_a_batch_is_refused_each_answer_goes_alone():
    old_server = FakeClient(lambda verb, items: ProblemError(404, "urn:x:not-found", "no"))
    answers = answers_for(old_server)
    assert send_all(answers, [("complete", job(1), {})]) == [None]
    assert send_all(answers, [("fail", job(2), {"error": "e", "retry": True})]) == [None]
    assert len(old_server.batches) == 1  # asked once, then single calls only
    assert old_server.singles == [("complete", 1), ("fail", 2)]

    spoiled = FakeClient(lambda verb, items: ProblemError(422, "urn:x:validation-error", "x"))
    client_answers = answers_for(spoiled)
    spoiled.gate.clear()
    threading.Timer(0.3, spoiled.gate.set).start()
    errors = send_all(client_answers, [("complete", job(1), {"result": {"huge": 1}}),
                                       ("complete", job(2), {"result": {"n": 2}})])
    assert isinstance(errors[0], ProblemError) and errors[0].status == 422
    assert errors[1] is None
    assert sorted(spoiled.singles) == [("complete", 1), ("complete", 2)]


@pytest.mark.parametrize("spoil", [
    ValueError("Out of range float values are not JSON compliant"),  # httpx and 1e400
    UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
    ClientError("the answer to POST /jobs/complete is not JSON"),     # a proxy's HTML page
    TypeError("'NoneType' object is not iterable"),                  # {"results": null}
    [],                                                              # too few results
], ids=["1e400", "surrogate", "html", "results-null", "results-short"])
def test_the_sender_survives_any_error_and_every_answer_is_settled(spoil):
    """Bug: anything but ProblemError/Unreachable killed the sender; no answer landed again."""
    calls: list[int] = []

    def script(verb: str, items: list[dict[str, Any]]) -> Any:
        calls.append(len(items))
        return spoil if len(calls) == 1 else ok(verb, items)

    client = FakeClient(script)
    lines: list[str] = []
    answers = answers_for(client, lines.append)
    assert send_all(answers, [("complete", job(1), {"result": {"n": 1}})]) == [None]
    assert client.singles == [("complete", 1)]  # the spoiled batch's answer went alone
    assert len(lines) == 1 and "sending each alone" in lines[0]
    # The sender is alive: the next answer lands through the batch route.
    assert send_all(answers, [("fail", job(2), {"error": "e", "retry": True})]) == [None]
    assert client.batches[-1] == ("fail", [2])

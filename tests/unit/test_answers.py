"""queuelog.answers: the runner's answers in batches, against a scripted stand-in client."""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest

from queuelog.worker import answers as answers_module
from queuelog.worker.answers import Answers
from queuelog.client import ClientError, ProblemError, Unreachable


def lease_in(seconds: float) -> str:
    """A ``lease_expires_at`` that many seconds from now."""
    moment = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def job(job_id: int, lease: float = 30) -> dict[str, Any]:
    """A claimed job as the runner holds it."""
    return {"id": job_id, "attempt": 1, "lease_expires_at": lease_in(lease)}


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

    def complete(self, job: dict[str, Any], result: Any = None) -> dict[str, Any]:
        self.singles.append(("complete", job["id"]))
        if result and "huge" in result:
            raise ProblemError(422, "urn:x:validation-error", "result: too large")
        return job

    def fail(self, job: dict[str, Any], error: str, retry: bool = True,
             retry_in: Any = None) -> dict[str, Any]:
        self.singles.append(("fail", job["id"]))
        return job

    def landed(self, job: dict[str, Any], outcome: str) -> dict[str, Any] | None:
        return job if self.outcomes.get(job["id"]) == outcome else None


def ok(verb: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every item lands."""
    status = "completed" if verb == "complete" else "pending"
    return [{"id": i["id"], "status": 200, "job_status": status} for i in items]


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries a few milliseconds apart."""
    monkeypatch.setattr(answers_module, "backoff", lambda tries: 0.01)


def send_all(answers: Answers, calls: list[tuple[str, dict[str, Any], dict[str, Any]]]
             ) -> list[Exception | None]:
    """Send answers from one thread each, as job threads do; what each raised."""
    out: list[Exception | None] = [None] * len(calls)

    def one(i: int) -> None:
        try:
            answers.send(*calls[i])
        except Exception as exc:  # collected for the test to look at
            out[i] = exc
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return out


def test_answers_that_wait_together_go_in_one_request():
    client = FakeClient(ok)
    client.gate.clear()  # the first request hangs until the others have queued
    answers = Answers(client, log=print)  # type: ignore[arg-type]
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
    assert send_all(Answers(client, log=print), [("complete", job(1), {})]) == [None]  # type: ignore
    assert tries == [1, 1]


def test_a_409_for_an_answer_that_never_landed_is_raised():
    def script(verb: str, items: list[dict[str, Any]]) -> Any:
        return [{"id": i["id"], "status": 409, "type": "urn:x:not-holder", "detail": "gone"}
                for i in items]

    client = FakeClient(script)
    client.outcomes[1] = "lease_expired"
    (error,) = send_all(Answers(client, log=print), [("complete", job(1), {})])  # type: ignore[arg-type]
    assert isinstance(error, ProblemError) and error.status == 409


def test_retries_end_with_the_lease():
    client = FakeClient(lambda verb, items: Unreachable("connection refused"))
    began = time.monotonic()
    (error,) = send_all(Answers(client, log=print), [("fail", job(1, lease=0.3),  # type: ignore[arg-type]
                                           {"error": "x", "retry": True})])
    assert isinstance(error, Unreachable) and time.monotonic() - began < 3
    assert len(client.batches) > 2


def test_without_batch_routes_or_when_a_batch_is_refused_each_answer_goes_alone():
    old_server = FakeClient(lambda verb, items: ProblemError(404, "urn:x:not-found", "no"))
    answers = Answers(old_server, log=print)  # type: ignore[arg-type]
    assert send_all(answers, [("complete", job(1), {})]) == [None]
    assert send_all(answers, [("fail", job(2), {"error": "e", "retry": True})]) == [None]
    assert len(old_server.batches) == 1  # asked once, then single calls only
    assert old_server.singles == [("complete", 1), ("fail", 2)]

    spoiled = FakeClient(lambda verb, items: ProblemError(422, "urn:x:validation-error", "x"))
    client_answers = Answers(spoiled, log=print)  # type: ignore[arg-type]
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
    answers = Answers(client, log=lines.append)  # type: ignore[arg-type]
    assert send_all(answers, [("complete", job(1), {"result": {"n": 1}})]) == [None]
    assert client.singles == [("complete", 1)]  # the spoiled batch's answer went alone
    assert len(lines) == 1 and "sending each alone" in lines[0]
    # The sender is alive: the next answer lands through the batch route.
    assert send_all(answers, [("fail", job(2), {"error": "e", "retry": True})]) == [None]
    assert client.batches[-1] == ("fail", [2])

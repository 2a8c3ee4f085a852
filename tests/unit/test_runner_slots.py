"""The runner without processes or a server: slot accounting, claims, heartbeats, results."""
from __future__ import annotations

import io
import threading
from typing import Any

from queuelog.client import ProblemError, Unreachable
from queuelog.worker.clock import Clock
from queuelog.worker.job import JobRun, Settings
from queuelog.worker.process import Capture, parse_result
from queuelog.worker.runner import Runner
from queuelog.worker.slots import Slots


class FrozenClock(Clock):
    """Time moves only when a test (or a pause) moves it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> None:
        self.slept.append(seconds)
        self.now += seconds


class RacingSlots(Slots):
    """Its first gather is where the other poller reserves the last free slot meanwhile."""

    gathers = 0

    def _gather(self) -> None:
        self.gathers += 1
        if self.gathers == 1:
            self.reserved += self.free()  # the other poller's claim, while this one waited


def test_a_poller_that_loses_the_last_slot_while_gathering_waits_instead_of_claiming():
    """Bug 2: the loser claimed with 0 free, which fell through to a one-job claim (N+1)."""
    stop = threading.Event()
    slots = RacingSlots(3, stopped=stop.is_set, clock=FrozenClock())
    slots.settle(0, 2)  # two commands run, one slot is free
    got: list[int] = []
    poller = threading.Thread(target=lambda: got.append(slots.reserve()))
    poller.start()
    poller.join(0.5)
    assert got == [] and poller.is_alive()  # nothing free: it waits, it does not claim
    slots.settle(1, 0)  # the other poller's claim came back empty: its slot is free again
    poller.join(5)
    assert got == [1] and slots.reserved == 1 and slots.active == 2


def test_reserve_takes_every_free_slot_and_settle_gives_back_what_was_not_claimed():
    slots = Slots(4, stopped=lambda: False, gather=False)
    assert slots.reserve() == 4 and slots.free() == 0
    slots.settle(4, 3)
    assert (slots.active, slots.reserved, slots.free()) == (3, 0, 1)
    slots.release()
    assert slots.reserve() == 2


class ClaimClient:
    """Answers claims with what a test gives it."""

    closed = False

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        got = self.answers.pop(0)
        if isinstance(got, Exception):
            raise got
        return got


def runner_for(client: Any, concurrency: int = 1) -> tuple[Runner, io.StringIO, FrozenClock]:
    """A runner on a fake client and a frozen clock, logging into a buffer."""
    log, clock = io.StringIO(), FrozenClock()
    return (Runner(client, ["true"], concurrency=concurrency, log=log, clock=clock),
            log, clock)


def test_a_malformed_claim_answer_is_one_line_and_the_runner_claims_again():
    """Bug 6: a job without an id (KeyError: 'id') left the runner idle forever."""
    runner, log, _ = runner_for(ClaimClient({"type": "email", "attempt": 1}, None))
    assert runner.poll_once(0) == 0
    assert "claim answer is malformed" in log.getvalue()
    assert (runner.slots.active, runner.slots.reserved, runner._jobs) == (0, 0, 0)
    assert runner.poll_once(0) == 0  # and it claims again
    assert log.getvalue().count("\n") == 1


def test_a_claim_error_of_any_kind_pauses_with_backoff_and_is_said_once():
    runner, log, clock = runner_for(ClaimClient(Unreachable("refused"), KeyError("jobs")))
    assert runner.poll_once(0) == 1
    assert runner.slots.free() == 1 and len(clock.slept) == 1
    assert 0.25 <= clock.slept[0] <= 0.5  # the first pause: backoff(0, first=0.5)
    assert log.getvalue().count("cannot claim") == 1


class BeatClient:
    """Heartbeats fail as scripted; the last one ends the job."""

    def __init__(self, run: JobRun | None = None) -> None:
        self.run = run
        self.errors: list[Exception] = [Unreachable("connection reset"),
                                        ProblemError(503, "urn:x:unavailable", "db down"),
                                        Unreachable("after the end: not worth a line")]

    def heartbeat(self, job: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        error = self.errors.pop(0)
        if not self.errors:
            assert self.run is not None
            self.run.done.set()
        raise error


def job_run(client: Any, answers: Any = None, lines: list[str] | None = None) -> JobRun:
    """A JobRun on fakes; its log lines go to ``lines``."""
    out = lines if lines is not None else []
    return JobRun({"id": 7, "type": "email", "attempt": 1}, settings=Settings(["true"], {},
                  lease=0.6), client=client, answers=answers, must_stop=lambda: False,
                  refused=lambda exc: None, log=out.append, clock=FrozenClock())


def test_each_failed_heartbeat_is_one_log_line():
    """Bug 5: a heartbeat that failed (unreachable, 5xx) was dropped without a word."""
    client, lines = BeatClient(), []
    run = job_run(client, lines=lines)
    client.run = run
    run.heartbeats(kill=lambda: None)
    assert len(lines) == 2
    assert "heartbeat failed, retrying: Unreachable: connection reset" in lines[0]
    assert "heartbeat failed, retrying: 503 db down" in lines[1]


class RefusingAnswers:
    """The server refuses the result's JSON (nesting too deep) with a 400."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, verb: str, job: dict[str, Any], item: dict[str, Any]) -> None:
        self.sent.append(item)
        if "stdout" not in item.get("result", {}):
            raise ProblemError(400, "urn:x:malformed", "JSON nests deeper than 64 levels.")


def test_a_result_the_server_refuses_as_json_completes_with_its_stdout():
    """A 400 for the result was neither handled nor reported: the job was never answered."""
    answers, lines = RefusingAnswers(), []
    run = job_run(None, answers, lines)
    run._complete({"a": {"b": 1}}, '{"a": {"b": 1}}')
    assert answers.sent == [{"result": {"a": {"b": 1}}},
                            {"result": {"stdout": '{"a": {"b": 1}}'}}]
    assert len(lines) == 1 and "outcome=completed" in lines[0]


def test_output_that_cannot_be_sent_as_json_is_kept_as_text():
    for text in ('{"x": 1e400}', '{"x": "\\ud800"}'):
        out = Capture(1 << 20, 4096)
        out.add(text.encode())
        assert parse_result(out) == {"stdout": text}, text

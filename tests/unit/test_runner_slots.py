"""The runner without processes or a server: slot accounting, claims, heartbeats, results."""
from __future__ import annotations

import io
import threading
import time
from typing import Any

from queuelog.client import ProblemError, Unreachable
from queuelog.model.claimed import ClaimedJob
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

    def heartbeat(self, job: ClaimedJob, **kwargs: Any) -> dict[str, Any]:
        error = self.errors.pop(0)
        if not self.errors:
            assert self.run is not None
            self.run.done.set()
        raise error


def job_run(client: Any, answers: Any = None, lines: list[str] | None = None) -> JobRun:
    """A JobRun on fakes; its log lines go to ``lines``."""
    out = lines if lines is not None else []
    return JobRun(ClaimedJob(7, "email", 1), settings=Settings(["true"], {},
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

    def send(self, verb: str, job: ClaimedJob, item: dict[str, Any]) -> None:
        self.sent.append(item)
        if "stdout" not in item.get("result", {}):
            raise ProblemError(400, "urn:x:malformed", "JSON nests deeper than 64 levels.")


def test_a_result_the_server_refuses_as_json_completes_with_its_stdout():
    """A 400 for the result was neither handled nor reported: the job was never answered."""
    answers, lines = RefusingAnswers(), []
    run = job_run(None, answers, lines)
    run._complete({"a": {"b": 1}}, {"stdout": '{"a": {"b": 1}}'})
    assert answers.sent == [{"result": {"a": {"b": 1}}},
                            {"result": {"stdout": '{"a": {"b": 1}}'}}]
    assert len(lines) == 1 and "outcome=completed" in lines[0]


def test_output_that_cannot_be_sent_as_json_is_kept_as_text():
    for text in ('{"x": 1e400}', '{"x": "\\ud800"}'):
        out = Capture(1 << 20, 4096)
        out.add(text.encode())
        assert parse_result(out) == {"stdout": text}, text


# -- after SIGTERM, and when a job's thread cannot start ------------------------------------

def claimed(job_id: int) -> dict[str, Any]:
    """A job as a claim answers it."""
    return {"id": job_id, "type": "email", "attempt": 1, "payload": {}}


class LongPollClient:
    """Claims answer as scripted (a callable is called with the claim's arguments); every
    answer lands and is kept."""

    closed = False

    def __init__(self, *script: Any) -> None:
        self.script = list(script)
        self.failed: list[dict[str, Any]] = []
        self.completed: list[dict[str, Any]] = []

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        got = self.script.pop(0) if self.script else None
        return got(**kwargs) if callable(got) else got

    def fail_many(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.failed.extend(items)
        return [{"id": i["id"], "status": 200, "job_status": "pending"} for i in items]

    def complete_many(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.completed.extend(items)
        return [{"id": i["id"], "status": 200, "job_status": "completed"} for i in items]

    def close(self) -> None:
        self.closed = True


class Spawns:
    """Makes the job threads: records them, and starts none (or, ``refuse``, fails to)."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.jobs: list[int] = []

    def __call__(self, *, target: Any, args: tuple[Any, ...], **kwargs: Any) -> Any:
        spawns = self

        class NotStarted:
            def start(self) -> None:
                if spawns.refuse:
                    raise RuntimeError("can't start new thread")
                spawns.jobs.append(args[0].id)
        return NotStarted()


def handed_back(client: LongPollClient) -> list[tuple[int, bool, float]]:
    """The jobs failed back: id, retry, retry_in."""
    return [(i["id"], i["retry"], i.get("retry_in")) for i in client.failed]


def stopping_runner(script: list[Any], *, concurrency: int = 1, spawn: Any = None,
                    ) -> tuple[Runner, LongPollClient, io.StringIO]:
    """A runner on a LongPollClient whose script may stop the runner mid-claim."""
    client = LongPollClient(*script)
    log = io.StringIO()
    runner = Runner(client, ["true"], concurrency=concurrency, log=log,  # type: ignore[arg-type]
                    clock=FrozenClock(), spawn=spawn or Spawns())
    return runner, client, log


def run_in_thread(runner: Runner) -> tuple[threading.Thread, list[int]]:
    """``runner.run()`` in a daemon thread; its exit status lands in the list."""
    status: list[int] = []
    thread = threading.Thread(target=lambda: status.append(runner.run()), daemon=True)
    thread.start()
    return thread, status


def test_a_job_claimed_after_sigterm_goes_back_unrun_idle_or_busy():
    """Issue 35: a long poll open at SIGTERM could still return a job, which then ran."""
    spawns = Spawns()
    runner, client, log = stopping_runner([], concurrency=2, spawn=spawns)
    # Busy: job 5 holds a slot when job 6 arrives, from a long poll sent before the stop.
    client.script = [lambda **kw: [claimed(5)],
                     lambda **kw: (runner.stop(), claimed(6))[1]]
    assert runner.poll_once(0) == 0 and spawns.jobs == [5]
    assert runner.poll_once(0) == 0
    assert spawns.jobs == [5]  # job 6 was not run...
    assert handed_back(client) == [(6, True, 0)]  # ...but given back at once
    assert "job=6 type=email attempt=1 outcome=returned" in log.getvalue()
    assert (runner.slots.active, runner.slots.reserved, runner._jobs) == (1, 0, 1)
    # Idle: nothing runs, and the claim's job goes back all the same.
    spawns = Spawns()
    runner, client, _ = stopping_runner([lambda **kw: (runner.stop(), claimed(7))[1]],
                                        spawn=spawns)
    assert runner.poll_once(0) == 0
    assert spawns.jobs == [] and handed_back(client) == [(7, True, 0)]
    assert (runner.slots.active, runner.slots.reserved, runner._jobs) == (0, 0, 0)


class GatedSpawns:
    """Job threads that run their job (a real command) only once ``go`` is set."""

    def __init__(self) -> None:
        self.go = threading.Event()

    def __call__(self, *, target: Any, args: tuple[Any, ...], **kwargs: Any) -> Any:
        def gated() -> None:
            if self.go.wait(10):
                target(*args)
        return threading.Thread(target=gated, **kwargs)


def test_an_open_long_poll_is_abandoned_at_sigterm_busy_or_idle():
    """Stopping waits for the jobs held, never for an open claim (up to 30 s)."""
    for concurrency, first in ((1, None), (2, [claimed(5)])):
        poll_open, poll_answer = threading.Event(), threading.Event()

        def long_poll(poll_open: threading.Event = poll_open,
                      poll_answer: threading.Event = poll_answer, **kw: Any) -> Any:
            poll_open.set()
            poll_answer.wait(10)
            return claimed(9)
        spawns = GatedSpawns()
        runner, client, _ = stopping_runner(
            [long_poll] if first is None else [lambda first=first, **kw: first, long_poll],
            concurrency=concurrency, spawn=spawns)
        thread, status = run_in_thread(runner)
        assert poll_open.wait(5), "no long poll was sent"
        runner.stop()
        spawns.go.set()  # busy: job 5's command runs now, and ends
        thread.join(5)
        assert not thread.is_alive() and status == [0], f"concurrency {concurrency}"
        assert client.closed and [i["id"] for i in client.completed] == [5] * (concurrency - 1)
        poll_answer.set()  # the abandoned poll's job, when it comes, goes back unrun
        deadline = time.monotonic() + 5
        while not client.failed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert handed_back(client) == [(9, True, 0)]


def test_a_job_whose_thread_cannot_start_frees_its_slot_and_goes_back():
    """Issue 35: the slot stayed taken, the log said "cannot claim", and stop() hung."""
    runner, client, log = stopping_runner([[claimed(3), claimed(4)]], concurrency=2,
                                          spawn=Spawns(refuse=True))
    assert runner.poll_once(0) == 0
    assert handed_back(client) == [(3, True, 0), (4, True, 0)]
    assert (runner.slots.active, runner.slots.reserved, runner._jobs) == (0, 0, 0)
    lines = log.getvalue()
    assert "cannot claim" not in lines
    assert "job=3 cannot start a thread to run it (RuntimeError: can't start new thread)" \
        in lines and "job=4 type=email attempt=1 outcome=returned" in lines
    runner.stop()
    thread, status = run_in_thread(runner)
    thread.join(5)
    assert not thread.is_alive() and status == [0]

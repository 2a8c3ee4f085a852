"""The runner's outcomes without a server: progress files, heartbeat pace, answers with next."""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from queuelog.client import ProblemError
from queuelog.model.claimed import ClaimedJob
from queuelog.worker import progress
from queuelog.worker.chain import Chained
from queuelog.worker.job import JobRun, Settings, beat_interval
from queuelog.worker.progress import ProgressFile


def write(path: str, text: str) -> None:
    """Replace the file's content, as ``echo ... > file`` does, and move its mtime on."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_a_progress_file_is_read_when_it_changes_and_removed_with_its_folder():
    lines: list[str] = []
    file = ProgressFile(7, log=lines.append)
    assert oct(os.stat(file.folder).st_mode & 0o777) == "0o700"
    assert file.changed() is None  # nothing written yet
    write(file.path, '{"percent": 40, "step": "resizing"}\n')
    assert file.changed() == {"percent": 40, "step": "resizing"}
    assert file.changed() is None  # unchanged: not sent again
    write(file.path, '{"percent": 80}')
    assert file.changed() == {"percent": 80}
    file.remove()
    assert not os.path.exists(file.folder) and lines == []


def test_bad_progress_is_skipped_with_one_line_and_a_write_under_way_quietly():
    lines: list[str] = []
    file = ProgressFile(7, log=lines.append)
    try:
        write(file.path, '{"percent": 4')  # half written: the next look sees it whole
        assert file.changed() is None and lines == []
        write(file.path, '{"percent": 45}')
        assert file.changed() == {"percent": 45}
        for bad in ("[1, 2]", "NaN", '{"x": "' + "a" * 1100 + '"}', "\xff"):
            write(file.path, bad)
            assert file.changed() is None and file.changed() is None, bad
        assert len(lines) == 1 and lines[0].startswith("job=7 progress skipped")
        write(file.path, '{"percent": 90}')  # and good progress still gets through
        assert file.changed() == {"percent": 90}
    finally:
        file.remove()


def test_heartbeats_come_every_third_of_the_lease_but_at_least_every_10_seconds():
    assert beat_interval(3) == 1.0
    assert beat_interval(30) == 10.0
    assert beat_interval(300) == 10.0  # the server's default lease: cancelled within 10 s
    assert beat_interval(0.3) == 0.2


class Beats:
    """Records heartbeats; stops the run once it has seen ``until`` of them."""

    def __init__(self, run: list[JobRun], until: int) -> None:
        self.run, self.until = run, until
        self.sent: list[tuple[float, Any]] = []

    def heartbeat(self, job: ClaimedJob, **kwargs: Any) -> dict[str, Any]:
        self.sent.append((time.monotonic(), kwargs.get("progress")))
        if len(self.sent) >= self.until:
            self.run[0].done.set()
        return {}


def test_changed_progress_goes_with_a_heartbeat_within_2_seconds():
    """A 60 s lease beats every 10 s; progress written goes out at once, not then."""
    runs: list[JobRun] = []
    client = Beats(runs, until=2)
    run = JobRun(ClaimedJob(7, "email", 1), settings=Settings(["true"], {}, lease=60),
                 client=client, answers=None,  # type: ignore[arg-type]
                 must_stop=lambda: False, refused=lambda exc: None, log=print)
    runs.append(run)
    run.progress = ProgressFile(7, log=print)
    assert run.child_env()[progress.ENV] == run.progress.path
    beating = threading.Thread(target=run.heartbeats, args=(lambda: None,), daemon=True)
    begun = time.monotonic()
    beating.start()
    try:
        write(run.progress.path, json.dumps({"percent": 10}))
        time.sleep(2.2)
        write(run.progress.path, json.dumps({"percent": 20}))
        beating.join(5)
    finally:
        run.done.set()
        run.progress.remove()
    assert [p for _, p in client.sent] == [{"percent": 10}, {"percent": 20}]
    assert client.sent[0][0] - begun < 2 and client.sent[1][0] - begun < 2.2 + 2


class CancelBeat:
    """The job was cancelled: a heartbeat gets the 409 that says so."""

    def heartbeat(self, job: ClaimedJob, **kwargs: Any) -> dict[str, Any]:
        raise ProblemError(409, "urn:queuelog:problem:cancelled", "The job was cancelled.")


def test_a_cancelled_job_kills_its_command_and_reports_nothing():
    killed: list[bool] = []
    lines: list[str] = []
    run = JobRun(ClaimedJob(7, "email", 1), settings=Settings(["true"], {}, lease=0.6),
                 client=CancelBeat(), answers=None,  # type: ignore[arg-type]
                 must_stop=lambda: False, refused=lambda exc: None, log=lines.append)
    run.heartbeats(kill=lambda: killed.append(True))
    assert killed == [True] and run.lost.is_set() and run.cancelled
    assert run._report("exited", 0, None) is None  # type: ignore[arg-type]
    assert len(lines) == 1 and "outcome=cancelled" in lines[0]


class SlowNext:
    """An answer with ``next`` that long-polls until the test lets it go."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.calls: list[Any] = []

    def complete(self, job: ClaimedJob, result: Any = None, next: Any = None) -> Any:
        self.calls.append(next)
        if next is None:  # sent again alone: not expected here, the first one landed
            return {"id": job.id}
        self.go.wait(10)
        return {"job": {"id": job.id}, "next": {"id": 8, "type": "email", "attempt": 1}}

    def landed(self, job: ClaimedJob, outcome: str) -> Any:
        return {"id": job.id} if outcome == "completed" else None


def test_a_stop_during_the_next_long_poll_settles_the_answer_and_hands_back_a_late_job():
    client, handed = SlowNext(), []
    stop = threading.Event()
    chained = Chained(client, "complete", ClaimedJob(7, "email", 1), {"result": None},  # type: ignore[arg-type]
                      {"wait": 30}, hand_back=lambda job, why: handed.append(job.id),
                      log=print)
    got: list[Any] = []
    sender = threading.Thread(target=lambda: got.append(chained.send(stop.is_set)))
    sender.start()
    time.sleep(0.3)
    assert got == []  # the server holds the request: no job is due yet
    begun = time.monotonic()
    stop.set()
    sender.join(5)
    assert got == [None] and time.monotonic() - begun < 1  # not waiting out the poll
    assert client.calls == [{"wait": 30}]  # the finish had landed: not sent again
    client.go.set()  # the abandoned poll now brings a job: it goes back unrun
    deadline = time.monotonic() + 5
    while not handed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert handed == [8]


def test_an_answer_with_next_returns_the_job_claimed_for_the_slot():
    client = SlowNext()
    client.go.set()
    chained = Chained(client, "complete", ClaimedJob(7, "email", 1), {},  # type: ignore[arg-type]
                      {}, hand_back=lambda job, why: None, log=print)
    nxt = chained.send(lambda: False)
    assert nxt is not None and (nxt.id, nxt.attempt) == (8, 1)

"""queuelog.model.claimed: a claim's job parsed once, as the worker host holds it."""
from __future__ import annotations

from typing import Any

import pytest

from queuelog.client import lease_deadline
from queuelog.model.claimed import ClaimedJob, MalformedJob, parse_stamp
from queuelog.worker.job import JobRun, Settings

CLAIMED = {"id": 7, "type": "email", "attempt": 2, "priority": 10, "payload": {"to": "a"},
           "claimed_at": "2026-01-01T00:00:00.000000Z",
           "lease_expires_at": "2026-01-01T00:00:45.500000Z"}
START = parse_stamp(CLAIMED["claimed_at"])


def test_a_claimed_job_reads_its_fields_and_lease_once():
    job = ClaimedJob.from_json(CLAIMED)
    assert (job.id, job.type, job.attempt, job.priority, job.payload) == (
        7, "email", 2, 10, {"to": "a"})
    assert START is not None and job.lease_expires_at == START + 45.5
    assert job.lease_seconds == 45.5 and job.raw == CLAIMED
    assert ClaimedJob.from_json(job) is job
    assert lease_deadline(job) == lease_deadline(CLAIMED) == START + 45.5  # one parser


def test_a_job_without_lease_stamps_gets_the_default_lease_and_now_as_its_end():
    job = ClaimedJob.from_json({"id": 1, "type": "t", "attempt": 1, "lease_expires_at": "soon"})
    assert job.lease_seconds == 300.0 and job.deadline(123.0) == 123.0
    assert parse_stamp("2026-01-01T00:00:00") == START  # the API's times are UTC


@pytest.mark.parametrize("bad", [None, [], {"type": "t", "attempt": 1},
                                 {"id": "7", "type": "t", "attempt": 1},
                                 {"id": 7, "type": 3, "attempt": 1},
                                 {"id": True, "type": "t", "attempt": 1}])
def test_a_job_without_an_int_id_and_attempt_and_a_str_type_is_malformed(bad: Any):
    with pytest.raises(MalformedJob):
        ClaimedJob.from_json(bad)


class Renewing:
    """Heartbeats answer with a later lease end, then with something that is not a job."""

    def __init__(self, run: list[JobRun]) -> None:
        self.run = run
        self.answers: list[Any] = [{**CLAIMED, "lease_expires_at": "2026-01-01T00:01:00Z"},
                                   "not a job"]

    def heartbeat(self, job: ClaimedJob, **kwargs: Any) -> Any:
        answer = self.answers.pop(0)
        if not self.answers:
            self.run[0].done.set()
        return answer


def test_a_heartbeat_renews_the_lease_end_and_keeps_the_job():
    """The runner held whatever a heartbeat answered as its job, and parsed it again."""
    runs: list[JobRun] = []
    run = JobRun(ClaimedJob.from_json(CLAIMED), settings=Settings(["true"], {}, lease=0.6),
                 client=Renewing(runs), answers=None,  # type: ignore[arg-type]
                 must_stop=lambda: False, refused=lambda exc: None, log=print)
    runs.append(run)
    run.heartbeats(kill=lambda: None)
    assert START is not None and run.job.lease_expires_at == START + 60
    assert (run.job.id, run.job.attempt, run.job.payload) == (7, 2, {"to": "a"})
    assert run.child_env()["QUEUELOG_JOB_PRIORITY"] == "10"
    labelled = ClaimedJob.from_json({**CLAIMED, "priority": "low"})
    assert labelled.priority == "low" and ClaimedJob(1, "t", 1).priority is None

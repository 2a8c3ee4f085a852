"""A claimed job as the worker host holds it: parsed once from the claim's JSON.

The API sends jobs as plain dicts, and the client keeps handing those out (CONTRACT: "Jobs
come back as plain dicts"). The worker host reads a few of their fields again and again (the
lease's end for every retry, its length for the heartbeats): ``ClaimedJob`` reads them once.
"""
from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any, Mapping

DEFAULT_LEASE_SECONDS = 300.0  # the server's LEASE_SECONDS default, when a job states none


class MalformedJob(ValueError):
    """A claim answer's job lacks what a worker needs (an int id and attempt, a str type)."""


@dataclasses.dataclass(frozen=True)
class ClaimedJob:
    """One held attempt of a job: who it is, what it carries, and when its lease ends."""

    id: int
    type: str
    attempt: int
    payload: Any = None
    priority: str | int | None = None     # as the API names it ("low", or a number)
    claimed_at: float | None = None        # epoch seconds
    lease_expires_at: float | None = None  # epoch seconds; None: the job stated none
    raw: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False,
                                               repr=False)  # the JSON as received

    @classmethod
    def from_json(cls, job: Any) -> ClaimedJob:
        """The job of a claim (or heartbeat) answer; ``MalformedJob`` if it is not one."""
        if isinstance(job, ClaimedJob):
            return job
        if not isinstance(job, Mapping):
            raise MalformedJob(f"a job is an object, not {type(job).__name__}")
        id_, type_, attempt = job.get("id"), job.get("type"), job.get("attempt")
        if not (_is_int(id_) and _is_int(attempt) and isinstance(type_, str)):
            raise MalformedJob("a job needs an integer id and attempt and a string type")
        priority = job.get("priority")
        return cls(id=id_, type=type_, attempt=attempt, payload=job.get("payload"),
                   priority=priority if _is_int(priority) or isinstance(priority, str)
                   else None,
                   claimed_at=parse_stamp(job.get("claimed_at")),
                   lease_expires_at=parse_stamp(job.get("lease_expires_at")), raw=job)

    @property
    def lease_seconds(self) -> float:
        """The lease the claim granted (its end less its start), at least 1 s."""
        if self.claimed_at is None or self.lease_expires_at is None:
            return DEFAULT_LEASE_SECONDS
        return max(self.lease_expires_at - self.claimed_at, 1.0)

    def deadline(self, now: float) -> float:
        """The lease's end in epoch seconds; ``now`` when the job states none."""
        return now if self.lease_expires_at is None else self.lease_expires_at

    def renewed(self, answer: Any) -> ClaimedJob:
        """This job with the lease end of a heartbeat's answer (kept if it states none)."""
        until = parse_stamp(answer.get("lease_expires_at")) if isinstance(answer, Mapping) \
            else None
        return self if until is None else dataclasses.replace(self, lease_expires_at=until)


def parse_stamp(stamp: Any) -> float | None:
    """An API timestamp (ISO 8601, ``Z`` or an offset) as epoch seconds; None if it is not one."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:  # the API always states UTC: never read one as local time
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

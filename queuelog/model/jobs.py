"""The job model: statuses, priorities, the state machine and the retry backoff."""
from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import functools
import random
from typing import Any, Mapping, NamedTuple

from queuelog.model import jsontext


class Status(str, enum.Enum):
    """Where a job is in its life."""

    BLOCKED = "blocked"     # waiting for the jobs it depends on (never claimed)
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


_STATUSES = {s.value: s for s in Status}  # a dict lookup: Status(value) is an enum call


class Outcome(str, enum.Enum):
    """How one attempt (one claim) ended."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    LEASE_EXPIRED = "lease_expired"
    CANCELLED = "cancelled"   # a running job cancelled by its producer or an admin


class Priority(enum.IntEnum):
    """Priority labels; the gaps leave room for levels in between."""

    LOW = 0
    MEDIUM = 10
    HIGH = 20
    CRITICAL = 30

    @classmethod
    def from_label(cls, label: str) -> "Priority":
        """Return the priority named ``label`` (raises KeyError when unknown)."""
        if label not in LABELS:
            raise KeyError(label)
        return cls[label.upper()]

    @property
    def label(self) -> str:
        """The lower-case name used in JSON."""
        return self.name.lower()

    @classmethod
    def from_value(cls, value: int) -> "Priority":
        """Map a stored value to the highest label not above it."""
        best = cls.LOW
        for p in cls:
            if p.value <= value:
                best = p
        return best


LABELS = frozenset(p.name.lower() for p in Priority)

# Which status a transition may start from; the store puts these into its
# conditional UPDATEs, so a transition from any other state changes nothing.
TRANSITIONS: dict[str, tuple[Status, ...]] = {
    "claim": (Status.PENDING,),
    "heartbeat": (Status.RUNNING,),
    "complete": (Status.RUNNING,),
    "fail": (Status.RUNNING,),
    "cancel": (Status.BLOCKED, Status.PENDING, Status.RUNNING),
    "retry": (Status.FAILED, Status.CANCELLED),
}
FINISHED = (Status.COMPLETED, Status.FAILED, Status.CANCELLED)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_NAIVE_EPOCH = dt.datetime(1970, 1, 1)


def to_datetime(us: int) -> dt.datetime:
    """Turn stored epoch microseconds into an aware UTC datetime."""
    return _EPOCH + dt.timedelta(microseconds=us)


def from_datetime(value: dt.datetime) -> int:
    """Turn an aware datetime into epoch microseconds."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@functools.lru_cache(maxsize=64)
def _label(value: int) -> str:
    """A stored priority's label, computed once per value, not per job serialized."""
    return Priority.from_value(value).label


@functools.lru_cache(maxsize=4096)
def isoformat(us: int | None) -> str | None:
    """Format epoch microseconds as fixed-width ISO 8601 UTC ending in ``Z``."""
    if us is None:
        return None
    # Naive datetime.isoformat: cheaper than strftime, and a job has seven of them; and
    # cached, as a batch's jobs share most of theirs (claimed, updated, lease end, created).
    return (_NAIVE_EPOCH + dt.timedelta(microseconds=us)).isoformat(timespec="microseconds") + "Z"


def backoff_seconds(retry: int, base: float, cap: float,
                    rng: random.Random | None = None) -> float:
    """Delay before the ``retry``-th retry (1-based): exponential with equal jitter.

    The one copy: the store's retry ``run_at`` and the client's and runner's pauses use it.
    """
    # The exponent is bounded so that a very long outage cannot overflow the float.
    ceiling = min(cap, base * 2 ** min(max(retry - 1, 0), 60))
    return ceiling * (rng or random).uniform(0.5, 1.0)


class Done(NamedTuple):
    """A job as a batch complete leaves it: what its answer (the job's new status) and its
    count (per type) need, without the payload and result decoded for nothing."""

    id: int
    type: str
    status: Status
    claimed_at: int | None = None   # the attempt's claim and end: its run time (metrics)
    finished_at: int | None = None
    traceparent: str | None = None  # the job's trace context: the complete's span links it

    @classmethod
    def from_row(cls, row: Any) -> "Done":
        """From a row with ``id``, ``type``, ``status``, ``claimed_at``, ``finished_at`` and
        ``traceparent``."""
        return cls(row.id, row.type, _STATUSES[row.status], row.claimed_at, row.finished_at,
                   row.traceparent)


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One claim of a job and how it ended."""

    attempt: int
    worker_id: str
    started_at: int
    finished_at: int | None
    outcome: Outcome
    error: str | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Attempt":
        """Build from a ``job_attempts`` row."""
        return cls(row["attempt"], row["worker_id"], row["started_at"],
                   row["finished_at"], Outcome(row["outcome"]), row["error"])

    def to_dict(self, *, show_error: bool) -> dict[str, Any]:
        """Serialize; ``error`` only when the reader may see it (V-10)."""
        out: dict[str, Any] = {
            "attempt": self.attempt,
            "worker_id": self.worker_id,
            "started_at": isoformat(self.started_at),
            "finished_at": isoformat(self.finished_at),
            "outcome": self.outcome.value,
        }
        if show_error:
            out["error"] = self.error
        return out


@dataclasses.dataclass(frozen=True)
class Job:
    """A job as stored; timestamps are epoch microseconds."""

    id: int
    type: str
    payload: dict[str, Any]
    priority: int
    status: Status
    attempt: int
    retry_count: int
    max_retries: int
    idempotency_key: str | None
    producer: str
    worker_id: str | None
    run_at: int
    claimed_at: int | None
    lease_expires_at: int | None
    result: Any
    error: str | None
    created_at: int
    updated_at: int
    finished_at: int | None
    attempts: tuple[Attempt, ...] | None = None
    schedule: str | None = None        # the schedule that made it (SCHEDULES), else None
    scheduled_for: int | None = None   # that schedule's tick (a run now: the run's time)
    progress: Any = None               # the last progress a heartbeat reported (an object)
    depends_on: tuple[int, ...] = ()   # its parents' ids, in the order given (Workflows)
    on_parent_failure: str = "cancel"  # "cancel" or "run": what a parent's failure does
    cancelled_by_parent: int | None = None  # the parent whose failure cancelled it
    parents: tuple[dict[str, Any], ...] | None = None  # on a claimed job: its parents
    dependents: tuple[int, ...] | None = None  # on GET /jobs/{id}: who depends on it
    dependents_truncated: bool = False
    traceparent: str | None = None     # W3C trace context from the enqueue's headers
    tracestate: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> "Job":
        """Build from a ``jobs`` row with a named attribute per column (a SQLAlchemy
        ``Row``, the store's named tuples), JSON columns decoded (no mapping made per row:
        a batch makes many jobs, and each mapping is work thrown away)."""
        result, progress, depends_on = row.result, row.progress, row.depends_on
        loads = jsontext.loads
        # Every field set at once, as one dict display: a frozen dataclass's __init__ sets
        # them one by one through object.__setattr__, and dict(**fields) is slower than the
        # display (a batch builds 100). tests/unit/test_store.py checks that the
        # result equals the __init__'s.
        job = object.__new__(cls)
        object.__setattr__(job, "__dict__", {
            "id": row.id, "type": row.type, "payload": loads(row.payload),
            "priority": row.priority, "status": _STATUSES[row.status],
            "attempt": row.attempt, "retry_count": row.retry_count,
            "max_retries": row.max_retries, "idempotency_key": row.idempotency_key,
            "producer": row.producer, "worker_id": row.worker_id, "run_at": row.run_at,
            "claimed_at": row.claimed_at, "lease_expires_at": row.lease_expires_at,
            "result": None if result is None else loads(result), "error": row.error,
            "created_at": row.created_at, "updated_at": row.updated_at,
            "finished_at": row.finished_at, "attempts": None, "schedule": row.schedule,
            "scheduled_for": row.scheduled_for,
            "progress": None if progress is None else loads(progress),
            "depends_on": () if depends_on is None else tuple(loads(depends_on)),
            "on_parent_failure": row.on_parent_failure or "cancel",
            "cancelled_by_parent": row.cancelled_by_parent, "parents": None,
            "dependents": None, "dependents_truncated": False,
            "traceparent": row.traceparent, "tracestate": row.tracestate})
        return job

    def with_attempts(self, attempts: tuple[Attempt, ...]) -> "Job":
        """Return a copy carrying its attempt history."""
        return dataclasses.replace(self, attempts=attempts)

    def without_history(self) -> "Job":
        """Return a copy without what only ``GET /jobs/{id}`` shows (attempts, dependents)."""
        return dataclasses.replace(self, attempts=None, dependents=None,
                                   dependents_truncated=False)

    def to_dict(self, *, show_error: bool, show_key: bool) -> dict[str, Any]:
        """Serialize to the contract's JSON shape, hiding what the reader may not see."""
        out: dict[str, Any] = {
            "id": self.id, "type": self.type, "payload": self.payload,
            "priority": _label(self.priority),
            "status": self.status.value, "attempt": self.attempt,
            "retry_count": self.retry_count, "max_retries": self.max_retries,
            "idempotency_key": self.idempotency_key if show_key else None,
            "producer": self.producer, "worker_id": self.worker_id,
            "run_at": isoformat(self.run_at), "claimed_at": isoformat(self.claimed_at),
            "lease_expires_at": isoformat(self.lease_expires_at), "result": self.result,
            "created_at": isoformat(self.created_at), "updated_at": isoformat(self.updated_at),
            "finished_at": isoformat(self.finished_at),
            "schedule": self.schedule, "scheduled_for": isoformat(self.scheduled_for),
            "progress": self.progress, "depends_on": list(self.depends_on),
            "on_parent_failure": self.on_parent_failure,
            "cancelled_by_parent": self.cancelled_by_parent,
            "traceparent": self.traceparent, "tracestate": self.tracestate,
        }
        if self.parents is not None:
            out["parents"] = list(self.parents)
        if self.dependents is not None:
            out["dependents"] = list(self.dependents)
            if self.dependents_truncated:
                out["dependents_truncated"] = True
        if show_error:
            out["error"] = self.error
        if self.attempts is not None:
            out["attempts"] = [a.to_dict(show_error=show_error) for a in self.attempts]
        return out

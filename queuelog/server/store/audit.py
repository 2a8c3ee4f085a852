"""The audit log: who changed what, written inside the transaction of the change itself.

Store verbs that act for a person take an ``actor`` and call ``record`` (or a ``Tally``,
for changes made in several bounded transactions) on their own connection, so an event
exists exactly when its change was committed. Callers pass only names, ids, counts and
filters as ``detail``: never a token, a password, a payload or error text.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from sqlalchemy import Connection, bindparam, delete, insert, select, update

from queuelog.model.jobs import Priority
from queuelog.server.store.part import Part
from queuelog.server.store.tables import audit_events
# The vocabulary is declared with GET /audit's query (requests/ sits below store/).
from queuelog.server.requests.bodies import AUDIT_ACTIONS as ACTIONS
AUDIT_PURGE_BATCH = 1000  # events deleted per transaction

_INSERT = insert(audit_events).returning(audit_events.c.id)
_SET_DETAIL = (update(audit_events).where(audit_events.c.id == bindparam("eid"))
               .values(detail=bindparam("detail")))


def _detail_json(detail: dict[str, Any] | None) -> str | None:
    return None if not detail else json.dumps(detail, separators=(",", ":"), sort_keys=True)


def record(conn: Connection, at: int, actor: str, action: str, target: str | None = None,
           detail: dict[str, Any] | None = None) -> int:
    """Write one event on ``conn`` (the change's own transaction); return its id."""
    assert action in ACTIONS, action
    return int(conn.execute(_INSERT, {"at": at, "actor": actor[:100], "action": action,
                                      "target": None if target is None else target[:255],
                                      "detail": _detail_json(detail)}).scalar_one())


class Tally:
    """One event for a change made in several transactions (bulk actions, purges).

    The event is inserted by the first transaction that changes something and its
    ``count`` updated by each later one, in that transaction: whatever was committed is
    recorded, even if the process dies half-way.
    """

    def __init__(self, actor: str | None, action: str, target: str | None,
                 detail: dict[str, Any]) -> None:
        self.actor, self.action, self.target = actor, action, target
        self.detail = dict(detail, count=0)
        self.event_id: int | None = None

    def add(self, conn: Connection, at: int, count: int, *, force: bool = False) -> None:
        """Count ``count`` more changes on ``conn``; ``force`` records even a zero."""
        if self.actor is None or (count == 0 and (not force or self.event_id is not None)):
            return
        self.detail["count"] += count
        if self.event_id is None:
            self.event_id = record(conn, at, self.actor, self.action, self.target, self.detail)
        else:
            conn.execute(_SET_DETAIL, {"eid": self.event_id,
                                       "detail": _detail_json(self.detail)})


@dataclasses.dataclass(frozen=True)
class Event:
    """One audit event as stored."""

    id: int
    at: int
    actor: str
    action: str
    target: str | None
    detail: dict[str, Any]

    @classmethod
    def from_row(cls, row: Any) -> "Event":
        """Build from an ``audit_events`` row, priorities by their labels."""
        return cls(row.id, row.at, row.actor, row.action, row.target,
                   labelled(json.loads(row.detail)) if row.detail else {})


PRIORITY_DETAILS = ("priority", "max_priority")  # detail keys that hold a stored priority


def labelled(detail: Any) -> Any:
    """``detail`` with every stored priority (at any depth, e.g. a bulk action's filter)
    shown by its label: ``"high"``, not 20, as the contract has it.

    Done here, where every reader (GET /audit, ``queuelog audit``, the dashboard) gets
    events, so all agree and events recorded with numbers read the same as any other.
    """
    if isinstance(detail, dict):
        return {k: _label(v) if k in PRIORITY_DETAILS else labelled(v)
                for k, v in detail.items()}
    if isinstance(detail, list):
        return [labelled(v) for v in detail]
    return detail


def _label(value: Any) -> Any:
    """A stored priority's label; any other value (a label already, null) unchanged."""
    if isinstance(value, int) and not isinstance(value, bool):
        return Priority.from_value(value).label
    return value


class Audit(Part):
    """Read and purge audit events."""


    def audit_events(self, *, action: str | None = None, actor: str | None = None,
                     limit: int = 50, before: int | None = None) -> tuple[list[Event], int | None]:
        """A newest-first page of events and the id to pass as ``before`` for the next."""
        query = select(audit_events).order_by(audit_events.c.id.desc()).limit(limit + 1)
        if action is not None:
            query = query.where(audit_events.c.action == action)
        if actor is not None:
            query = query.where(audit_events.c.actor == actor)
        if before is not None:
            query = query.where(audit_events.c.id < before)
        with self._read.connect() as conn:
            rows = conn.execute(query).all()
        events = [Event.from_row(r) for r in rows[:limit]]
        return events, (events[-1].id if len(rows) > limit else None)

    def purge_audit(self, older_than_us: int, actor: str) -> int:
        """Delete events older than the cutoff, in batches; record ``audit.purge``."""
        tally = Tally(actor, "audit.purge", None,
                      {"older_than_seconds": older_than_us // 1_000_000})
        total = 0
        while True:
            with self._write.begin() as conn:
                now = self.clock()
                ids = conn.execute(select(audit_events.c.id).where(
                    audit_events.c.at < now - older_than_us,
                    # never the event this purge is writing
                    audit_events.c.id != (tally.event_id or 0))
                    .order_by(audit_events.c.id).limit(AUDIT_PURGE_BATCH)).scalars().all()
                if ids:
                    conn.execute(delete(audit_events).where(audit_events.c.id.in_(ids)))
                tally.add(conn, now, len(ids), force=True)
            total += len(ids)
            if len(ids) < AUDIT_PURGE_BATCH:
                return total

"""The audit log over HTTP: ``GET /audit``, newest first, for admins."""
from __future__ import annotations

from typing import Any

from flask import Blueprint

from queuelog.server import actions
from queuelog.server.auth import current_user, require
from queuelog.model.jobs import isoformat
from queuelog.server.store import Event
from queuelog.server.requests.check import query
from queuelog.server.requests.parse import decode_cursor, encode_cursor

bp = Blueprint("audit", __name__)


def event_json(e: Event) -> dict[str, Any]:
    """One event as JSON."""
    return {"id": e.id, "at": isoformat(e.at), "actor": e.actor, "action": e.action,
            "target": e.target, "detail": e.detail}


@bp.get("/audit")
@require(actions.audit_events)
def list_events() -> Any:
    """A newest-first page of audit events; filters ``action``, ``actor``; a cursor."""
    q = query("AuditQuery")
    action, actor, limit = q.get("action"), q.get("actor"), q.get("limit", 50)
    before = decode_cursor(q["cursor"]) if "cursor" in q else None
    events, older = actions.audit_events(current_user(), action=action, actor=actor,
                                         limit=limit, before=before)
    return {"events": [event_json(e) for e in events],
            "next_cursor": None if older is None else encode_cursor(older)}

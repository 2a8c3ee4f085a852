"""The audit log over HTTP: ``GET /audit``, newest first, for admins."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, request

from queuelog.server import actions
from queuelog.server.auth import current_user, require
from queuelog.model.jobs import isoformat
from queuelog.server.store import Event
from queuelog.server.store.audit import ACTIONS as AUDIT_ACTIONS
from queuelog.server.requests.check import field_errors
from queuelog.server.api.read import _int_arg, decode_cursor, encode_cursor

bp = Blueprint("audit", __name__)


def event_json(e: Event) -> dict[str, Any]:
    """One event as JSON."""
    return {"id": e.id, "at": isoformat(e.at), "actor": e.actor, "action": e.action,
            "target": e.target, "detail": e.detail}


@bp.get("/audit")
@require("admin")
def list_events() -> Any:
    """A newest-first page of audit events; filters ``action``, ``actor``; a cursor."""
    args = request.args
    errors: list[dict[str, str]] = []
    action, actor = args.get("action"), args.get("actor")
    if action is not None and action not in AUDIT_ACTIONS:
        errors.append({"field": "action",
                       "detail": f"Must be one of {', '.join(AUDIT_ACTIONS)}."})
    # As GET /jobs takes a type: any 1 to 100 characters but NUL (PostgreSQL refuses it).
    if actor is not None and (not 1 <= len(actor) <= 100 or "\x00" in actor):
        errors.append({"field": "actor", "detail": "Must be 1 to 100 characters, no NUL."})
    limit = _int_arg(args, "limit", 1, 200, 50, errors)
    before = decode_cursor(args["cursor"], errors) if "cursor" in args else None
    field_errors(errors)
    events, older = actions.audit_events(current_user(), action=action, actor=actor,
                                         limit=limit, before=before)
    return {"events": [event_json(e) for e in events],
            "next_cursor": None if older is None else encode_cursor(older)}

"""The dashboard's audit log, for admins: newest first, one page at a time."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, render_template, request

from queuelog.server import actions
from queuelog.server.auth import current_user, require
from queuelog.server.ui.filters import PAGE_SIZE, BadFilter, read
from queuelog.server.ui.helpers import error_page

bp = Blueprint("audit", __name__)


@bp.get("/audit")
@require(actions.dashboard, actions.audit_events)
def audit() -> Any:
    """Admin: the audit log, newest first, one page at a time."""
    try:
        before = read("AuditFilters", request.args)["before"]
    except BadFilter as exc:
        return error_page(400, "Bad filter", str(exc))
    events, older = actions.audit_events(current_user(), limit=PAGE_SIZE, before=before)
    return render_template("ui/audit.html", events=events, older=older, paged=before is not None)

"""The dashboard's workers page: who is working, on what, since when (Sidekiq's "Busy")."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, render_template

from queuelog.server import actions
from queuelog.server.auth import current_user, require

bp = Blueprint("workers", __name__)


@bp.get("/workers")
@require(actions.dashboard, actions.workers)
def workers() -> Any:
    """One card per worker key; a job whose lease has run out is marked, and its worker."""
    who = current_user()
    return render_template("ui/workers.html", workers=actions.workers(who),
                           now=actions.dashboard(who))

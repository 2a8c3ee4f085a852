"""``GET /workers``: who is working, on what, since when (CONTRACT "Workers")."""
from __future__ import annotations

from typing import Any

from flask import Blueprint

from queuelog.model.jobs import isoformat
from queuelog.server import actions
from queuelog.server.auth import current_user, require
from queuelog.server.store import WorkerSummary

bp = Blueprint("workers", __name__)


def worker_json(w: WorkerSummary) -> dict[str, Any]:
    """A worker as ``GET /workers`` shows it."""
    return {"name": w.name,
            "running": [{"id": j.id, "type": j.type, "attempt": j.attempt,
                         "claimed_at": isoformat(j.claimed_at),
                         "lease_expires_at": isoformat(j.lease_expires_at)}
                        for j in w.running],
            "last_claim_at": isoformat(w.last_claim_at),
            "completed_last_hour": w.completed_last_hour,
            "failed_last_hour": w.failed_last_hour}


@bp.get("/workers")
@require(actions.workers)
def list_workers() -> Any:
    """Every worker key that holds a job or claimed in the last 24 hours."""
    return {"workers": [worker_json(w) for w in actions.workers(current_user())]}

"""Job types: a summary of each configured type, and pausing and resuming one."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app

from queuelog.server import actions
from queuelog.server.auth import current_user, require
from queuelog.server.store import TypeSummary
from queuelog.server.requests.check import body

bp = Blueprint("types", __name__)


def type_json(t: TypeSummary) -> dict[str, Any]:
    """A type as ``GET /types`` shows it; a count equal to ``count_cap`` means "at least"."""
    cap = current_app.config["COUNT_CAP"]
    return {"name": t.name, "paused": t.paused,
            "counts": {status: min(n, cap) for status, n in t.counts.items()},
            "count_cap": cap,
            "oldest_pending_seconds": round(t.oldest_pending_us / 1_000_000, 3),
            "completed_last_hour": t.completed_last_hour,
            "failed_last_hour": t.failed_last_hour}


@bp.get("/types")
@require("viewer", "admin", "metrics")
def list_types() -> Any:
    """Every configured type: paused or not, capped counts, queue age, last hour."""
    config = current_app.config
    return {"types": [type_json(t) for t in actions.job_types(list(config["JOB_TYPES"]),
                                                              config["COUNT_CAP"])]}


@bp.post("/types/<job_type>/pause")
@require("admin", write=True)
def pause(job_type: str) -> Any:
    """Stop claims of this type (enqueues go on); held in the database."""
    return _set(job_type, True)


@bp.post("/types/<job_type>/resume")
@require("admin", write=True)
def resume(job_type: str) -> Any:
    """Let claims of this type go on."""
    return _set(job_type, False)


def _set(job_type: str, paused: bool) -> Any:
    body("Empty")  # no fields; a body, if any, must be {}
    config = current_app.config
    return type_json(actions.set_paused(current_user(), job_type, paused,
                                        list(config["JOB_TYPES"]), config["COUNT_CAP"]))

"""Job types: a summary of each configured type, and pausing and resuming one."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app

from queuelog.model.limits import NONE
from queuelog.server import actions
from queuelog.server.auth import current_user, require
from queuelog.server.store import TypeSummary
from queuelog.server.requests.check import body

bp = Blueprint("types", __name__)


def type_json(t: TypeSummary) -> dict[str, Any]:
    """A type as ``GET /types`` shows it; a count equal to ``count_cap`` means "at least"."""
    cap = current_app.config["COUNT_CAP"]
    flow = t.flow
    limits = flow.limits if flow is not None else NONE
    return {"name": t.name, "paused": t.paused,
            "counts": {status: min(n, cap) for status, n in t.counts.items()},
            "count_cap": cap,
            "oldest_pending_seconds": round(t.oldest_pending_us / 1_000_000, 3),
            "completed_last_hour": t.completed_last_hour,
            "failed_last_hour": t.failed_last_hour,
            # Flow control: the limits in force (null where none), and why a claim skips it.
            "concurrency": limits.concurrency, "rate": limits.rate,
            "burst": limits.shown_burst(),
            "running": flow.running if flow is not None else t.counts.get("running", 0),
            "limited": flow.limited if flow is not None else None}


@bp.get("/types")
@require(actions.job_types)
def list_types() -> Any:
    """Every configured type: paused or not, capped counts, queue age, last hour."""
    config = current_app.config
    return {"types": [type_json(t) for t in actions.job_types(current_user(), list(config["JOB_TYPES"]),
                                                              config["COUNT_CAP"])]}


@bp.post("/types/<path:job_type>/pause")
@require(actions.set_paused, write=True)
def pause(job_type: str) -> Any:
    """Stop claims of this type (enqueues go on); held in the database."""
    return _set(job_type, True)


@bp.post("/types/<path:job_type>/resume")
@require(actions.set_paused, write=True)
def resume(job_type: str) -> Any:
    """Let claims of this type go on."""
    return _set(job_type, False)


@bp.put("/types/<path:job_type>/limits")
@require(actions.set_limits, write=True)
def put_limits(job_type: str) -> Any:
    """Change the type's concurrency, rate or burst (a field left out keeps its value)."""
    data = body("TypeLimits")
    config = current_app.config
    return type_json(actions.set_limits(current_user(), job_type, dict(data),
                                        list(config["JOB_TYPES"]), config["COUNT_CAP"]))


@bp.delete("/types/<path:job_type>/limits")
@require(actions.reset_limits, write=True)
def delete_limits(job_type: str) -> Any:
    """The type's limits back to the configured ones."""
    body("Empty")
    config = current_app.config
    return type_json(actions.reset_limits(current_user(), job_type, list(config["JOB_TYPES"]),
                                          config["COUNT_CAP"]))


def _set(job_type: str, paused: bool) -> Any:
    body("Empty")  # no fields; a body, if any, must be {}
    config = current_app.config
    return type_json(actions.set_paused(current_user(), job_type, paused,
                                        list(config["JOB_TYPES"]), config["COUNT_CAP"]))

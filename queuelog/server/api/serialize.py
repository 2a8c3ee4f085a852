"""A job as JSON for a principal: one function, for every API view that answers with jobs."""
from __future__ import annotations

from typing import Any

from queuelog.model.jobs import Job
from queuelog.server import actions
from queuelog.server.auth import Principal, current_user


def job_json(job: Job, who: Principal | None = None) -> dict[str, Any]:
    """``job`` as ``who`` (default: the caller) may see it: error text for admins only
    (V-10), the idempotency key for its producer and admins."""
    who = who if who is not None else current_user()
    return actions.visible(job, who).to_dict(
        show_error=who.is_admin,
        show_key=who.is_admin or (who.role == "producer" and job.producer == who.name))

"""A job as JSON for a principal: one function, for every API view that answers with jobs."""
from __future__ import annotations

from typing import Any

from queuelog.model.jobs import Job
from queuelog.server import actions
from queuelog.server.auth import Principal, current_user


def job_json(job: Job, who: Principal | None = None) -> dict[str, Any]:
    """``job`` as ``who`` (default: the caller) may see it: what it shows is the actions'
    rule (error text: ``actions.sees_errors``, V-10; the idempotency key: ``sees_key``)."""
    who = who if who is not None else current_user()
    return job.to_dict(show_error=actions.sees_errors(who), show_key=actions.sees_key(job, who))

"""The HTTP API: producer, worker, admin and read blueprints, and what they share."""
from __future__ import annotations

import threading
from typing import Any

from flask import current_app

from ..auth import Principal, current_user
from ..jobs import Job
from ..store import ALL, Scope


def scope_of(principal: Principal) -> Scope:
    """Which jobs a principal may read: a producer its own, a worker those it held."""
    if principal.role == "producer":
        return Scope(producer=principal.name)
    if principal.role == "worker":
        return Scope(worker=principal.name)
    return ALL


def job_json(job: Job) -> dict[str, Any]:
    """A job as the current caller may see it (error text for admins only, V-10)."""
    who = current_user()
    return job.to_dict(show_error=who.is_admin,
                       show_key=who.is_admin or (who.role == "producer"
                                                 and job.producer == who.name))


def wakeup() -> threading.Condition:
    """The condition that enqueues notify, so long polls in this process wake at once."""
    return current_app.extensions["queuelog.wakeup"]  # type: ignore[no-any-return]


def notify() -> None:
    """Wake long polls in this process: a job may have become due."""
    cond = wakeup()
    with cond:
        cond.notify_all()

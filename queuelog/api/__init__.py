"""The HTTP API: producer, worker, admin and read blueprints, and what they share."""
from __future__ import annotations

from typing import Any

from ..auth import Principal, current_user
from ..jobs import Job
from ..longpoll import Wakeup, long_polls  # Wakeup: re-exported for older importers
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


def wakeup() -> Wakeup:
    """What enqueues ring, so long polls in this process wake at once."""
    return long_polls().bell


def notify() -> None:
    """Wake long polls in this process: a job may have become due."""
    wakeup().ring()

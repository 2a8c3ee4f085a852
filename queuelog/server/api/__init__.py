"""The HTTP API: producer, worker, admin and read blueprints, and what they share."""
from __future__ import annotations

from typing import Any

from queuelog.server import actions
from queuelog.server.auth import Principal, current_user
from queuelog.model.jobs import Job
from queuelog.server.longpoll import Wakeup, long_polls  # Wakeup: re-exported for older importers
from queuelog.server.store import Scope


def scope_of(principal: Principal) -> Scope:
    """Which jobs a principal may read (the rule lives in ``actions``)."""
    return actions.scope_of(principal)


def job_json(job: Job) -> dict[str, Any]:
    """A job as the current caller may see it (the rule lives in ``actions``, V-10)."""
    return actions.job_view(job, current_user())


def wakeup() -> Wakeup:
    """What enqueues ring, so long polls in this process wake at once."""
    return long_polls().bell


def notify() -> None:
    """Wake long polls in this process: a job may have become due."""
    wakeup().ring()

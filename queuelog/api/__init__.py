"""The HTTP API: producer, worker, admin and read blueprints, and what they share."""
from __future__ import annotations

import threading
from typing import Any

from flask import current_app

from .. import actions
from ..auth import Principal, current_user
from ..jobs import Job
from ..store import Scope


def scope_of(principal: Principal) -> Scope:
    """Which jobs a principal may read (the rule lives in ``actions``)."""
    return actions.scope_of(principal)


def job_json(job: Job) -> dict[str, Any]:
    """A job as the current caller may see it (the rule lives in ``actions``, V-10)."""
    return actions.job_view(job, current_user())


class Wakeup(threading.Condition):
    """A condition with a counter, so a long poll cannot miss a wake-up.

    A poll notes ``count`` before it claims; a job enqueued between that claim finding
    nothing and the poll going to sleep has moved the count, and the poll does not sleep.
    """

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def ring(self) -> None:
        """Wake every waiting poll: a job may have become due."""
        with self:
            self.count += 1
            self.notify_all()

    def wait_after(self, seen: int, timeout: float) -> bool:
        """Sleep up to ``timeout`` unless rung since the count was ``seen``."""
        with self:
            return self.wait_for(lambda: self.count != seen, timeout)


def wakeup() -> Wakeup:
    """What enqueues ring, so long polls in this process wake at once."""
    return current_app.extensions["queuelog.wakeup"]  # type: ignore[no-any-return]


def notify() -> None:
    """Wake long polls in this process: a job may have become due."""
    wakeup().ring()

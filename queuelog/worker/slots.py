"""The runner's slots: ``--concurrency N`` commands at most, whichever thread claims.

A claim reserves every free slot before it is sent, and the jobs it gets take theirs before
the reservation is given back, so two pollers never claim more than is free between them.
"""
from __future__ import annotations

import threading
from typing import Callable

from queuelog.worker.clock import SYSTEM, Clock

GATHER_SECONDS = 0.01  # how long a claim waits for more running jobs to end


class Slots:
    """Counts the slots taken (commands running) and reserved (claims in flight)."""

    def __init__(self, concurrency: int, *, stopped: Callable[[], bool],
                 gather: bool = True, clock: Clock = SYSTEM) -> None:
        self.concurrency, self.stopped, self.clock = concurrency, stopped, clock
        self.gather = gather and concurrency > 1
        self.cond = threading.Condition()
        self.active = 0    # commands running: the slots taken
        self.reserved = 0  # slots a claim in flight may fill

    def free(self) -> int:
        """Slots neither taken nor reserved (call holding ``cond``)."""
        return self.concurrency - self.active - self.reserved

    def reserve(self) -> int:
        """Wait for free slots and reserve them all; 0 only once stopped."""
        with self.cond:
            while not self.stopped():
                if self.free() <= 0:
                    self.cond.wait()
                    continue
                self._gather()
                free = self.free()
                # While this thread gathered, the other poller may have reserved the rest:
                # then wait again rather than claim with nothing free.
                if free > 0 and not self.stopped():
                    self.reserved += free
                    return free
            return 0

    def settle(self, reserved: int, taken: int) -> None:
        """A claim came back: ``taken`` jobs take slots, the rest of ``reserved`` is freed."""
        with self.cond:
            self.active += taken
            self.reserved -= reserved
            self.cond.notify_all()

    def release(self) -> None:
        """A command has ended: its slot is free."""
        with self.cond:
            self.active -= 1
            self.cond.notify_all()

    def wake(self) -> None:
        """Let waiting threads look again (after a stop)."""
        with self.cond:
            self.cond.notify_all()

    def _gather(self) -> None:
        # Holding cond with a slot free. While other jobs still run, give them a moment to
        # finish too, so that one claim (max_jobs) fills several slots: short jobs otherwise
        # free their slots one by one, and every claim would be for one job.
        if not self.gather:
            return
        until = self.clock.monotonic() + GATHER_SECONDS
        while self.active and self.free() < (self.concurrency + 1) // 2:
            left = until - self.clock.monotonic()
            if left <= 0 or self.stopped():
                return
            self.cond.wait(left)

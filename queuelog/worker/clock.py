"""The worker host's time: one object, so that tests can move it instead of sleeping."""
from __future__ import annotations

import threading
import time


class Clock:
    """Real time: ``monotonic`` for intervals, ``time`` for lease ends, ``sleep`` for pauses."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        return time.monotonic()

    def time(self) -> float:
        """Epoch seconds (leases end at a wall-clock moment)."""
        return time.time()

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> None:
        """Pause ``seconds``; ``stop`` set meanwhile ends the pause early."""
        (stop or threading.Event()).wait(max(0.0, seconds))


SYSTEM = Clock()

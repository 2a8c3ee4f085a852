"""What every part of a store shares: its engine, backend, connections, clock and hooks.

The Store is composed of parts (jobs, reads, types, ...), each an object of its own with
this one context, not mixed into one class: a part reads what it needs from here.
"""
from __future__ import annotations

from typing import Any, Callable

from sqlalchemy import Engine

from queuelog.server.store.engine import Clock, system_clock
from queuelog.server.store.listen import CLAIMABLE, FINISHED


class Context:
    """One store's shared state; the server sets the hooks (wakeups, metrics, retention)."""

    def __init__(self, engine: Engine, backend: Any, *, clock: Clock = system_clock) -> None:
        self.engine = engine
        self.backend = backend
        self.notifier = backend.notifier(engine)
        self.write = backend.writer(engine)
        self.read = backend.reader(engine)  # every pure read connects through it
        self.clock = clock
        # Told when a call created or finished jobs (retention purges after such requests).
        self.on_jobs_written: Callable[[], None] = lambda: None
        # Told the type of each job whose lease a claim took back (the metrics count them),
        # and, as a second argument where given, its run time in seconds (claim to take-back).
        self.on_lease_expired: Callable[..., None] = lambda job_type, seconds=None: None
        # Told the type and run time (seconds, claim to cancel) of each running job
        # cancelled: the metrics' queuelog_job_run_seconds{outcome="cancelled"}.
        self.on_run_cancelled: Callable[[str, float], None] = lambda job_type, seconds: None
        # Told after a commit that made jobs claimable (this process's long polls wake;
        # other processes hear the notifier): see wakeups.py.
        self.on_claimable: Callable[[], None] = lambda: None
        # Told after a commit that finished a job a request waits for (GET ?wait=).
        self.on_finished: Callable[[], None] = lambda: None
        self.notifier.watch({CLAIMABLE: lambda: self.on_claimable(),
                             FINISHED: lambda: self.on_finished()})


class Part:
    """A part of the store: its verbs over the shared ``Context``."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.engine = ctx.engine
        self.backend = ctx.backend
        self.notifier = ctx.notifier
        self._write = ctx.write
        self._read = ctx.read

    def clock(self) -> int:
        """Now, as epoch microseconds, by the store's clock."""
        return self.ctx.clock()

    def on_jobs_written(self) -> None:
        """Tell the server that jobs were created or finished (retention)."""
        self.ctx.on_jobs_written()

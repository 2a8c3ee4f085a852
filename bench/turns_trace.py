"""A gunicorn config that traces SQLite's write turns (store/turns.py) in every worker.

    python bench/bench_spread.py --single --trace-turns     # uses it; prints the summary

Each worker wraps the ``flock`` that turns.py takes between processes and records, for
every turn: how long the writer waited for the lock, how long the lock was then held
(wall clock), and, where the same thread took and freed it, that thread's CPU time in
between (a group of one writer: the serialized part of its write). The records go to
``$TURNS_TRACE_DIR/turns-<pid>.txt``; bench_spread.py sums them up. The metrics hooks are
gunicorn.conf.py's, so the server is the one bench_spread.py measures otherwise. (Not
imported by bench_spread.py: importing the hooks sets PROMETHEUS_MULTIPROC_DIR.)
"""
from __future__ import annotations

import fcntl
import os
import threading
import time
from typing import Any

from queuelog.server.gunicorn_hooks import child_exit, on_exit, on_starting  # noqa: F401

VARIABLE = "TURNS_TRACE_DIR"  # not QUEUELOG_*: that prefix is read as settings
_records: list[tuple[float, float, float]] = []
_taken: dict[int, tuple[float, float, int, float]] = {}


class _TracedFcntl:
    """``fcntl`` as turns.py sees it, with each exclusive ``flock`` timed to its release."""

    def __getattr__(self, name: str) -> Any:
        return getattr(fcntl, name)

    def flock(self, fd: int, operation: int) -> None:
        """Take or free the lock, noting when."""
        if operation != fcntl.LOCK_EX:
            fcntl.flock(fd, operation)
            taken = _taken.pop(fd, None)
            if taken is not None:
                at, cpu, thread, waited = taken
                mine = threading.get_ident() == thread
                _records.append((waited, time.perf_counter() - at,
                                 time.thread_time() - cpu if mine else -1.0))
                if len(_records) >= 200:
                    flush()
            return
        start = time.perf_counter()
        fcntl.flock(fd, operation)
        now = time.perf_counter()
        _taken[fd] = (now, time.thread_time(), threading.get_ident(), now - start)


def post_fork(server: Any, worker: Any) -> None:
    """gunicorn hook (worker): trace this worker's turns."""
    from queuelog.server.store import turns
    turns.fcntl = _TracedFcntl()  # type: ignore[assignment]


def worker_exit(server: Any, worker: Any) -> None:
    """gunicorn hook (worker, at its end): write what is left."""
    flush()


def flush() -> None:
    """Append the records to this worker's file."""
    if _records:
        path = os.path.join(os.environ[VARIABLE], f"turns-{os.getpid()}.txt")
        with open(path, "a") as fh:
            fh.writelines(f"{w:.7f} {h:.7f} {c:.7f}\n" for w, h, c in _records)
        _records.clear()


"""Wake-ups across processes and app servers: every process hears what makes a job claimable,
and the finish of a job a request waits for (``GET /jobs/{id}?wait=``; the same path,
kind ``finished``, rung only when the job was watched).

The store's verbs call ``Notifier.notify(conn)`` (store/notifier.py) in the transaction that makes a job
claimable (enqueue, fail back to pending, retry, bulk retry, resume, a lease taken back;
flow control adds a freed slot and a refilled rate the same way). At commit:

- this process's long polls are woken at once (the store's ``claimable`` hook rings the bell);
- every other process hears it through its one listener (PostgreSQL: ``LISTEN``, which
  reaches every app server on the database; SQLite: a datagram socket per process beside
  the database file, which reaches every process on the machine), and rings its bell.

The listener is started lazily, by the first claim that may wait in each process, so a
gunicorn master that built the app before forking (``--preload``) passes no thread and no
connection on to its workers: each worker, a new pid, starts its own.
"""
from __future__ import annotations

import os
import threading
from typing import Any

from flask import Flask

from queuelog.server.store.listen import CLAIMABLE, FINISHED


class Wakeups:
    """This process's listener, started once per pid."""

    def __init__(self, store: Any, polls: Any) -> None:
        self.store = store
        self.polls = polls
        self.listener: Any = None
        self._pid: int | None = None
        self._lock = threading.Lock()

    def ensure_listening(self) -> None:
        """Start this process's listener unless it runs (a forked child starts its own)."""
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            self.listener = self.store.listen({CLAIMABLE: self.polls.bell.ring,
                                               FINISHED: self.polls.finished.ring})
            self._pid = os.getpid()


def init_app(app: Flask) -> Wakeups:
    """Ring the app's long-poll bell on every claimable commit, here and elsewhere."""
    store = app.extensions["queuelog.store"]
    polls = app.extensions["queuelog.longpoll"]
    store.hook(claimable=polls.bell.ring, finished=polls.finished.ring)
    wakeups = Wakeups(store, polls)
    polls.before_wait = wakeups.ensure_listening
    app.extensions["queuelog.wakeups"] = wakeups
    return wakeups

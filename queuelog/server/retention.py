"""Automatic retention: purge old finished jobs a little at a time, piggy-backed on requests.

Off by default. ``RETENTION_COMPLETED``, ``RETENTION_FAILED`` and ``RETENTION_CANCELLED`` are
durations (``"7d"``, ``"12h"``, ``"30min"``, or seconds; ``m`` alone is refused: minutes or
months?); a finished job older than its status's duration is deleted with its history. At
most once per ``RETENTION_INTERVAL_SECONDS`` per process, after the response to a request in
which the store created or finished jobs (enqueue, complete, fail, cancel: single or batch,
whatever the route) has been sent, one batch of at most ``RETENTION_BATCH`` jobs per status
is deleted. The store says when (the store's ``jobs_written`` hook, called by every verb that creates or finishes jobs), so a new route cannot be missed
the way a list of endpoint names once missed the batch routes.

The same round folds the job counts' deltas (PostgreSQL's triggers append one row per
statement to ``job_count_deltas``; reading the counts folds them too, but a database whose
counts nobody reads, no scraper and no dashboard, would otherwise grow that table for ever).
So on PostgreSQL the round runs whether or not a retention duration is set.

It also deletes the per-minute rollup's minutes past their two hours (``store/minutes.py``;
each purge does it in its last transaction, so a round with no duration set does it
alone). Those rows grow with every minute in which attempts ended, on both backends, so
the round runs on SQLite too, whether or not a duration is set: one small DELETE per
interval, after a write.

Why after a response rather than in a daemon thread: gunicorn forks workers (a thread
started before the fork is gone), an idle process would keep waking to compete for
SQLite's write lock for nothing, and tests could not drive a thread with the fake clock.
Riding on writes costs nothing while the queue is idle, grows with the traffic that
creates the rows, and never touches the claim path, whose latency is what workers feel.
"""
from __future__ import annotations

import logging
import re
import threading
from typing import Any

from flask import Flask, Response, g, has_request_context

from queuelog.server.config import DEFAULTS as CONFIG_DEFAULTS
from queuelog.model.problems import ConfigError
from queuelog.server.config import require_number
from queuelog.server.errors import is_unavailable
from queuelog.model.jobs import Status
from queuelog.server.store import Store

log = logging.getLogger(__name__)

_DURATION = re.compile(r"^(\d{1,9})([a-z]*)$")
_UNIT_SECONDS = {"": 1, "s": 1, "min": 60, "h": 3600, "d": 86_400, "w": 604_800}
# "1m" once meant one minute here, to the loss of whoever meant a month: refused, by name.
_AMBIGUOUS = {"m", "mo", "mon", "month", "months"}
# The longest duration taken: 999999999w is 19 million years, and its cutoff in microseconds
# before now no longer fits a 64-bit integer (SQLite's OverflowError, PostgreSQL's "bigint out
# of range": a traceback from purge). Ten thousand years keeps every cutoff well inside.
MAX_DURATION_SECONDS = 10_000 * 365 * 86_400
RULES = {"RETENTION_COMPLETED": Status.COMPLETED, "RETENTION_FAILED": Status.FAILED,
         "RETENTION_CANCELLED": Status.CANCELLED}
# The retention settings (their defaults live in config.py, with every other default).
DEFAULTS: dict[str, Any] = {k: v for k, v in CONFIG_DEFAULTS.items() if k.startswith("RETENTION_")}
_DUE = "queuelog_retention_due"  # flask.g: this request created or finished jobs


def parse_duration(value: str | int | float) -> int:
    """``30s``, ``15min``, ``12h``, ``7d``, ``2w`` or a number of seconds, as whole seconds.

    ``m`` alone is refused (minutes or months?), with a message that asks which.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, (int, float)):
        if value < 0 or value != value or value == float("inf"):
            raise ValueError(f"{value!r} is not a duration")
        return _at_most_max(value, int(value))
    match = _DURATION.match(str(value).strip())
    if match and match.group(2) in _AMBIGUOUS:
        n = match.group(1)
        raise ValueError(f"{value!r} is ambiguous (minutes or months?): write {n}min for "
                         f"minutes, or days or weeks (30d, 4w) for months")
    if not match or match.group(2) not in _UNIT_SECONDS:
        raise ValueError(f"{value!r} is not a duration like 30s, 15min, 12h, 7d, 2w or 3600 "
                         f"(units: s, min, h, d, w)")
    return _at_most_max(value, int(match.group(1)) * _UNIT_SECONDS[match.group(2)])


def _at_most_max(value: object, seconds: int) -> int:
    """``seconds``, or ValueError when over ``MAX_DURATION_SECONDS``."""
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"{value!r} is longer than 10000 years, the longest duration taken")
    return seconds


class Retention:
    """Runs one bounded purge round per interval, in whichever thread asks first."""

    def __init__(self, store: Store, rules: dict[Status, int], *, interval: float,
                 batch: int) -> None:
        self.store = store
        self.rules = rules  # status -> keep this many seconds after finishing
        self.interval_us = int(interval * 1_000_000)
        self.batch = batch
        self.folds = store.keeps_count_deltas  # the round also folds the count deltas
        self._lock = threading.Lock()
        self._last: int | None = None

    def maybe_run(self) -> int:
        """Purge one batch per status, fold the count deltas, prune the rollup's old minutes,
        once per interval; jobs deleted."""
        now = self.store.clock()
        # A clock that went backwards (now < last) counts as due, not as "wait an age".
        if self._last is not None and self._last <= now < self._last + self.interval_us:
            return 0
        if not self._lock.acquire(blocking=False):
            return 0  # another thread of this process is on it
        try:
            self._last = now
            deleted = 0
            for status, seconds in self.rules.items():
                # Audited like a purge from the command line, as actor "retention".
                deleted += self.store.purge(seconds * 1_000_000, [status],
                                            batch=self.batch, max_batches=1,
                                            actor="retention")
            if deleted:
                log.info("retention: deleted %d finished job(s)", deleted)
            if not self.rules:  # else each purge above pruned in its transaction
                self.store.prune_minutes()
            if self.folds:
                self.store.fold_counts()
            return deleted
        except Exception as exc:  # retention must never break the request it rides on
            if is_unavailable(exc):  # an outage is logged once by errors.py, not per interval
                log.warning("retention: the database is unavailable; will try again")
            else:
                log.exception("retention: purge failed; will try again next interval")
            return 0
        finally:
            self._lock.release()


def from_config(store: Store, config: Any) -> Retention:
    """Build from config; raise ConfigError at start-up on a bad duration or batch."""
    rules: dict[Status, int] = {}
    for key, status in RULES.items():
        raw = config.get(key)
        if raw is None or raw == "":
            continue
        rules[status] = _duration(key, raw)
    interval = _duration("RETENTION_INTERVAL_SECONDS", config.get("RETENTION_INTERVAL_SECONDS", 60))
    batch = config.get("RETENTION_BATCH", 500)
    require_number("RETENTION_BATCH", batch, 1, 100_000)
    return Retention(store, rules, interval=interval, batch=batch)


def _duration(key: str, raw: Any) -> int:
    try:
        seconds = parse_duration(raw)
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    if seconds < 1:
        raise ConfigError(f"{key} must be at least one second, not {raw!r}")
    return seconds


def init_app(app: Flask) -> Retention:
    """Set up retention for ``app``; run it after responses to requests that wrote jobs."""
    for key, value in DEFAULTS.items():
        app.config.setdefault(key, value)
    store: Store = app.extensions["queuelog.store"]
    retention = from_config(store, app.config)
    app.extensions["queuelog.retention"] = retention
    # Always: a round has the rollup's old minutes to prune, if nothing else. Never the
    # claim (it does not call the hook), whose latency workers feel.
    store.hook(jobs_written=_mark_due)

    @app.after_request
    def _schedule(response: Response) -> Response:
        if g.pop(_DUE, False) and response.status_code < 400:
            # After the body is sent: the client never waits for the purge.
            response.call_on_close(retention.maybe_run)
        return response
    return retention


def _mark_due() -> None:
    """The store created or finished jobs: purge after this request's response."""
    if has_request_context():  # the CLI's purge and tests call the store outside requests
        setattr(g, _DUE, True)

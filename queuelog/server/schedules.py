"""Recurring jobs: ``SCHEDULES`` parsed once, and one ticker thread per server process.

Every process of every app server runs a ticker; none is a leader. When a tick comes due
each ticker tries to make its job, and the database's (schedule, tick) key lets exactly one
commit it (store/schedules.py). So a tick is made as long as any server runs, with no
request coming in, and no election can split.

The thread starts with a serving app (``create_app()`` under gunicorn runs in each worker,
after the fork; ``queuelog run``); a process forked from one that ticks (gunicorn
``--preload``) starts its own, as threads do not survive a fork. Tests drive
``Ticker.tick_once`` with the fake clock instead. A tick later than ``LATE_SECONDS`` (a
database outage, a stalled process) is skipped, as is every tick while no server ran;
``catch_up`` makes the most recent missed one, once.
"""
from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import os
import threading
from typing import Any, Mapping

from flask import Flask, current_app

from queuelog.model.jobs import Job, Priority
from queuelog.server import actions
from queuelog.server.cron import Cron, parse
from queuelog.server.errors import is_unavailable, one_line
from queuelog.server.store import NewJob, Store

log = logging.getLogger(__name__)

LATE_SECONDS = 10       # a tick found later than this was missed (only catch_up makes it)
MAX_SLEEP = 1.0         # the ticker looks at least this often (a pause, a stop)
MIN_SLEEP = 0.01
PRODUCER_PREFIX = "schedule:"


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One entry of ``SCHEDULES``, checked (config.check_schedules) and parsed."""

    name: str
    cron_text: str
    timezone: str
    cron: Cron
    type: str
    payload_json: str
    priority: int
    max_retries: int
    catch_up: bool

    def new_job(self) -> NewJob:
        """The job each tick (and each run now) makes."""
        return NewJob(producer=PRODUCER_PREFIX + self.name, type=self.type,
                      payload_json=self.payload_json, priority=self.priority,
                      max_retries=self.max_retries)


def from_config(config: Mapping[str, Any]) -> dict[str, Schedule]:
    """The schedules of an app's (already checked) config, by name."""
    out = {}
    for name, opts in config["SCHEDULES"].items():
        zone = opts.get("timezone", "UTC")
        options = config["JOB_TYPES"][opts["type"]]
        out[name] = Schedule(
            name=name, cron_text=opts["cron"], timezone=zone, cron=parse(opts["cron"], zone),
            type=opts["type"], payload_json=json.dumps(opts.get("payload") or {},
                                                       separators=(",", ":")),
            priority=int(Priority.from_label(opts.get("priority") or "low")),
            max_retries=int(opts["max_retries"] if opts.get("max_retries") is not None
                            else options.get("max_retries", config["DEFAULT_MAX_RETRIES"])),
            catch_up=bool(opts.get("catch_up", False)))
    return out


class Ticker:
    """Makes each schedule's due ticks; ``tick_once`` is one look, ``start`` the thread."""

    def __init__(self, app: Flask, schedules: Mapping[str, Schedule]) -> None:
        self.app = app
        self.schedules = dict(schedules)
        self.store: Store = app.extensions["queuelog.store"]
        self._seen: dict[str, int] = {}        # ticks up to here are handled, per schedule
        self._catch_up = {n for n, s in schedules.items() if s.catch_up}  # not yet done
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: str | None = None       # the error being logged once, until it clears

    def tick_once(self) -> list[Job]:
        """Make every tick due now that no server has made; return the jobs made here."""
        now = self.store.clock()
        if not self._seen:
            self._seen = {name: now for name in self.schedules}
        made: list[Job] = []
        with self.app.app_context():
            for name, schedule in self.schedules.items():
                for tick in self._due(name, schedule, now):
                    job = actions.schedule_tick(actions.system(f"schedule:{name}"), name, tick,
                                                    schedule.new_job())
                    if job is not None:
                        made.append(job)
                self._seen[name] = now  # only once its ticks are written: a failure retries
        return made

    def _due(self, name: str, schedule: Schedule, now: int) -> list[int]:
        """The ticks to make now: those since the last look that are not yet late."""
        seen, cron = self._seen[name], schedule.cron
        if name in self._catch_up:
            # First look in this process: the newest tick before it, unless one was made.
            newest = cron.latest_at_or_before(now)
            made = self.store.last_ticks(handled=True).get(name)  # a pause's skip counts
            self._catch_up.discard(name)
            if made is None or newest > made:
                seen = min(seen, newest - 1)
        late = now - LATE_SECONDS * 1_000_000
        due: list[int] = []
        missed = cron.latest_at_or_before(late) if seen < late else None
        tick = cron.next_after(max(seen, late))
        while tick is not None and tick <= now:
            due.append(tick)
            tick = cron.next_after(tick)
        if not due and schedule.catch_up and missed is not None and missed > seen:
            due.append(missed)  # one job for what was missed, never a burst
        return due

    def next_due_in(self) -> float:
        """Seconds until the soonest next tick, within [MIN_SLEEP, MAX_SLEEP]."""
        now = self.store.clock()
        soonest = [t for s in self.schedules.values()
                   for t in [s.cron.next_after(self._seen.get(s.name, now))] if t is not None]
        wait = (min(soonest) - now) / 1_000_000 if soonest else MAX_SLEEP
        return min(MAX_SLEEP, max(MIN_SLEEP, wait))

    def run(self) -> None:
        """The thread: look, sleep until the next tick (at most a second); never die."""
        while not self._stop.is_set():
            try:
                self.tick_once()
                if self._failing is not None:
                    log.warning("schedules: making ticks again")
                    self._failing = None
            except Exception as exc:  # noqa: BLE001 - logged; the thread must go on
                self._failed(exc)
            try:
                wait = self.next_due_in()
            except Exception:  # noqa: BLE001 - a clock or cron error: look again in a second
                wait = MAX_SLEEP
            self._stop.wait(wait)

    def _failed(self, exc: Exception) -> None:
        """Log an error once while it lasts (an outage is not a traceback per tick)."""
        what = "unavailable" if is_unavailable(exc) else one_line(exc)
        if what == self._failing:
            return
        self._failing = what
        if what == "unavailable":
            log.warning("schedules: the database is unavailable; ticks wait (a tick more "
                        "than %d s late is skipped)", LATE_SECONDS)
        else:
            log.exception("schedules: could not make a tick; trying again")

    def start(self) -> None:
        """Start the thread in this process (once)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="queuelog-schedules", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and wait for it a little."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _after_fork(self) -> None:
        # The parent's thread is gone in the child; its _seen stays true for the child.
        self._thread = None
        self._stop = threading.Event()
        self.start()


def init_app(app: Flask) -> Ticker:
    """Parse ``SCHEDULES`` and give the app its ticker (not started: ``start``)."""
    ticker = Ticker(app, from_config(app.config))
    app.extensions["queuelog.schedules"] = ticker
    return ticker


def start(app: Flask) -> None:
    """Start ticking in this process and in any forked from it, if there are schedules."""
    ticker: Ticker = app.extensions["queuelog.schedules"]
    if not ticker.schedules or app.testing:
        return
    ticker.start()
    os.register_at_fork(after_in_child=ticker._after_fork)
    atexit.register(ticker.stop)


def defined() -> dict[str, Schedule]:
    """The current app's schedules, by name."""
    ticker: Ticker = current_app.extensions["queuelog.schedules"]
    return ticker.schedules

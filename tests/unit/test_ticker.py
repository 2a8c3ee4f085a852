"""Schedules in the store and the ticker, on both backends, driven by the fake clock.

Each "server" here is a Ticker: the thread's body (``tick_once``) without the thread, so
the fake clock decides what is due. Two apps on one database are two servers.
"""
from __future__ import annotations

import datetime as dt
import threading
from typing import Any, Iterator

import pytest

from queuelog import create_app
from queuelog.model.jobs import from_datetime, isoformat
from queuelog.server.schedules import Ticker, from_config
from queuelog.server.store import Store

UTC = dt.timezone.utc
SECOND = 1_000_000


def us(*parts: int) -> int:
    """Epoch microseconds of a UTC wall time."""
    return from_datetime(dt.datetime(*parts, tzinfo=UTC))


@pytest.fixture
def config() -> dict[str, Any]:
    """An every-second schedule, a quarter-hourly one in Berlin, one that catches up."""
    return {"SCHEDULES": {
        "tick": {"cron": "* * * * * *", "type": "email", "payload": {"n": 1}},
        "berlin": {"cron": "*/15 * * * *", "type": "pdf", "timezone": "Europe/Berlin"},
        "nightly": {"cron": "0 3 * * *", "type": "sync", "timezone": "Europe/Berlin",
                    "catch_up": True, "priority": "high", "max_retries": 7},
    }}


def ticker(app: Any, *names: str) -> Ticker:
    """A fresh ticker for ``app`` (its ``names``, default all): a server just started."""
    found = from_config(app.config)
    return Ticker(app, {n: s for n, s in found.items() if not names or n in names})


def scheduled(store: Store, name: str) -> list[str]:
    """The ticks of ``name``'s jobs, oldest first."""
    page = store.list_jobs(schedule=name, limit=200)
    return [isoformat(j.scheduled_for) for j in reversed(page.jobs)]  # type: ignore[misc]


@pytest.fixture
def second_app(app: Any, db_url: str, clock: Any) -> Iterator[Any]:
    """Another app server on the same database and clock."""
    other = create_app({"TESTING": True, "DATABASE_URL": db_url, "SECRET_KEY": "x",
                        "BOOTSTRAP_ADMIN": False, **{"SCHEDULES": app.config["SCHEDULES"]}})
    other.extensions["queuelog.store"].clock = clock
    yield other
    other.extensions["queuelog.store"].close()


def test_a_tick_makes_one_job_with_the_schedules_fields(app, store, clock):
    t = ticker(app, "tick")
    clock.now = us(2026, 5, 1, 12, 0, 0, 400_000)
    assert t.tick_once() == []  # just started: nothing is due yet
    clock.now += SECOND
    (job,) = t.tick_once()
    assert (job.schedule, job.producer, job.type, job.payload) == (
        "tick", "schedule:tick", "email", {"n": 1})
    assert job.scheduled_for == job.run_at == us(2026, 5, 1, 12, 0, 1)
    assert job.to_dict(show_error=False, show_key=False)["scheduled_for"] == \
        "2026-05-01T12:00:01.000000Z"


def test_two_servers_racing_for_the_same_ticks_make_one_job_each(app, second_app, store,
                                                                 clock):
    a, b = ticker(app, "tick"), ticker(second_app, "tick")
    clock.now = us(2026, 5, 1, 12)
    a.tick_once(), b.tick_once()
    made = 0
    for _ in range(5):
        clock.now += SECOND
        made += len(b.tick_once()) + len(a.tick_once())
    assert made == 5
    assert scheduled(store, "tick") == [isoformat(us(2026, 5, 1, 12, 0, s)) for s in range(1, 6)]


def test_threads_racing_on_one_tick_commit_exactly_one(app, second_app, store):
    new = from_config(app.config)["tick"].new_job()
    stores = [app.extensions["queuelog.store"], second_app.extensions["queuelog.store"]] * 4
    got: list[Any] = []
    start = threading.Barrier(len(stores))

    def race(s: Store) -> None:
        start.wait()
        got.append(s.make_tick("tick", us(2026, 5, 1, 12), new))
    threads = [threading.Thread(target=race, args=(s,)) for s in stores]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert len(got) == 8 and sum(j is not None for j in got) == 1
    assert scheduled(store, "tick") == [isoformat(us(2026, 5, 1, 12))]


def test_berlin_dst_days_fire_each_wall_time_once(app, store, clock):
    """A quarter-hourly schedule through both of 2026's changes, one look a minute."""
    for start, end, wanted in [
        # Spring (03-29): 02:00-02:45 CET never happen; one tick at 03:00 CEST for them.
        (us(2026, 3, 28, 23, 50), us(2026, 3, 29, 1, 35),
         ["00:00", "00:15", "00:30", "00:45", "01:00", "01:15", "01:30"]),
        # Autumn (10-25): 02:00-02:45 happen twice; they fire the first time only.
        (us(2026, 10, 24, 23, 50), us(2026, 10, 25, 2, 35),
         ["00:00", "00:15", "00:30", "00:45", "02:00", "02:15", "02:30"]),
    ]:
        clock.now = start
        t = ticker(app, "berlin")
        t.tick_once()
        while clock.now < end:
            clock.now += 60 * SECOND
            t.tick_once()
        day = isoformat(start + 3600 * SECOND)[:10]  # type: ignore[index]
        got = [s for s in scheduled(store, "berlin") if s.startswith(day)]
        assert got == [f"{day}T{hm}:00.000000Z" for hm in wanted]


def test_a_pause_skips_its_ticks_and_a_resume_does_not_make_them_up(app, store, clock):
    t = ticker(app, "tick")
    clock.now = us(2026, 5, 1, 12)
    t.tick_once()
    store.set_schedule_paused("tick", True, "ann")
    for _ in range(3):
        clock.now += SECOND
        assert t.tick_once() == []
    store.set_schedule_paused("tick", False, "ann")
    clock.now += SECOND
    assert [j.scheduled_for for j in t.tick_once()] == [us(2026, 5, 1, 12, 0, 4)]
    assert scheduled(store, "tick") == [isoformat(us(2026, 5, 1, 12, 0, 4))]


def test_a_server_down_over_ticks_makes_none_of_them(app, store, clock):
    t = ticker(app, "tick")
    clock.now = us(2026, 5, 1, 12)
    t.tick_once()
    clock.now += SECOND
    assert len(t.tick_once()) == 1
    clock.now += 3 * SECOND + SECOND // 2   # down over 12:00:02, :03 and :04
    restarted = ticker(app, "tick")
    assert restarted.tick_once() == []
    clock.now += SECOND // 2
    assert [j.scheduled_for for j in restarted.tick_once()] == [us(2026, 5, 1, 12, 0, 5)]


def test_catch_up_makes_the_most_recent_missed_tick_once(app, second_app, store, clock):
    # Nightly at 03:00 Berlin (01:00 UTC in May); no server ran over three nights.
    clock.now = us(2026, 5, 4, 9)
    (job,) = ticker(app, "nightly").tick_once()
    assert job.scheduled_for == job.run_at == us(2026, 5, 4, 1)
    assert (job.priority, job.max_retries) == (20, 7)
    # Another server starting now, or this one again, does not make it a second time.
    assert ticker(second_app, "nightly").tick_once() == []
    assert scheduled(store, "nightly") == [isoformat(us(2026, 5, 4, 1))]


def test_a_catch_up_tick_that_fell_in_a_pause_is_not_made_by_a_server_starting_later(
        app, second_app, store, clock):
    """catch_up makes up a tick missed while no server ran, not one a pause skipped: a
    server (or a gunicorn worker) starting after the resume made the paused night's job,
    hours late, as if no server had been running."""
    clock.now = us(2026, 5, 3, 9)
    ticker(app, "nightly").tick_once()                  # the night of May 3rd: made
    running = ticker(app, "nightly")
    running.tick_once()
    store.set_schedule_paused("nightly", True, "ann")
    clock.now = us(2026, 5, 4, 0, 59, 59)
    running.tick_once()
    clock.now = us(2026, 5, 4, 1, 0, 1)                 # 03:00 Berlin: in the pause
    assert running.tick_once() == []
    clock.now = us(2026, 5, 4, 8)
    store.set_schedule_paused("nightly", False, "ann")
    running.tick_once()
    clock.now = us(2026, 5, 4, 9)
    assert ticker(second_app, "nightly").tick_once() == []
    assert scheduled(store, "nightly") == [isoformat(us(2026, 5, 3, 1))]
    assert store.last_ticks() == {"nightly": us(2026, 5, 3, 1)}  # the metric: a job's tick
    clock.now = us(2026, 5, 5, 1, 0, 1)                 # the next night is made as ever
    assert [j.scheduled_for for j in running.tick_once()] == [us(2026, 5, 5, 1)]


def test_a_late_look_makes_recent_ticks_but_not_a_burst(app, store, clock):
    t = ticker(app, "tick")
    clock.now = us(2026, 5, 1, 12)
    t.tick_once()
    clock.now += 3 * SECOND  # a slow look: the ticks in between are still made
    assert len(t.tick_once()) == 3
    clock.now += 3600 * SECOND  # an hour without a look (an outage): only the last seconds
    assert len(t.tick_once()) <= 10


def test_tick_rows_are_pruned_behind_the_newest(app, store):
    new = from_config(app.config)["tick"].new_job()
    for tick in (us(2026, 5, 1, 10), us(2026, 5, 1, 10, 30), us(2026, 5, 1, 12)):
        assert store.make_tick("tick", tick, new) is not None
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT tick FROM schedule_ticks ORDER BY tick").all()
    assert [r[0] for r in rows] == [us(2026, 5, 1, 12)]
    assert store.last_ticks() == {"tick": us(2026, 5, 1, 12)}


def test_tick_rows_a_pause_skipped_are_pruned_too(app, store):
    """A skipped tick keeps a row (catch_up must not make it later), pruned behind the
    newest as a made one is: a paused every-second schedule does not grow the table."""
    new = from_config(app.config)["tick"].new_job()
    assert store.make_tick("tick", us(2026, 5, 1, 10), new) is not None
    store.set_schedule_paused("tick", True, "ann")
    for tick in (us(2026, 5, 1, 10, 30), us(2026, 5, 1, 12)):
        assert store.make_tick("tick", tick, new) is None
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT tick FROM schedule_ticks ORDER BY tick").all()
    # The newest made tick stays (last_run_at and the metric read it), older skips go.
    assert [r[0] for r in rows] == [us(2026, 5, 1, 10), us(2026, 5, 1, 12)]
    assert store.last_ticks(handled=True) == {"tick": us(2026, 5, 1, 12)}
    assert store.last_ticks() == {"tick": us(2026, 5, 1, 10)}

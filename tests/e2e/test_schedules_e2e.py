"""Schedules across real servers: two gunicorn masters x 2 workers make one job per tick.

No request comes in while they tick (the ticker is a thread per worker process); the
database's (schedule, tick) key is the only thing that keeps the four processes apart.
Then every server stops for more than three ticks: those ticks are never made, except
the most recent one for the schedule with ``catch_up``.
"""
from __future__ import annotations

import json
import time
from typing import Any

import pytest

from server_process import Server, make_keys, table_rows

pytestmark = pytest.mark.slow

SECOND = 1_000_000
SCHEDULES = {"every": {"cron": "* * * * * *", "type": "email"},
             "caught": {"cron": "* * * * * *", "type": "email", "catch_up": True}}
RUN_TICKS = 4        # ticks made while both servers run, each raced by four processes
DOWN_FOR = 3.6       # seconds no server runs: over three ticks
LAG_BOUND = 5.0      # seconds from a tick to its job (the contract says 2: room for a busy box)
DEADLINE = 30.0      # seconds to wait for ticks on a box busy with other tests


def wait_for_ticks(db_url: str, count: int, after: int = 0) -> None:
    """Poll (no fixed sleep: a busy box boots gunicorn slowly) until ``count`` ticks of
    ``every`` later than ``after`` have jobs; fail at the deadline."""
    deadline = time.monotonic() + DEADLINE
    while len([t for t, _ in jobs_of(db_url, "every") if t > after]) < count:
        assert time.monotonic() < deadline, f"fewer than {count} ticks in {DEADLINE} s"
        time.sleep(0.2)


def jobs_of(db_url: str, name: str) -> list[tuple[int, int]]:
    """(scheduled_for, created_at) of the schedule's jobs, by tick."""
    rows = table_rows(db_url, "SELECT scheduled_for, created_at FROM jobs WHERE schedule = "
                      f"'{name}' ORDER BY scheduled_for")
    return [(int(r[0]), int(r[1])) for r in rows]


def test_four_processes_make_one_job_per_tick_and_none_while_down(db_url: str,
                                                                   tmp_path: Any) -> None:
    make_keys(db_url, {})
    env = {"QUEUELOG_SCHEDULES": json.dumps(SCHEDULES)}
    servers = [Server(db_url, str(tmp_path / f"s{i}.log"), workers=2, threads=4, env=env)
               for i in range(2)]
    try:
        for s in servers:
            s.start()
        wait_for_ticks(db_url, RUN_TICKS)
    finally:
        for s in servers:
            s.stop()
    stopped = time.time()
    up = jobs_of(db_url, "every")
    ticks = [t for t, _ in up]
    # One job per tick: no tick twice, none skipped between the first and the last.
    assert len(ticks) >= RUN_TICKS, up
    assert ticks == list(range(ticks[0], ticks[-1] + SECOND, SECOND))
    lags = [(tick - up[0][0], created - tick) for tick, created in up]  # shown if it fails
    assert max(lag for _, lag in lags) < LAG_BOUND * SECOND, lags
    assert ticks[-1] <= stopped * SECOND

    time.sleep(DOWN_FOR)
    again = Server(db_url, str(tmp_path / "again.log"), workers=2, threads=4, env=env)
    try:
        again.start()
        wait_for_ticks(db_url, 2, after=ticks[-1])
    finally:
        again.stop()
    after = [t for t, _ in jobs_of(db_url, "every") if t > ticks[-1]]
    assert after, "the restarted server made no ticks"
    # Nothing for the ticks while no server ran (more than three of them).
    assert after[0] - ticks[-1] > 3 * SECOND
    assert after == list(range(after[0], after[-1] + SECOND, SECOND))
    # catch_up: exactly one job for the missed ticks, the most recent one, then as usual.
    caught = [t for t, _ in jobs_of(db_url, "caught") if t > ticks[-1]]
    missed = [t for t in caught if t < after[0]]
    assert missed == [after[0] - SECOND]
    end = min(after[-1], caught[-1])
    assert [t for t in caught if after[0] <= t <= end] == [t for t in after if t <= end]

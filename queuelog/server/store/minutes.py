"""The last hour's ended attempts, read from the per-minute rollup (migration 0015).

Triggers on ``job_attempts`` add every attempt that ends completed, failed or lease
expired to its row of ``attempt_minutes`` (minute, type, worker) in the transaction that
ends it. GET /types, GET /workers and the dashboard's chart read the hour's rows: they cost
the types and workers that ran in it, not its attempts (269k in a busy hour).

"The last hour" is the chart's: the 60 whole minutes ending with the current one, so the
hour a page counts is the sum of the chart's bars (it starts up to a minute after
``now - 1 h``). Minutes are kept two hours, then deleted by purge and the retention round.
All times are epoch microseconds, as everywhere in the store.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, select

from queuelog.server.store.tables import attempt_minutes

MINUTE_US = 60_000_000
HOUR_MINUTES = 60
KEEP_US = 2 * HOUR_MINUTES * MINUTE_US  # the hour read, and an hour's slack for the prune

Tally = dict[str, tuple[int, int]]  # a type's or a worker's (completed, failed)

_m = attempt_minutes.c
_IN_WINDOW = (_m.minute_at >= bindparam("start"), _m.minute_at < bindparam("end"))
_DONE = (func.sum(_m.completed), func.sum(_m.failed))
BY_TYPE = select(_m.type, *_DONE).where(*_IN_WINDOW).group_by(_m.type)
BY_WORKER = select(_m.worker_id, *_DONE).where(*_IN_WINDOW).group_by(_m.worker_id)
BY_MINUTE = select(_m.minute_at, *_DONE).where(*_IN_WINDOW).group_by(_m.minute_at)
PRUNE = delete(attempt_minutes).where(_m.minute_at < bindparam("before"))


def window(now: int, minutes: int = HOUR_MINUTES) -> tuple[int, int]:
    """The first microsecond of the ``minutes`` whole minutes that end with the current
    one, and the first after them."""
    end = (now // MINUTE_US + 1) * MINUTE_US
    return end - minutes * MINUTE_US, end


def _tally(conn: Connection, statement: Any, now: int) -> Tally:
    """(completed, failed) by the statement's first column, over the last hour."""
    start, end = window(now)
    return {key: (int(done), int(failed))
            for key, done, failed in conn.execute(statement, {"start": start, "end": end})}


def per_type(conn: Connection, now: int) -> Tally:
    """Each type's attempts ended in the last hour: (completed, failed)."""
    return _tally(conn, BY_TYPE, now)


def per_worker(conn: Connection, now: int) -> Tally:
    """Each worker name's attempts ended in the last hour: (completed, failed)."""
    return _tally(conn, BY_WORKER, now)


def per_minute(conn: Connection, start: int, end: int) -> dict[int, tuple[int, int]]:
    """(completed, failed) by minute (its first microsecond), ``start`` <= minute < ``end``."""
    return {int(at): (int(done), int(failed))
            for at, done, failed in conn.execute(BY_MINUTE, {"start": start, "end": end})}


def prune(conn: Connection, now: int) -> int:
    """Delete the minutes older than ``KEEP_US``; how many rows went."""
    return conn.execute(PRUNE, {"before": now - KEEP_US}).rowcount or 0

"""Enqueue: a producer's new jobs, one or a batch, idempotent by (producer, key).

The statements are declared once, as Core, at import; each store compiles them for its own
database (``_prepare_enqueue``), where the dialect's differ: the INSERT's wake-up and the
batch's multi-row INSERT.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from sqlalchemy import Connection, Engine, bindparam, insert, select
from sqlalchemy.exc import IntegrityError

from queuelog.model.jobs import Job, Status
from queuelog.model.problems import Conflict, IdempotencyMismatch
from queuelog.server.store.dialect import Dialect
from queuelog.server.store.engine import Clock, to_us
from queuelog.server.store.prepared import Prepared, row_class
from queuelog.server.store.tables import jobs

_BY_KEY = select(jobs).where(jobs.c.producer == bindparam("producer"),
                             jobs.c.idempotency_key == bindparam("key"))
_BY_KEYS = select(jobs).where(jobs.c.producer == bindparam("producer"),
                              jobs.c.idempotency_key.in_(bindparam("keys", expanding=True)))
# The columns a new job's row sets (``Enqueue._values``), in order.
_NEW_COLUMNS = ("type", "payload", "priority", "status", "attempt", "retry_count",
                "max_retries", "idempotency_key", "request_hash", "producer", "run_at",
                "created_at", "updated_at")
_INSERT = insert(jobs).values({c: bindparam(c) for c in _NEW_COLUMNS}).returning(*jobs.c)
# A new job's row as ``RETURNING *`` gives it (``_rows``): every column, NULL where none
# was sent.
_COLUMNS = tuple(c.name for c in jobs.c)
_ROW = row_class(_COLUMNS)
_REST = _COLUMNS[1:]
assert _COLUMNS[0] == "id"


def _rows(ids: Sequence[int], values: Sequence[dict[str, Any]]) -> list[Any]:
    """New rows from their ids and the values sent."""
    make = _ROW._make
    return [make((job_id, *map(v.get, _REST))) for job_id, v in zip(ids, values)]


@dataclasses.dataclass(frozen=True)
class NewJob:
    """A validated enqueue request."""

    producer: str
    type: str
    payload_json: str
    priority: int
    max_retries: int
    run_at: int | None = None          # epoch microseconds, absolute
    delay_seconds: float | None = None  # relative to the store's clock
    idempotency_key: str | None = None
    request_hash: str | None = None


class Enqueue:
    """Enqueue verbs (the Queue's; it provides the writer, clock and ``on_jobs_written``)."""

    _write: Engine
    engine: Engine
    clock: Clock
    dialect: Dialect
    on_jobs_written: Callable[[], None]

    def _prepare_enqueue(self) -> None:
        """Compile the enqueue statements for this store's database (prepared.py)."""
        sa_dialect = self.engine.dialect
        self._by_key, self._by_keys, self._insert_job = (
            Prepared(q, sa_dialect)
            for q in (_BY_KEY, _BY_KEYS, self.dialect.notifying(_INSERT)))
        # A batch's rows in one statement of one shape, whatever its size. (SQLAlchemy's
        # executemany with RETURNING in parameter order ran a statement per row on SQLite:
        # measured, half of a 100-job batch's time.)
        self._insert_rows = Prepared(self.dialect.insert_rows(
            jobs, _NEW_COLUMNS, returning=("id",), notifying=True), sa_dialect)

    def _insert_new(self, conn: Connection, values: list[dict[str, Any]],
                    params: list[dict[str, Any]] | None = None) -> list[int]:
        """Insert new jobs' rows (``params``: their ``rows_params``, if made already), one
        wake-up for them all; their ids, in the order given (RETURNING has no order of its
        own; they ascend in the rows' order). Only the ids: SQLite made each returned
        row's columns in the lock (``_rows`` makes the rest)."""
        if params is None:
            params = self.dialect.rows_params(_NEW_COLUMNS, values)
        ids = sorted(row.id for p in params for row in self._insert_rows.rows(conn, p))
        self.dialect.notify(conn, told=True)
        self.on_jobs_written()
        return ids

    def enqueue(self, new: NewJob) -> tuple[Job, bool]:
        """Add a job; return it and whether it is new (False: an idempotent replay)."""
        if new.idempotency_key is None:  # one INSERT (its wake-up in it): whole by itself
            values = self._values(new, self.clock())  # made before the write's turn
            with self.dialect.one_statement(self._write) as conn:
                row = self._insert_job.rows(conn, values)[0]
                self.dialect.notify(conn, told=True)
                self.on_jobs_written()
            return Job.from_row(row), True
        for _ in range(3):
            try:
                with self._write.begin() as conn:
                    row = self._by_key.first(conn, {"producer": new.producer,
                                                    "key": new.idempotency_key})
                    if row is not None:
                        if row.request_hash != new.request_hash:
                            raise IdempotencyMismatch(
                                "This idempotency key was used for a different request.")
                        return Job.from_row(row), False
                    row = self._insert_job.rows(conn, self._values(new, self.clock()))[0]
                    self.dialect.notify(conn, told=True)
                    self.on_jobs_written()
                    return Job.from_row(row), True
            except IntegrityError:
                continue  # lost a race for (producer, key): the next round finds its row
        raise Conflict("Could not settle the idempotency key; try again.")

    def enqueue_many(self, news: Sequence[NewJob]) -> tuple[list[Job], list[int]]:
        """Add many jobs of one producer in one transaction, all or nothing, in order.

        Returns the jobs in request order and the indexes of idempotent replays. A key
        used before for a different request fails the whole batch (IdempotencyMismatch,
        its ``errors`` naming each item as ``jobs[i].idempotency_key``).
        """
        if not news:
            return [], []
        keys = [n.idempotency_key for n in news if n.idempotency_key is not None]
        if not keys:  # one INSERT (its wake-up in it): whole by itself
            # The rows made before the write's turn, which lasts for the SQL alone.
            now = self.clock()
            values = [self._values(new, now) for new in news]
            params = self.dialect.rows_params(_NEW_COLUMNS, values)
            with self.dialect.one_statement(self._write) as conn:
                ids = self._insert_new(conn, values, params)
            return [Job.from_row(r) for r in _rows(ids, values)], []
        for _ in range(5):
            try:
                with self._write.begin() as conn:
                    rows, replayed = self._enqueue_many(conn, news, keys)
                # Built after the commit: the write lock is held for the SQL alone.
                return [Job.from_row(r) for r in rows if r is not None], replayed
            except IntegrityError:
                # A racing batch (or POST /jobs) committed one of these keys first: the
                # whole transaction rolled back, and the next round replays its row.
                continue
        raise Conflict("Could not settle the idempotency keys; try again.")

    def _enqueue_many(self, conn: Connection, news: Sequence[NewJob],
                      keys: list[str]) -> tuple[list[Any], list[int]]:
        """A batch with idempotency keys: its replays found, the rest inserted."""
        found = {r.idempotency_key: r for r in self._by_keys.rows(
            conn, {"producer": news[0].producer, "keys": keys})}
        now = self.clock()
        out: list[Any] = [None] * len(news)  # each item's row, new or replayed
        replayed: list[int] = []
        mismatched: list[dict[str, str]] = []
        fresh: list[int] = []
        for i, new in enumerate(news):
            row = found.get(new.idempotency_key) if new.idempotency_key is not None else None
            if row is None:
                fresh.append(i)
            elif row.request_hash != new.request_hash:
                mismatched.append({"field": f"jobs[{i}].idempotency_key", "detail":
                                   "This idempotency key was used for a different request."})
            else:
                out[i] = row
                replayed.append(i)
        if mismatched:
            raise IdempotencyMismatch("; ".join(e["field"] for e in mismatched) + ": used "
                                      "before for a different request.", errors=mismatched)
        if fresh:
            values = [self._values(news[i], now) for i in fresh]
            for i, row in zip(fresh, _rows(self._insert_new(conn, values), values)):
                out[i] = row
        return out, replayed

    def _values(self, new: NewJob, now: int) -> dict[str, Any]:
        """The row of a new job. A run_at in the past is now: no jumping the queue by
        backdating (the claim orders by run_at)."""
        run_at = max(new.run_at, now) if new.run_at is not None else (
            now + to_us(new.delay_seconds or 0))
        return {"type": new.type, "payload": new.payload_json, "priority": new.priority,
                "status": Status.PENDING.value, "attempt": 0, "retry_count": 0,
                "max_retries": new.max_retries, "idempotency_key": new.idempotency_key,
                "request_hash": new.request_hash, "producer": new.producer,
                "run_at": run_at, "created_at": now, "updated_at": now}

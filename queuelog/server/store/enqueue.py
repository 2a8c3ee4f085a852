"""Enqueue: a producer's new jobs, one or a batch, idempotent by (producer, key).

The statements are declared once, at import; each store compiles them for its database,
with its backend's multi-row INSERT and its notifier's wake-up.
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Sequence

from sqlalchemy import Connection, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from queuelog.model import jsontext
from queuelog.model.jobs import Job, Status
from queuelog.model.problems import Conflict, IdempotencyMismatch, ValidationFailed
from queuelog.server.store.engine import to_us
from queuelog.server.store.flows import Flows, verdict
from queuelog.server.store.reads import Scope
from queuelog.server.store.prepared import Prepared, row_class
from queuelog.server.store.part import Context, Part
from queuelog.server.store.tables import jobs

_BY_KEY = select(jobs).where(jobs.c.producer == bindparam("producer"),
                             jobs.c.idempotency_key == bindparam("key"))
_BY_KEYS = select(jobs).where(jobs.c.producer == bindparam("producer"),
                              jobs.c.idempotency_key.in_(bindparam("keys", expanding=True)))
# The columns a new job's row sets (``Enqueue._values``), in order.
_NEW_COLUMNS = ("type", "payload", "priority", "status", "attempt", "retry_count",
                "max_retries", "idempotency_key", "request_hash", "producer", "run_at",
                "created_at", "updated_at", "traceparent", "tracestate")
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
    # Workflows: parents (job ids, or ``Item(n)``: an earlier item of the same batch), what
    # a parent's failure does (None: "cancel"), and whose jobs may be parents (the caller's
    # read scope; None: any).
    depends_on: tuple[Any, ...] = ()
    on_parent_failure: str | None = None
    parents_scope: Scope | None = None
    # W3C trace context from the request's headers, checked (model.tracecontext).
    traceparent: str | None = None
    tracestate: str | None = None


class Item(NamedTuple):
    """A parent named by its index in the same batch (``{"item": N}``)."""

    n: int


class Enqueue(Part):
    """Enqueue verbs: a producer's new jobs, one or a batch."""

    def __init__(self, ctx: Context, flows: Flows) -> None:
        super().__init__(ctx)
        self.flows = flows
        sa_dialect = self.engine.dialect
        self._by_key, self._by_keys, self._insert_job, self._insert_linked_row = (
            Prepared(q, sa_dialect)
            for q in (_BY_KEY, _BY_KEYS, self.notifier.notifying(_INSERT), _INSERT_LINKED))
        self._mark = {own: Prepared(q, sa_dialect) for own, q in _MARK.items()}
        # A batch's rows in one statement of one shape, whatever its size. (SQLAlchemy's
        # executemany with RETURNING in parameter order runs a statement per row on SQLite,
        # which would dominate a batch's time.)
        self._insert_rows = Prepared(self.backend.insert_rows(
            jobs, _NEW_COLUMNS, returning=("id",), notifying=True), sa_dialect)

    def _insert_new(self, conn: Connection, values: list[dict[str, Any]],
                    params: list[dict[str, Any]] | None = None) -> list[int]:
        """Insert new jobs' rows (``params``: their ``rows_params``, if made already), one
        wake-up for them all; their ids, in the order given (RETURNING has no order of its
        own; they ascend in the rows' order). Only the ids: SQLite made each returned
        row's columns in the lock (``_rows`` makes the rest)."""
        if params is None:
            params = self.backend.rows_params(_NEW_COLUMNS, values)
        ids = sorted(row.id for p in params for row in self._insert_rows.rows(conn, p))
        self.notifier.notify(conn, told=True)
        self.on_jobs_written()
        return ids

    def enqueue(self, new: NewJob) -> tuple[Job, bool]:
        """Add a job; return it and whether it is new (False: an idempotent replay)."""
        if new.depends_on:
            jobs_, replayed = self.enqueue_many([new], batch=False)
            return jobs_[0], not replayed
        if new.idempotency_key is None:  # one INSERT (its wake-up in it): whole by itself
            values = new_row(new, self.clock())  # made before the write's turn
            with self.backend.one_statement(self._write) as conn:
                row = self._insert_job.rows(conn, values)[0]
                self.notifier.notify(conn, told=True)
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
                    row = self._insert_job.rows(conn, new_row(new, self.clock()))[0]
                    self.notifier.notify(conn, told=True)
                    self.on_jobs_written()
                    return Job.from_row(row), True
            except IntegrityError:
                continue  # lost a race for (producer, key): the next round finds its row
        raise Conflict("Could not settle the idempotency key; try again.")

    def enqueue_many(self, news: Sequence[NewJob], *,
                     batch: bool = True) -> tuple[list[Job], list[int]]:
        """Add many jobs of one producer in one transaction, all or nothing, in order.

        Returns the jobs in request order and the indexes of idempotent replays. A key
        used before for a different request fails the whole batch (IdempotencyMismatch,
        its ``errors`` naming each item as ``jobs[i].idempotency_key``). ``batch``: a
        field is named as a batch's (``jobs[i].depends_on[k]``), else as a single job's.
        """
        if not news:
            return [], []
        keys = [n.idempotency_key for n in news if n.idempotency_key is not None]
        linked = any(n.depends_on for n in news)
        if not keys and not linked:  # one INSERT (its wake-up in it): whole by itself
            # The rows made before the write's turn, which lasts for the SQL alone.
            now = self.clock()
            values = [new_row(new, now) for new in news]
            params = self.backend.rows_params(_NEW_COLUMNS, values)
            with self.backend.one_statement(self._write) as conn:
                ids = self._insert_new(conn, values, params)
            return [Job.from_row(r) for r in _rows(ids, values)], []
        for _ in range(5):
            try:
                with self._write.begin() as conn:
                    rows, replayed = self._enqueue_many(conn, news, keys, batch)
                # Built after the commit: the write lock is held for the SQL alone.
                return [Job.from_row(r) for r in rows if r is not None], replayed
            except IntegrityError:
                # A racing batch (or POST /jobs) committed one of these keys first: the
                # whole transaction rolled back, and the next round replays its row.
                continue
        raise Conflict("Could not settle the idempotency keys; try again.")

    def _enqueue_many(self, conn: Connection, news: Sequence[NewJob], keys: list[str],
                      batch: bool = True) -> tuple[list[Any], list[int]]:
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
        if fresh and any(news[i].depends_on for i in fresh):
            self._insert_linked(conn, news, fresh, out, now, batch)
        elif fresh:
            values = [new_row(news[i], now) for i in fresh]
            for i, row in zip(fresh, _rows(self._insert_new(conn, values), values)):
                out[i] = row
        return out, replayed

    def _insert_linked(self, conn: Connection, news: Sequence[NewJob], fresh: list[int],
                       out: list[Any], now: int, batch: bool) -> None:
        """Insert a batch's new jobs one by one, in order, each with its parents resolved,
        marked and counted (flows.py); a missing or unreadable parent is a 422 naming it."""
        errors: list[dict[str, str]] = []
        for i in fresh:
            new, values = news[i], new_row(news[i], now)
            if new.depends_on:
                if any(isinstance(p, Item) and out[p.n] is None for p in new.depends_on):
                    continue  # an earlier item it names was refused: said there
                ids = [out[p.n].id if isinstance(p, Item) else p for p in new.depends_on]
                found = {r.id: r for r in self._mark_parents(conn, ids, new.parents_scope)}
                where = f"jobs[{i}].depends_on" if batch else "depends_on"
                missing = [{"field": f"{where}[{k}]", "detail": "No such job, or not yours."}
                           for k, job_id in enumerate(ids) if job_id not in found]
                if missing:
                    errors += missing
                    continue
                status, waiting, by = verdict([found[j] for j in ids], new.on_parent_failure)
                values.update(status=status, waiting_for=waiting, cancelled_by_parent=by,
                              finished_at=now if by is not None else None,
                              depends_on=jsontext.dumps(ids),
                              on_parent_failure=new.on_parent_failure)
            out[i] = self._insert_linked_row.rows(conn, {**_NO_LINKS, **values})[0]
            if new.depends_on:
                self.flows.link(conn, [out[i].id], [ids])
        if errors:
            raise ValidationFailed("; ".join(e["field"] for e in errors[:MAX_SHOWN_ERRORS])
                                   + ": no such job, or not yours.",
                                   errors=errors[:MAX_SHOWN_ERRORS])
        self.notifier.notify(conn)
        self.on_jobs_written()


    def _mark_parents(self, conn: Connection, ids: Sequence[int],
                      scope: Scope | None) -> list[Any]:
        """The parents marked ``has_dependents`` (their rows locked, on PostgreSQL), within
        what the caller may read (a producer: its own): (id, status) of each found."""
        params: dict[str, Any] = {"ids": list(dict.fromkeys(ids))}
        own = scope is not None and scope.producer is not None
        if own:
            params["scope_producer"] = scope.producer  # type: ignore[union-attr]
        return self._mark[own].rows(conn, params)


MAX_SHOWN_ERRORS = 100  # a 422 lists at most this many errors (the contract's cap)
# A batch's job that has parents, or is among jobs that do: every column it may set.
_LINK_COLUMNS = ("depends_on", "on_parent_failure", "waiting_for", "cancelled_by_parent",
                 "finished_at")
_NO_LINKS = dict.fromkeys(_LINK_COLUMNS)
_INSERT_LINKED = (insert(jobs).values({c: bindparam(c) for c in _NEW_COLUMNS + _LINK_COLUMNS})
                  .returning(*jobs.c))
# Parents marked, by whether the caller is a producer (its own jobs only) or an admin.
_MARK = {own: (update(jobs).where(jobs.c.id.in_(bindparam("ids", expanding=True)),
                                  *([jobs.c.producer == bindparam("scope_producer")]
                                    if own else []))
               .values(has_dependents=True).returning(jobs.c.id, jobs.c.status))
         for own in (False, True)}


def new_row(new: NewJob, now: int) -> dict[str, Any]:
    """The row of a new job. A run_at in the past is now: no jumping the queue by
    backdating (the claim orders by run_at)."""
    run_at = max(new.run_at, now) if new.run_at is not None else (
        now + to_us(new.delay_seconds or 0))
    return {"type": new.type, "payload": new.payload_json, "priority": new.priority,
            "status": Status.PENDING.value, "attempt": 0, "retry_count": 0,
            "max_retries": new.max_retries, "idempotency_key": new.idempotency_key,
            "request_hash": new.request_hash, "producer": new.producer,
            "run_at": run_at, "created_at": now, "updated_at": now,
            "traceparent": new.traceparent, "tracestate": new.tracestate}

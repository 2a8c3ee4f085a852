"""SQLite: WAL, one writer at a time (BEGIN IMMEDIATE in turns), indexes pinned by INDEXED BY."""
from __future__ import annotations

import os
import time
from typing import Any, Mapping, Sequence

from sqlalchemy import (JSON, ColumnElement, Connection, Engine, Select, TextClause, bindparam,
                        text)
from sqlalchemy.dialects import sqlite as sqlite_dialect

from queuelog.model.jobs import Outcome
from queuelog.server.store import claim_policy
from queuelog.server.store import statements as st
from queuelog.server.store.backends.base import Backend, items_json
from queuelog.server.store.engine import database_file, write_turns
from queuelog.server.store.finish import DONE_COLUMNS, Item, Move
from queuelog.server.store.jobs import Jobs
from queuelog.server.store.keycache import KeyCache
from queuelog.server.store.notifier import Notifier, SQLiteNotifier
from queuelog.server.store.prepared import Prepared
from queuelog.server.store.sql import sqlite as sql
from queuelog.server.store.tables import job_attempts, jobs

MIN_PAUSE = 0.002  # seconds; see SQLiteBackend.yield_lock
PROBE_WAIT_SECONDS = 1.0  # how long /healthz's write probe waits for the turn and lock
DISK_FULL_BYTES = 1 << 20  # free space under which writes are told impossible
_ATTEMPT_COLUMNS = ("job_id", "attempt", "worker_id", "started_at", "outcome")


class SQLiteBackend(Backend):
    """SQLite: its write lock serializes writers, so locks in SQL are no-ops."""

    name = "sqlite"
    param_mark = "?"
    companions = ("-wal", "-shm", "-journal")
    writes_lock_reads = True
    counts_in_place = True
    rows_per_insert = 500  # of 13 columns: 6,500 parameters (SQLite allows 32,766)

    def notifier(self, engine: Engine) -> Notifier:
        """Datagrams beside the database file, after the commit."""
        return SQLiteNotifier(engine)

    def key_cache(self, engine: Engine) -> KeyCache | None:
        """Kept per process, dropped by any revocation on the machine (a file's database;
        an in-memory one is one process's and needs none)."""
        database = database_file(engine)
        return None if database is None else KeyCache(database + "-keys")

    def jobs_class(self) -> type:
        """``SQLiteJobs``."""
        return SQLiteJobs

    def writer(self, engine: Engine) -> Any:
        """The same engine (and pool), beginning its transactions IMMEDIATE, each in its
        writer's turn (turns.py): one per process, then one process at a time."""
        return write_turns(engine)

    def reader(self, engine: Engine) -> Engine:
        """The engine itself: a read's BEGIN is deferred and takes no write lock."""
        return engine

    def one_statement(self, write: Any) -> Any:
        """A transaction like any other: SQLite has no round trips to save."""
        return write.begin()

    def begin_waiting(self, engine: Engine, wait: float) -> Any:
        """A write turn that waits up to ``wait`` seconds (not the request's bound)."""
        return write_turns(engine).begin(wait=wait)

    def write_problem(self, engine: Engine) -> str | None:
        """A full disk (a commit cannot extend the WAL file: "database or disk is full",
        while reads and /healthz's ping go on), or no write turn and lock within
        ``PROBE_WAIT_SECONDS`` (taken and given back, nothing written)."""
        database = database_file(engine)
        if database is not None:
            stat = os.statvfs(os.path.dirname(database))
            if stat.f_bavail * stat.f_frsize < DISK_FULL_BYTES:
                return "the disk holding the database is full"
        try:
            with write_turns(engine).begin(wait=PROBE_WAIT_SECONDS):
                pass
        except Exception as e:  # noqa: BLE001 - the reason is the answer
            reason = (str(getattr(e, "orig", None) or e).strip().splitlines() or [""])[0]
            return f"no write lock within {PROBE_WAIT_SECONDS:g} s ({reason})"
        return None

    def close(self, engine: Engine) -> None:
        """The WAL copied back and cut to nothing first, so that a clean stop leaves no WAL
        file to grow from; then the pool closed."""
        write_turns(engine).finish()
        engine.dispose()

    def read_one(self, raw: Any, sql_text: str, params: tuple[Any, ...]) -> Any:
        """The row, then the read's transaction ended."""
        cursor = raw.cursor()
        cursor.execute(sql_text, params)
        row = cursor.fetchone()
        cursor.close()
        raw.rollback()
        return row

    def lock(self, conn: Any, key: int) -> None:
        """Nothing to take: the transaction holds the database's one write lock."""

    def for_update(self, query: Select[Any]) -> Select[Any]:
        """As is: the write lock is already held."""
        return query

    def skip_locked(self, query: Select[Any]) -> Select[Any]:
        """As is: no other writer holds a row while this one writes."""
        return query

    def yield_lock(self, started: float) -> None:
        """Leave the write lock free as long as the batch held it.

        SQLite's lock is not fair: a loop that begins its next transaction at once keeps
        winning, while a waiting claim backs off (up to 100 ms a try) and starves.
        Pausing as long as the batch took gives waiting writers their turn, at half the
        bulk's speed.
        """
        time.sleep(max(MIN_PAUSE, time.perf_counter() - started))

    def insert_ignore(self, table: Any) -> Any:
        """SQLite's INSERT ... ON CONFLICT DO NOTHING."""
        return sqlite_dialect.insert(table).on_conflict_do_nothing()

    def insert_rows(self, table: Any, columns: Sequence[str], *,
                    returning: Sequence[str] = (), notifying: bool = False) -> TextClause:
        """A multi-row ``VALUES`` (``notifying``: nothing to add; other processes are told
        after the commit). SQLite reads plain parameters much faster than JSON."""
        picks = ", ".join(table.c[c].name for c in returning)
        return text(sql.INSERT_ROWS.format(
            table=table.name, columns=", ".join(columns),
            returning=f" RETURNING {picks}" if picks else "",
        )).bindparams(bindparam("rows", expanding=True))

    def rows_params(self, columns: Sequence[str], rows: Sequence[Mapping[str, Any]],
                    ) -> list[dict[str, Any]]:
        """The rows as tuples, at most ``rows_per_insert`` a statement (a statement's
        parameters are at most 32,766 on SQLite)."""
        tuples = [tuple([row[c] for c in columns]) for row in rows]
        step = self.rows_per_insert
        return [{"rows": tuples[i:i + step]} for i in range(0, len(tuples), step)]

    def fold_counts(self, write: Any) -> bool:
        """Nothing to fold: the triggers write ``job_counts`` directly, leaving no deltas
        (one writer at a time, so no lock is shared by concurrent claims)."""
        return False

    def expired_by_type(self) -> TextClause:
        """The lease index's range below ``:now``: what the next claim takes back."""
        return sql.EXPIRED_BY_TYPE


class SQLiteJobs(Jobs):
    """The job verbs on SQLite: pinned walks, the attempts written after the claim."""

    def _build_claims(self, lease: Any) -> None:
        """The claim of each kind as the UPDATE of a pinned walk's ids; with and without
        the types at their limit skipped."""
        d = self.engine.dialect
        claim = st.claim_update(lease)
        policy = sql_of(st.POLICY)
        self._claims = {k: Prepared(claim.where(jobs.c.id.in_(w)), d)
                        for k, w in pinned_walks(policy).items()}
        blocked = pinned_walks(f"{policy} AND {claim_policy.BLOCKED_SQL}",
                               (claim_policy.BLOCKED_PARAM,))
        self._claims_b = {k: Prepared(claim.where(jobs.c.id.in_(w)), d)
                          for k, w in blocked.items()}
        self._open_attempts = Prepared(
            self.backend.insert_rows(job_attempts, _ATTEMPT_COLUMNS), d)
        self._expired = Prepared(sql.EXPIRED.bindparams(bindparam("lim", st.EXPIRE_BATCH))
                                 .columns(*st.EXPIRED.selected_columns), d)
        self._complete_full = Prepared(text(sql.COMPLETE.format(returning="*")), d)
        self._complete_done = Prepared(text(sql.COMPLETE.format(returning=DONE_COLUMNS)), d)
        self._close_attempts = Prepared(sql.CLOSE_ATTEMPTS, d)
        self._ends = {own: Prepared(text(sql.END.format(own=sql.OWN if own else "")), d)
                      for own in (True, False)}
        self._end_attempts_sql = Prepared(sql.END_ATTEMPTS, d)

    def _claim_rows(self, conn: Connection, kind: str, params: dict[str, Any],
                    blocked: list[str]) -> list[Any]:
        """The claim's UPDATE, then one INSERT of every claimed job's attempt."""
        if blocked:
            rows = self._claims_b[kind].rows(conn, {**params, "blocked": blocked})
        else:
            rows = self._claims[kind].rows(conn, params)
        if rows:
            worker, now = params["wkr"], params["now"]
            for p in self.backend.rows_params(_ATTEMPT_COLUMNS, [
                    {"job_id": r.id, "attempt": r.attempt, "worker_id": worker,
                     "started_at": now, "outcome": "running"} for r in rows]):
                self._open_attempts.run(conn, p)
        return rows

    def _complete_rows(self, conn: Connection, now: int, worker: str,
                       items: Sequence[Item], *, full: bool,
                       plain: bool = False) -> tuple[list[Any], bool]:
        """One UPDATE of the items' jobs, then one of their attempts (in a transaction
        always: ``plain`` has nothing to leave out)."""
        params = {"now": now, "wkr": worker, **items_json(items)}
        rows = (self._complete_full if full else self._complete_done).rows(conn, params)
        if len(rows) == len(items):  # every item completed: its attempt closed as sent
            self._close_attempts.run(conn, params)
        elif rows:
            done = {r.id for r in rows}
            self._close_attempts.run(conn, {"now": now, **items_json(
                [(job_id, attempt) for job_id, attempt, _ in items if job_id in done])})
        return rows, False


    def _end_rows(self, conn: Connection, now: int, outcome: Outcome,
                  moves: Sequence[Move], worker: str | None) -> list[Any]:
        """One UPDATE of the jobs, then one of the attempts of those it moved."""
        params = {"now": now, "wkr": worker, **items_json(moves)}
        rows = self._ends[worker is not None].rows(conn, params)
        if rows:
            moved = {r.id for r in rows}
            self._end_attempts_sql.run(conn, {
                "now": now, "outcome": outcome.value, **items_json(
                    moves if len(rows) == len(moves) else
                    [m for m in moves if m[0] in moved])})
        return rows


def pinned_walks(policy_sql: str, params: tuple[Any, ...] = ()) -> dict[str, Any]:
    """The claim's walks by kind as pinned text, because SQLAlchemy renders no INDEXED BY:
    of every pending job, of one type's, or of each of several types' in turn."""
    cols = list(st.DUE.selected_columns)
    pinned = {"any": ("INDEXED BY ix_jobs_claim", "", ()),
              "one": ("INDEXED BY ix_jobs_pending_type_claim", "AND cand.type = :type1 ",
                      (bindparam("type1"),)),
              "many": ("INDEXED BY ix_jobs_pending_type_claim", "AND cand.type = t.type ",
                       (bindparam("types", type_=JSON),))}
    out = {}
    for kind, (index, typed, own) in pinned.items():
        walk = sql.DUE.format(index=index, typed=typed, policy=policy_sql)
        clause = text(sql.EACH_TYPE.format(walk=walk) if kind == "many" else walk)
        out[kind] = clause.bindparams(bindparam("now"), bindparam("n"), *own, *params
                                      ).columns(*cols)
    return out


def sql_of(condition: ColumnElement[bool]) -> str:
    """A Core condition as SQLite text with ``:name`` parameters (for pinned statements);
    constants rendered inline (literal_binds)."""
    return str(condition.compile(dialect=sqlite_dialect.dialect(paramstyle="named"),
                                 compile_kwargs={"literal_binds": True}))

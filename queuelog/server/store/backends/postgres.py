"""PostgreSQL: row locks with SKIP LOCKED, advisory locks, one-statement verbs in autocommit."""
from __future__ import annotations

import functools
from typing import Any, Mapping, Sequence

from sqlalchemy import (ARRAY, Connection, Engine, Select, String, TextClause, any_, bindparam,
                        cast, func, insert, literal, select, text, true)
from sqlalchemy.dialects import postgresql as postgresql_dialect

from queuelog.model import jsontext
from queuelog.model.jobs import Outcome
from queuelog.server.store import claim_policy
from queuelog.server.store import statements as st
from queuelog.server.store.backends.base import Backend, items_json
from queuelog.server.store.finish import DONE_COLUMNS, Item, Move
from queuelog.server.store.jobs import Claimed, Jobs, claim_kind, claim_params
from queuelog.server.store.jobs import revoked
from queuelog.server.store.listen import CHANNEL
from queuelog.server.store.notifier import Notifier, PgNotifier
from queuelog.server.store.prepared import Prepared
from queuelog.server.store.sql import postgres as sql
from queuelog.server.store.tables import job_attempts, jobs


class PostgresBackend(Backend):
    """PostgreSQL: many writers at once, each locking the rows it takes."""

    name = "postgresql"
    param_mark = "%s"
    backup_refusal = (
        "queuelog backup copies SQLite databases. On PostgreSQL use pg_dump, e.g. "
        "pg_dump -Fc -f queuelog.dump \"$DATABASE_URL\" (restore with pg_restore); "
        "see 'Backups and restore' in docs/maintenance.md.")
    boot_wait_seconds = 30.0  # a restart or a failover; SQLite's file does not come back

    @functools.cached_property
    def pipelines(self) -> bool:  # type: ignore[override]
        """psycopg's pipeline mode, where its libpq has it (14 or later; psycopg[binary]'s)."""
        import psycopg
        return bool(psycopg.Pipeline.is_supported())

    def notifier(self, engine: Engine) -> Notifier:
        """NOTIFY in the transaction, LISTEN in each process."""
        return PgNotifier(engine)

    def jobs_class(self) -> type:
        """``PostgresJobs``."""
        return PostgresJobs

    def writer(self, engine: Engine) -> Any:
        """The engine: row locks, not a turn, keep writers apart."""
        return engine

    def reader(self, engine: Engine) -> Engine:
        """The same pool in autocommit: a read is its statements alone, without a BEGIN
        round trip and without a ROLLBACK at its end (psycopg answers every real ROLLBACK
        by forgetting the connection's prepared statements)."""
        return engine.execution_options(isolation_level="AUTOCOMMIT")

    def one_statement(self, write: Any) -> Any:
        """In autocommit: the statement is its own transaction, without a BEGIN and a COMMIT
        of their own (two of a single enqueue's four round trips)."""
        return write.connect().execution_options(isolation_level="AUTOCOMMIT")

    def begin_waiting(self, engine: Engine, wait: float) -> Any:
        """A transaction: row and advisory locks wait as long as they must."""
        return engine.begin()

    def write_problem(self, engine: Engine) -> str | None:
        """Whether the server takes writes: not a standby, not in read-only mode."""
        with engine.connect() as conn:
            writable = conn.execute(sql.WRITABLE).scalar()
        return None if writable else "the database is read-only (a standby, or read-only mode)"

    def close(self, engine: Engine) -> None:
        """The pool closed."""
        engine.dispose()

    def read_one(self, raw: Any, sql_text: str, params: tuple[Any, ...]) -> Any:
        """In autocommit: the statement alone, without a BEGIN and a ROLLBACK."""
        driver = raw.driver_connection
        driver.autocommit = True
        try:
            return driver.execute(sql_text, params).fetchone()
        finally:
            try:
                driver.autocommit = False
            except Exception:  # noqa: BLE001 - a connection that refuses is dead anyway
                # Never back to the pool in autocommit: a write transaction on it would
                # commit statement by statement. A broken one is left to the caller's
                # replay, whose disconnect renews the whole pool (accounts.key_for_token).
                if not driver.broken:
                    raw.invalidate()

    def lock(self, conn: Any, key: int) -> None:
        """pg_advisory_xact_lock: held until the transaction ends."""
        conn.execute(sql.ADVISORY, {"key": key})

    def for_update(self, query: Select[Any]) -> Select[Any]:
        """SELECT ... FOR UPDATE: a second claim of the same limited type waits here."""
        return query.with_for_update()

    def skip_locked(self, query: Select[Any]) -> Select[Any]:
        """FOR UPDATE SKIP LOCKED: a row another claim or purge holds is not ours."""
        return query.with_for_update(skip_locked=True)

    def yield_lock(self, started: float) -> None:
        """Nothing to yield: each batch's row locks end with its commit."""

    def insert_ignore(self, table: Any) -> Any:
        """PostgreSQL's INSERT ... ON CONFLICT DO NOTHING."""
        return postgresql_dialect.insert(table).on_conflict_do_nothing()

    def insert_rows(self, table: Any, columns: Sequence[str], *,
                    returning: Sequence[str] = (), notifying: bool = False) -> TextClause:
        """The rows as one JSON array of arrays, read as ``jsonb`` in array order, each
        value cast to its column's type; ``notifying``: pg_notify in the RETURNING."""
        pg = postgresql_dialect.dialect()
        picks = ", ".join(f"CAST(r.v ->> {i} AS {table.c[c].type.compile(dialect=pg)})"
                          for i, c in enumerate(columns))
        back = [table.c[c].name for c in returning] + ([sql.NOTIFIED] if notifying else [])
        statement = text(sql.INSERT_ROWS.format(
            table=table.name, columns=", ".join(columns), picks=picks,
            returning=" RETURNING " + ", ".join(back) if back else ""))
        return statement.bindparams(channel=CHANNEL) if notifying else statement

    def rows_params(self, columns: Sequence[str], rows: Sequence[Mapping[str, Any]],
                    ) -> list[dict[str, Any]]:
        """One JSON text, ``[[v1, v2, ...], ...]``, which the database reads in C."""
        return [{"rows": jsontext.dumps([[row[c] for c in columns] for row in rows])}]

    def fold_counts(self, write: Any) -> bool:
        """Move the deltas into the totals in one statement (deleted rows are ours alone)."""
        with write.begin() as conn:
            conn.execute(sql.FOLD_COUNTS)
        return True

    def expired_by_type(self) -> TextClause:
        """(type, count) of running jobs past their lease at ``:now``."""
        return sql.EXPIRED_BY_TYPE


class PostgresJobs(Jobs):
    """The job verbs on PostgreSQL: claims that lock what they walk and open their attempts
    in the same statement, run alone in autocommit when nothing needs a transaction."""

    completes_plain_alone = True  # a complete in autocommit leaves dependents' parents

    _seen_limiter_rows = True  # until a claim's first reads say otherwise

    def _build_claims(self, lease: Any) -> None:
        """The claims by kind: plain, skipping the blocked types, and guarded (alone)."""
        d = self.engine.dialect
        claim = st.claim_update(lease)
        walks = locked_walks(st.WALKS, st.of_type)
        blocked = locked_walks({k: w.where(st.SKIP) for k, w in st.WALKS.items()},
                               lambda t: st.of_type(t).where(st.SKIP))
        guard = st.alone_guard()
        self._claims = {k: Prepared(recording(claim, w), d) for k, w in walks.items()}
        self._claims_b = {k: Prepared(recording(claim, w), d) for k, w in blocked.items()}
        self._claims_g = {k: Prepared(recording(claim, w.where(guard), alone=guard), d)
                          for k, w in walks.items()}
        self._expired = Prepared(st.EXPIRED.with_for_update(skip_locked=True), d)
        # By (full, plain): every column or DONE_COLUMNS; only jobs without dependents.
        self._completes = {
            (full, plain): Prepared(text(sql.COMPLETE.format(
                returning="done.*" if full else DONE_COLUMNS,
                guard=sql.PLAIN if plain else "")), d)
            for full in (True, False) for plain in (True, False)}
        self._ends = {own: Prepared(text(sql.END.format(own=sql.OWN if own else "")), d)
                      for own in (True, False)}

    def _claim_rows(self, conn: Connection, kind: str, params: dict[str, Any],
                    blocked: list[str]) -> list[Any]:
        """One statement: the claim and its attempts."""
        if blocked:
            return self._claims_b[kind].rows(conn, {**params, "blocked": blocked})
        return self._claims[kind].rows(conn, params)

    def _complete_rows(self, conn: Connection, now: int, worker: str,
                       items: Sequence[Item], *, full: bool,
                       plain: bool = False) -> tuple[list[Any], bool]:
        """One statement: the jobs, their attempts, and a freed slot's wake-up (``plain``:
        only jobs without dependents, the rest left to a transaction)."""
        params = {"now": now, "wkr": worker, "slot_types": sorted(self.slot_types),
                  "channel": CHANNEL, **items_json(items)}
        return self._completes[full, plain].rows(conn, params), True

    def _end_rows(self, conn: Connection, now: int, outcome: Outcome,
                  moves: Sequence[Move], worker: str | None) -> list[Any]:
        """One statement: the jobs moved on and their attempts closed."""
        params = {"now": now, "wkr": worker, "outcome": outcome.value, **items_json(moves)}
        return self._ends[worker is not None].rows(conn, params)

    def _settled_claim(self, conn: Connection, now: int, rows: list[Any]) -> None:
        """The attempts stamped again: ``now`` was read before the reads and the settle,
        and a slot they found free may have been freed by a completion stamped after it;
        the attempts start no earlier than the settle saw that (else the history shows
        an overlap of a limited type's jobs that never happened)."""
        later = self.clock()
        if later > now:
            conn.execute(st.RESTAMP, {"later": later, "now": now, "ids": [r.id for r in rows]})

    def _claim_in_turn(self, worker: str, max_jobs: int, lease_seconds: float | None,
                       types: Sequence[str] | None, key: str | None, *,
                       locked: bool) -> tuple[Claimed, list[Any]]:
        """The claim alone where it can be, else a transaction (``Jobs``)."""
        # A type the last reading found limited goes the transaction's way at once: the
        # one-statement claim would read, decline, and leave the reads to do again.
        if not locked and not (
                self.limited_types if types is None else self.limited_types & set(types)):
            alone = self._claim_alone(worker, max_jobs, lease_seconds, types, key)
            if alone is not None:
                return alone
        return super()._claim_in_turn(worker, max_jobs, lease_seconds, types, key,
                                      locked=locked)

    def _claim_alone(self, worker: str, max_jobs: int, lease_seconds: float | None,
                     types: Sequence[str] | None, key: str | None,
                     ) -> tuple[Claimed, list[Any]] | None:
        """The common claim as one statement in autocommit, no BEGIN and COMMIT round
        trips: only when no lease ran out and no limit is in force for these types; else
        None, and the claim runs as a transaction."""
        with self.backend.one_statement(self._write) as conn:
            now = self.clock()
            params = claim_params(now, worker, max_jobs, lease_seconds, types)
            if not self._seen_limiter_rows:
                # No limiter row when last read (the common case): the claim, guarded in
                # SQL by the first reads' conditions, answers whether they held.
                got = self._claims_g[claim_kind(types)].rows(conn, {**params, "th": key})
                if not got[0].alone:
                    return None
                rows = [r for r in got if r.id is not None]
            else:
                expired, first, still = self._first_reads(conn, now, key)
                if not still:
                    return revoked(), []
                everywhere, limited = claim_policy.limited_types(self.configured_limits,
                                                                 types, first)
                self._remember(everywhere)
                if expired or limited:
                    return None
                rows = self._claims[claim_kind(types)].rows(conn, params)
        return Claimed(), rows  # put in claim order by claim_many

    def _first_reads(self, conn: Connection, now: int, key: str | None,
                     ) -> tuple[list[Any], list[Any], bool]:
        """As ``Jobs``'s, remembering whether any limiter row exists (``_claim_alone``)."""
        expired, first, still = super()._first_reads(conn, now, key)
        self._seen_limiter_rows = bool(first)
        return expired, first, still


def locked_walks(walks: Mapping[str, Select[Any]], of_type: Any) -> dict[str, Any]:
    """The claim's walks locking what they pick (SKIP LOCKED): ``any`` and ``one`` as given,
    ``many`` one walk per type of ``:types`` (each at most :n, locking as it goes), the best
    :n kept: one walk of ``type IN`` skipped every due job of the other types."""
    out = {kind: walk.with_for_update(skip_locked=True) for kind, walk in walks.items()}
    types = (select(func.unnest(cast(bindparam("types"), ARRAY(String))).label("type"))
             .distinct().subquery("tt"))
    each = of_type(types.c.type).with_for_update(skip_locked=True).lateral("c")
    out["many"] = (select(each.c.id).select_from(types.join(each, true()))
                   .order_by(each.c.priority.desc(), each.c.run_at, each.c.id)
                   .limit(bindparam("n")))
    return out


def recording(claim: Any, walk: Any, alone: Any = None) -> Any:
    """The claim of what ``walk`` picks that also opens each claimed job's attempt (a
    data-modifying CTE, run to completion though nothing reads it). ``alone``: the
    condition the walk was guarded by, answered as column ``alone`` on a row of its own
    (the claimed rows' columns NULL) even when nothing is claimed.

    ``= ANY(ARRAY(...))``: an InitPlan, run once. As ``id IN (...)`` the planner may make
    the walk the inner side of a join and rescan it, LIMIT and locks and all (measured: a
    lower priority claimed first).
    """
    taking = claim.where(jobs.c.id == any_(func.array(walk.scalar_subquery())))
    claimed = taking.cte("claimed")
    started = insert(job_attempts).from_select(
        ["job_id", "attempt", "worker_id", "started_at", "outcome"],
        select(claimed.c.id, claimed.c.attempt, bindparam("wkr"), bindparam("now"),
               literal("running"))).cte("started")
    if alone is None:
        return select(claimed).add_cte(started)
    verdict = select(alone.label("alone")).cte("verdict")
    return (select(verdict.c.alone, claimed)
            .select_from(verdict.outerjoin(claimed, true())).add_cte(started))

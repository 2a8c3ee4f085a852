"""SQLite vs PostgreSQL: the one place in the store that knows which database it talks to.

One ``Dialect`` object per engine, chosen once from the URL (``for_url``) or the engine
(``of``): connect-time set-up, the write lock (SQLite's BEGIN IMMEDIATE, PostgreSQL's
SKIP LOCKED and advisory locks), the claim's pinned indexes (SQLite's INDEXED BY) and
backups. Other store modules ask it and never test the database's name; statements are
still built once, at store set-up, so the claim path pays nothing for the indirection.
"""
from __future__ import annotations

import functools
import os
import time
from typing import Any, Callable, Mapping, Sequence

from sqlalchemy import (ARRAY, JSON, ColumnElement, Engine, Select, String, TextClause, any_,
                        bindparam, cast, create_engine, case, event, func, insert, literal,
                        select, text, true, update)
from sqlalchemy.dialects import postgresql as postgresql_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import make_url

from queuelog.model import jsontext
from queuelog.model.problems import ConfigError
from queuelog.server.store import listen, liveness
from queuelog.server.store.turns import WAL_SIZE_LIMIT, WriteTurns

# LIFO: the connection used last is used next, so a quiet server works on one or two
# connections whose prepared statements (psycopg prepares a statement from its 6th run on a
# connection) and server-side caches are warm, rather than turning through all ten.
POOL = {"pool_size": 10, "max_overflow": 20, "pool_use_lifo": True}
MIN_PAUSE = 0.002  # seconds; see SQLiteDialect.yield_lock
# Any fixed numbers, the same in every process: pg_advisory_xact_lock's keys.
MIGRATE_LOCK = 7262017
# Set on a connection by ``notify``; what the commit then tells (see ``watch_claimable``).
_CLAIMABLE = "queuelog.claimable"
NAMES_LOCK = 7262018  # API key and user names share one name space


# Built once (a scrape of /metrics reads them); the SQLite one pinned to the lease index.
_EXPIRED_BY_TYPE = text("SELECT type, count(*) FROM jobs WHERE status = 'running' "
                        "AND lease_expires_at < :now GROUP BY type")
_SQLITE_EXPIRED_BY_TYPE = text(
    "SELECT type, count(*) FROM jobs INDEXED BY ix_jobs_lease WHERE status = 'running' "
    "AND lease_expires_at < :now GROUP BY type")


class Dialect:
    """What differs between the databases queuelog runs on (the base: shared defaults)."""

    name: str = ""
    param_mark: str = "?"                     # the driver's placeholder, for raw driver SQL
    companions: tuple[str, ...] = ()          # files beside the database that are part of it
    backup_refusal: str | None = None         # why ``queuelog backup`` cannot copy it, if so
    # A write transaction holds the database's one write lock from BEGIN, so whatever
    # it reads no other writer changes before its commit (SQLite); else rows are locked.
    writes_lock_reads: bool = False
    # The count triggers (migration 0008) update ``job_counts`` itself, in the writing
    # transaction (SQLite); else they append deltas that a read must add up (PostgreSQL).
    counts_in_place: bool = False
    # ``one_statement`` runs in autocommit, so a verb whose write is one statement (a
    # claim that opens its attempts itself, a complete that closes it) saves its BEGIN
    # and COMMIT by running there (PostgreSQL); else it is a transaction like any other.
    autocommits: bool = False
    # How long a starting server tries again a database that does not answer (store.init_app).
    boot_wait_seconds: float = 0.0

    def create_engine(self, url: str, *, sqlite_synchronous: str, echo: bool) -> Engine:
        """A pooled engine for ``url``, set up for this database."""
        raise NotImplementedError

    def read_one(self, raw: Any, sql: str, params: tuple[Any, ...]) -> Any:
        """One row of one read, on a pooled driver connection, its transaction ended here
        (so the pool's reset has nothing to send, and a failure is the caller's)."""
        cursor = raw.cursor()
        cursor.execute(sql, params)
        row = cursor.fetchone()
        cursor.close()
        raw.rollback()
        return row

    def writer(self, engine: Engine) -> Engine:
        """The engine that begins write transactions (with the write lock, where needed)."""
        return engine

    def one_statement(self, write: Any) -> Any:
        """A connection for a write that is one statement, whole by itself: a transaction
        of ``write`` (the writer) here; in autocommit where that saves round trips."""
        return write.begin()

    def reader(self, engine: Engine) -> Engine:
        """The engine pure reads connect through (never a write: see PostgreSQL's)."""
        return engine

    def skip_locked(self, query: Select[Any]) -> Select[Any]:
        """``query`` skipping rows another transaction holds (PostgreSQL); else as is."""
        return query

    def lock(self, conn: Any, key: int) -> None:
        """Take a transaction-scoped lock named ``key`` (a no-op where writes serialize)."""

    def for_update(self, query: Select[Any]) -> Select[Any]:
        """``query`` locking the rows it reads until the commit (a no-op where writes
        serialize: SQLite's write lock is already held)."""
        return query

    def yield_lock(self, started: float) -> None:
        """Between a bulk action's batches: give waiting writers their turn, if needed."""

    def claim_candidates(self, walks: Mapping[str, Select[Any]], policy_sql: str,
                         params: tuple[Any, ...] = (), *,
                         of_type: Callable[[Any], Select[Any]]) -> dict[str, Any]:
        """The claim's due-job subqueries by kind, as this database runs them best: ``any``
        type and ``one`` type ``:type1`` from ``walks``, ``many`` types ``:types`` made of
        ``of_type(column)`` (one type's walk, with its order's columns); ``policy_sql`` is
        the claim policy's condition as SQLite text, and ``params`` the (expanding)
        parameters it names.

        A claim of several types walks each type's own jobs, at most :n each, locking as
        it goes, and keeps the best :n: one walk of ``type IN`` skipped every due job of
        the other types ahead of its own (83 ms a claim behind 300,000 on PostgreSQL). It
        may lock up to :n jobs of each type and take :n; another claim skips those for the
        statement's length, as it skips any claim's rows.
        """
        out = {kind: self.skip_locked(walk) for kind, walk in walks.items()}
        types = (select(func.unnest(cast(bindparam("types"), ARRAY(String))).label("type"))
                 .distinct().subquery("tt"))
        each = self.skip_locked(of_type(types.c.type)).lateral("c")
        out["many"] = (select(each.c.id).select_from(types.join(each, true()))
                       .order_by(each.c.priority.desc(), each.c.run_at, each.c.id)
                       .limit(bindparam("n")))
        return out

    def expired_leases(self, query: Select[Any], limit: int) -> Any:
        """The lease take-back's pick of running jobs past their lease (id, attempt)."""
        return self.skip_locked(query)

    def expired_by_type(self) -> TextClause:
        """(type, count) of running jobs past their lease at ``:now``, for /metrics."""
        return _EXPIRED_BY_TYPE

    def in_subquery(self, column: Any, query: Any) -> ColumnElement[bool]:
        """``column`` IN the ids ``query`` picks, evaluated once."""
        return column.in_(query)  # type: ignore[no-any-return]

    # ``complete_rows`` also closes the completed jobs' attempts (their outcome, finished_at).
    complete_rows_close_attempts: bool = False
    # Several reads may be sent at once and answered at once (``Prepared.together``).
    pipelines: bool = False

    def closing_attempts(self, statement: Any, attempts: Any, outcome: str) -> Any | None:
        """``statement`` (an UPDATE of jobs ... RETURNING) that also closes each returned
        job's attempt (finished_at :now, ``outcome``, no error), as one statement; None
        where the database cannot (the caller then updates them)."""
        return None

    def claim_recording(self, claim: Any, attempts: Any, outcome: str,
                        alone: ColumnElement[bool] | None = None) -> Any | None:
        """The claim (an UPDATE ... RETURNING) that also opens each claimed job's attempt
        (``attempts``: job_id, attempt, worker_id :wkr, started_at :now, ``outcome``), as
        one statement; None where the database cannot (the claim then inserts them).
        ``alone``: the condition the claim was guarded by, answered as column ``alone`` on
        a row of its own (the claimed rows' columns NULL) even when nothing is claimed."""
        return None

    def insert_ignore(self, table: Any) -> Any:
        """An INSERT that skips a row whose key exists (ON CONFLICT DO NOTHING)."""
        raise NotImplementedError

    def close_attempt_rows(self) -> TextClause:
        """One UPDATE ending many jobs' attempts (finished_at ``:now``, ``:outcome``, no
        error), where ``closing_attempts`` cannot; its items are ``complete_params``'s."""
        raise NotImplementedError

    def insert_rows(self, table: Any, columns: Sequence[str], *,
                    returning: Sequence[str] = (), notifying: bool = False) -> TextClause:
        """One INSERT of many rows, the new rows' ``returning`` columns returned, ids
        ascending in the rows' order; run it once per parameter set of
        ``rows_params(columns, rows)``, in one transaction (no statement per row).
        ``notifying``: as ``notifying`` makes a statement (run it, then ``notify(conn,
        told=True)``)."""
        raise NotImplementedError

    def rows_params(self, columns: Sequence[str], rows: Sequence[Mapping[str, Any]],
                    ) -> list[dict[str, Any]]:
        """The parameters of ``insert_rows`` for these rows, one set per statement to run
        (in one transaction): here one JSON text, ``[[v1, v2, ...], ...]``, which the
        database reads in C (a list per column made psycopg dump 13 arrays in Python: a
        fifth of a batch enqueue's CPU)."""
        return [{"rows": jsontext.dumps([[row[c] for c in columns] for row in rows])}]

    def complete_rows(self) -> TextClause:
        """One UPDATE completing many held jobs, each fenced on its own (running, this
        worker, this attempt); each completed row's id, type and status returned.
        Parameters: ``now``, ``wkr`` and ``complete_params(items)``."""
        raise NotImplementedError

    def complete_params(self, items: Sequence[tuple[int, int, str | None]]) -> dict[str, Any]:
        """The items' parameters for ``complete_rows``, (id, attempt, result JSON) each:
        ``[[id, attempt, result], ...]`` as one JSON text."""
        return {"items": jsontext.dumps([list(item) for item in items])}

    # -- wake-ups: "a job may have become claimable", to every process ------------------
    def notify(self, conn: Any, *, told: bool = False) -> None:
        """Within ``conn``'s transaction: jobs may have become claimable. Told at commit
        to this process (``watch_claimable``) and to every other; once per transaction
        however often called (a batch of 500 is one wake-up). The one call every store
        verb makes that makes a job claimable (enqueue, fail back, retry, resume, a lease
        taken back; a freed slot or refilled rate likewise). ``told``: the statement
        just run was ``notifying``, so the other processes' part is done."""
        if conn.info.get(_CLAIMABLE):
            return
        conn.info[_CLAIMABLE] = True
        if not (told and self.notifies_in_statements):
            self._notify_others(conn)

    notifies_in_statements = False

    def notifying(self, statement: Any) -> Any:
        """``statement`` (an INSERT or UPDATE with RETURNING) made to tell the other
        processes itself where the database can (PostgreSQL); run it, then ``notify(conn,
        told=True)``."""
        return statement

    def _notify_others(self, conn: Any) -> None:
        """Tell other processes, within the transaction (PostgreSQL); else at commit."""

    def _after_commit(self, engine: Engine) -> None:
        """Tell other processes after a commit that notified (SQLite)."""

    def watch_claimable(self, engine: Engine, callback: Callable[[], None]) -> None:
        """Call ``callback`` after each commit on ``engine`` whose transaction notified."""
        # A connection goes back to the pool only after its commit (or rollback): so the
        # check-in is "after commit" for Core's engine.begin() blocks. A rollback forgets.
        def checkin(_dbapi_conn: Any, record: Any) -> None:
            if record is not None and record.info.pop(_CLAIMABLE, False):
                callback()
                self._after_commit(engine)

        def rollback(conn: Any) -> None:
            try:
                conn.info.pop(_CLAIMABLE, None)
            except Exception:  # noqa: BLE001 - an invalidated connection: its record is gone
                pass

        event.listen(engine, "rollback", rollback)
        event.listen(engine, "checkin", checkin)

    def listen(self, engine: Engine, ring: Callable[[], None]) -> Any:
        """Start hearing other processes' wake-ups (a thread that calls ``ring``), or
        None where there is nothing to hear (an in-memory database)."""

    def fold_counts(self) -> TextClause | None:
        """The statement folding ``job_count_deltas`` into ``job_counts``; None: none kept.

        SQLite's triggers write ``job_counts`` directly (one writer at a time, so no lock
        is shared by concurrent claims there), and leave no deltas.
        """
        return None


class SQLiteDialect(Dialect):
    """SQLite: WAL, one writer at a time (BEGIN IMMEDIATE), indexes pinned by INDEXED BY."""

    name = "sqlite"
    param_mark = "?"
    companions = ("-wal", "-shm", "-journal")
    synchronous_modes = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})
    writes_lock_reads = True
    rows_per_insert = 500  # of 13 columns: 6,500 parameters (SQLite allows 32,766)
    counts_in_place = True

    def create_engine(self, url: str, *, sqlite_synchronous: str, echo: bool) -> Engine:
        """WAL, a busy timeout, foreign keys and real transactions on every connection."""
        synchronous = sqlite_synchronous.upper()
        if synchronous not in self.synchronous_modes:
            raise ConfigError("SQLITE_SYNCHRONOUS must be OFF, NORMAL, FULL or EXTRA, "
                              f"not {sqlite_synchronous!r}")
        engine = create_engine(url, echo=echo, **POOL,
                               connect_args={"timeout": 30, "check_same_thread": False})
        event.listen(engine, "connect", lambda dbapi_conn, _: _on_connect(dbapi_conn, synchronous))
        event.listen(engine, "begin", _on_begin)
        engine.__dict__[_TURNS] = _turns(engine, synchronous)
        return engine

    def writer(self, engine: Engine) -> Any:
        """The same engine (and pool), beginning its transactions IMMEDIATE, each in its
        writer's turn (turns.py): one per process, then one process at a time."""
        return engine.__dict__[_TURNS]

    def yield_lock(self, started: float) -> None:
        """Leave the write lock free as long as the batch held it.

        SQLite's lock is not fair: a loop that begins its next transaction at once keeps
        winning, while a waiting claim backs off (up to 100 ms a try) and starves
        (measured: 48 claims/s instead of 230, the slowest 1.3 s). Pausing as long as
        the batch took gives waiting writers their turn, at half the bulk's speed.
        """
        time.sleep(max(MIN_PAUSE, time.perf_counter() - started))

    def claim_candidates(self, walks: Mapping[str, Select[Any]], policy_sql: str,
                         params: tuple[Any, ...] = (), *,
                         of_type: Callable[[Any], Select[Any]]) -> dict[str, Any]:
        """Hand-pinned text, because SQLAlchemy renders no INDEXED BY.

        A new SQLite database has no ANALYZE statistics, and without them the planner
        takes a (status, ...) list index and sorts every pending job on each claim
        (measured: 18 claims/s at 100k pending). INDEXED BY pins the claim-order walk:
        of every pending job, or of one type's; a claim of several types walks each
        type's in turn (``_SQLITE_EACH_TYPE``) and keeps the best of them. No SKIP
        LOCKED: the write lock already keeps other claims out.
        """
        cols = list(walks["any"].selected_columns)
        pinned = {"any": ("INDEXED BY ix_jobs_claim", "", ()),
                  "one": ("INDEXED BY ix_jobs_pending_type_claim", "AND cand.type = :type1 ",
                          (bindparam("type1"),)),
                  "many": ("INDEXED BY ix_jobs_pending_type_claim", "AND cand.type = t.type ",
                           (bindparam("types", type_=JSON),))}
        return {kind: _due_text(index, typed, policy_sql, [*own, *params], cols,
                                each_type=kind == "many")
                for kind, (index, typed, own) in pinned.items()}

    def expired_leases(self, query: Select[Any], limit: int) -> Any:
        """Pinned to the lease index (running jobs only, by lease end)."""
        return _SQLITE_EXPIRED.bindparams(bindparam("lim", limit)).columns(
            *query.selected_columns)

    def expired_by_type(self) -> TextClause:
        """The lease index's range below ``:now``: what the next claim takes back."""
        return _SQLITE_EXPIRED_BY_TYPE

    def insert_ignore(self, table: Any) -> Any:
        """SQLite's INSERT ... ON CONFLICT DO NOTHING."""
        return sqlite_dialect.insert(table).on_conflict_do_nothing()

    def insert_rows(self, table: Any, columns: Sequence[str], *,
                    returning: Sequence[str] = (), notifying: bool = False) -> TextClause:
        """A multi-row ``VALUES`` (``notifying``: nothing to add; SQLite's processes are
        told after the commit). Its text grows with the rows (``Prepared`` renders it per
        call), but SQLite reads plain parameters much faster than JSON: 100 jobs 1,085 ->
        523 us (``json_each`` parsed each row's array once per column)."""
        return text(_SQLITE_INSERT_ROWS.format(table=table.name, columns=", ".join(columns),
                                               returning=_returning(table, returning))
                    ).bindparams(bindparam("rows", expanding=True))

    def rows_params(self, columns: Sequence[str], rows: Sequence[Mapping[str, Any]],
                    ) -> list[dict[str, Any]]:
        """The rows as tuples, at most ``rows_per_insert`` a statement (a statement's
        parameters are at most 32,766 on SQLite)."""
        tuples = [tuple([row[c] for c in columns]) for row in rows]
        step = self.rows_per_insert
        return [{"rows": tuples[i:i + step]} for i in range(0, len(tuples), step)]

    def complete_rows(self) -> TextClause:
        """The items as one JSON array, joined by ``UPDATE ... FROM json_each``."""
        return _SQLITE_COMPLETE_ROWS

    def close_attempt_rows(self) -> TextClause:
        """The items as one JSON array, joined by ``UPDATE ... FROM json_each``."""
        return _SQLITE_CLOSE_ATTEMPTS

    def _after_commit(self, engine: Engine) -> None:
        """One datagram to every other process's socket beside the database file."""
        folder = _wake_folder(engine)
        if folder is not None:
            listen.send_all(folder)

    def listen(self, engine: Engine, ring: Callable[[], None]) -> Any:
        """A datagram socket of this process in the database's wake folder."""
        folder = _wake_folder(engine)
        return None if folder is None else listen.SocketListener(folder, ring)


_TURNS = "_queuelog_turns"  # the engine's WriteTurns, in its __dict__ (create_engine)


def _turns(engine: Engine, synchronous: str) -> WriteTurns:
    """The engine's one ``WriteTurns`` (every store verb's writer shares its mutex); under
    FULL the turns make each commit's fsync themselves, after the turn (turns.py)."""
    database = _database_file(engine)
    return WriteTurns(engine.execution_options(sqlite_immediate=True), _wake_folder(engine),
                      wal=database + "-wal" if database and synchronous == "FULL" else None)


def _database_file(engine: Engine) -> str | None:
    """The database file's absolute path; None for an in-memory or URI database."""
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return os.path.abspath(database)


def _wake_folder(engine: Engine) -> str | None:
    """``<database file>-wake``: the processes that share a file share its folder."""
    database = _database_file(engine)
    return None if database is None else database + "-wake"


# The claim's walk; ``typed`` and ``policy`` are SQL from this package (never a value):
# every value is a bound parameter.
_SQLITE_DUE = ("SELECT cand.id FROM jobs AS cand {index} "
               "WHERE cand.status = 'pending' AND cand.run_at <= :now {typed}"
               "AND {policy} "
               "ORDER BY cand.priority DESC, cand.run_at, cand.id LIMIT :n")
# A claim of several types (``:types``, a JSON list): each type's own walk, correlated to
# ``t``, at most :n jobs each, then the best :n of those. CROSS JOIN keeps the types outside:
# a few walks of :n, whatever the other types' backlogs (one walk of every pending job
# skipped each due job of another type ahead of the claim's own).
_SQLITE_EACH_TYPE = ("SELECT x.id FROM (SELECT DISTINCT value AS type FROM json_each(:types)) "
                     "AS t CROSS JOIN jobs AS x WHERE x.id IN ({walk}) "
                     "ORDER BY x.priority DESC, x.run_at, x.id LIMIT :n")
_SQLITE_EXPIRED = text("SELECT id, attempt FROM jobs INDEXED BY ix_jobs_lease "
                       "WHERE status = 'running' AND lease_expires_at < :now "
                       "ORDER BY lease_expires_at LIMIT :lim")


def _due_text(index: str, typed: str, policy_sql: str, params: list[Any],
              columns: list[Any], *, each_type: bool = False) -> Any:
    """SQLite's claim subquery as pinned text: ``index`` its INDEXED BY, ``typed`` the
    worker's types (or nothing); ``each_type``: that walk for each of ``:types``."""
    if each_type:
        clause = text(_SQLITE_EACH_TYPE.format(walk=_SQLITE_DUE.format(
            index=index, typed=typed, policy=policy_sql)))
    else:
        clause = text(_SQLITE_DUE.format(index=index, typed=typed, policy=policy_sql))
    return clause.bindparams(bindparam("now"), bindparam("n"), *params).columns(*columns)


def sql_of(condition: ColumnElement[bool]) -> str:
    """A Core condition as SQLite text with ``:name`` parameters (for pinned statements).

    Constants are rendered inline (literal_binds): the claim policy's condition holds
    none today; a future one that needs a value (a rate limit's ``now``) binds it by
    name, and the pinned statement declares that parameter.
    """
    return str(condition.compile(dialect=sqlite_dialect.dialect(paramstyle="named"),
                                 compile_kwargs={"literal_binds": True}))


def _on_connect(dbapi_conn: Any, synchronous: str) -> None:
    # pysqlite's own transaction handling begins late and never IMMEDIATE;
    # turn it off and emit BEGIN ourselves (SQLAlchemy's documented recipe).
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute(f"PRAGMA synchronous={synchronous}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA wal_autocheckpoint=0")  # made out of the writers' turn: turns.py
    cur.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")  # WAL cut back when reused
    cur.close()


def _on_begin(conn: Any) -> None:
    # Writers take the write lock up front: a deferred transaction that later
    # upgrades gets SQLITE_BUSY at once instead of waiting on busy_timeout.
    immediate = conn.get_execution_options().get("sqlite_immediate", False)
    # Straight to the driver: this runs on every transaction, and the full
    # execution path (events, result set-up) costs more than the BEGIN itself.
    conn.connection.dbapi_connection.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")


class PostgresDialect(Dialect):
    """PostgreSQL: row locks with SKIP LOCKED, advisory locks, backups by pg_dump."""

    name = "postgresql"
    param_mark = "%s"
    backup_refusal = (
        "queuelog backup copies SQLite databases. On PostgreSQL use pg_dump, e.g. "
        "pg_dump -Fc -f queuelog.dump \"$DATABASE_URL\" (restore with pg_restore); "
        "see 'Backups and restore' in docs/maintenance.md.")

    autocommits = True
    boot_wait_seconds = 30.0  # a restart or a failover; SQLite's file does not come back

    def one_statement(self, write: Any) -> Any:
        """In autocommit: the statement is its own transaction, without a BEGIN and a COMMIT
        of their own (two of a single enqueue's four round trips)."""
        return write.connect().execution_options(isolation_level="AUTOCOMMIT")

    def reader(self, engine: Engine) -> Engine:
        """The same pool in autocommit: a read is its statements alone (each sees its own
        snapshot under READ COMMITTED either way), without a BEGIN round trip, and without
        a ROLLBACK at its end. psycopg answers every real ROLLBACK by forgetting the
        connection's prepared statements (and a DEALLOCATE ALL round trip): a long poll's
        read between its looks made every claim on that connection parse and plan again."""
        return engine.execution_options(isolation_level="AUTOCOMMIT")

    def read_one(self, raw: Any, sql: str, params: tuple[Any, ...]) -> Any:
        """In autocommit: the statement alone, without the BEGIN and ROLLBACK that were two
        of an enqueue's seven round trips (the API key lookup of every request)."""
        driver = raw.driver_connection
        driver.autocommit = True
        try:
            return driver.execute(sql, params).fetchone()
        finally:
            try:
                driver.autocommit = False
            except Exception:  # noqa: BLE001 - a connection that refuses is dead anyway
                # Never back to the pool in autocommit: a write transaction on it would
                # commit statement by statement. A broken one is left to the caller's
                # replay, whose disconnect renews the whole pool (accounts.key_for_token):
                # given up here, its record would reconnect at the next checkout and the
                # pool's other dead connections stay for later requests to meet.
                if not driver.broken:
                    raw.invalidate()

    def create_engine(self, url: str, *, sqlite_synchronous: str, echo: bool) -> Engine:
        """No pre-ping, a connect timeout."""
        # No pool_pre_ping: its extra round trip per checkout cost ~30% of claim throughput.
        # One the server closed while idle (a restart) is refused at checkout, before
        # anything is sent (liveness.py); one that dies in use (a dropped socket) fails its
        # request with a disconnect error instead: that request answers 503 (errors.py), and
        # SQLAlchemy invalidates the whole pool on a disconnect, so later requests get fresh
        # connections. Nothing is retried blindly: the commit's outcome may be unknown.
        # connect_timeout: a database host that does not answer at all fails a request in
        # seconds, not after the kernel's TCP timeout.
        query = make_url(url).query
        connect_args = {} if "connect_timeout" in query else {"connect_timeout": 10}
        engine = create_engine(url, echo=echo, **POOL, connect_args=connect_args)
        event.listen(engine, "checkout", liveness.refuse_closed)  # closed by a restart
        return engine

    def skip_locked(self, query: Select[Any]) -> Select[Any]:
        """FOR UPDATE SKIP LOCKED: a row another claim or purge holds is not ours."""
        return query.with_for_update(skip_locked=True)

    def for_update(self, query: Select[Any]) -> Select[Any]:
        """SELECT ... FOR UPDATE: a second claim of the same limited type waits here."""
        return query.with_for_update()

    def lock(self, conn: Any, key: int) -> None:
        """pg_advisory_xact_lock: held until the transaction ends."""
        conn.execute(_ADVISORY, {"key": key})

    def insert_ignore(self, table: Any) -> Any:
        """PostgreSQL's INSERT ... ON CONFLICT DO NOTHING."""
        return postgresql_dialect.insert(table).on_conflict_do_nothing()

    def insert_rows(self, table: Any, columns: Sequence[str], *,
                    returning: Sequence[str] = (), notifying: bool = False) -> TextClause:
        """The rows as one JSON array of arrays, read as ``jsonb`` in array order, each
        value cast to its column's type; ``notifying``: pg_notify in the RETURNING, as
        ``notifying`` does. ``jsonb``, not ``json``: parsed once, where each ``->>`` on a
        ``json`` value parsed its row again (100 jobs: 2.77 -> 1.99 ms, with the round
        trip)."""
        pg = postgresql_dialect.dialect()
        picks = ", ".join(f"CAST(r.v ->> {i} AS {table.c[c].type.compile(dialect=pg)})"
                          for i, c in enumerate(columns))
        statement = text(_PG_INSERT_ROWS.format(
            table=table.name, columns=", ".join(columns), picks=picks,
            returning=_returning(table, returning, _PG_NOTIFIED if notifying else None)))
        return statement.bindparams(channel=listen.CHANNEL) if notifying else statement

    def complete_rows(self) -> TextClause:
        """The items as one JSON array, joined by ``UPDATE ... FROM jsonb_array_elements``."""
        return _PG_COMPLETE_ROWS

    def _notify_others(self, conn: Any) -> None:
        """pg_notify in the transaction: delivered to every LISTEN at commit, or never."""
        conn.execute(_NOTIFY)

    notifies_in_statements = True

    def notifying(self, statement: Any) -> Any:
        """pg_notify in the statement's RETURNING: one round trip fewer than its own
        SELECT (a single enqueue's five); called once per row returned, and PostgreSQL
        folds a transaction's equal notifications into one."""
        return statement.returning(  # added to the statement's own RETURNING
            func.pg_notify(literal(listen.CHANNEL), literal("")).label("notified"))

    def listen(self, engine: Engine, ring: Callable[[], None]) -> Any:
        """One LISTEN connection (psycopg, outside the pool), read in a thread."""
        conninfo = engine.url.set(drivername="postgresql").render_as_string(
            hide_password=False)
        return listen.PgListener(conninfo, ring)

    complete_rows_close_attempts = True

    @functools.cached_property
    def pipelines(self) -> bool:  # type: ignore[override]
        """psycopg's pipeline mode, where its libpq has it (14 or later; psycopg[binary]'s)."""
        import psycopg
        return bool(psycopg.Pipeline.is_supported())

    def closing_attempts(self, statement: Any, attempts: Any, outcome: str) -> Any | None:
        """A data-modifying CTE, as ``claim_recording``: the attempts of the rows returned;
        and the wake-up for a freed slot (a job of ``:slot_types``) in the same statement."""
        done = statement.cte("done")
        ended = (update(attempts).where(attempts.c.job_id == done.c.id,
                                        attempts.c.attempt == done.c.attempt)
                 .values(finished_at=bindparam("now"), outcome=literal(outcome), error=None)
                 .cte("ended"))
        freed = case((done.c.type.in_(bindparam("slot_types", expanding=True)),
                      func.pg_notify(literal(listen.CHANNEL), literal(""))), else_=None)
        return select(done, freed.label("notified")).add_cte(ended)

    def claim_recording(self, claim: Any, attempts: Any, outcome: str,
                        alone: ColumnElement[bool] | None = None) -> Any | None:
        """A data-modifying CTE: the attempts inserted from the claimed rows, always run
        to completion by PostgreSQL though nothing reads it (a claim's round trip fewer).
        ``alone`` is read in the statement's one snapshot, as the claim's guard was."""
        claimed = claim.cte("claimed")
        started = insert(attempts).from_select(
            ["job_id", "attempt", "worker_id", "started_at", "outcome"],
            select(claimed.c.id, claimed.c.attempt, bindparam("wkr"), bindparam("now"),
                   literal(outcome))).cte("started")
        if alone is None:
            return select(claimed).add_cte(started)
        verdict = select(alone.label("alone")).cte("verdict")
        return (select(verdict.c.alone, claimed)
                .select_from(verdict.outerjoin(claimed, true())).add_cte(started))

    def in_subquery(self, column: Any, query: Any) -> ColumnElement[bool]:
        """``= ANY(ARRAY(...))``: an InitPlan, run once.

        As "id IN (...)" the planner may make the subquery the inner side of a join and
        rescan it, LIMIT and locks and all (measured: a lower priority claimed first).
        """
        return column == any_(func.array(query.scalar_subquery()))  # type: ignore[no-any-return]


    def fold_counts(self) -> TextClause | None:
        """Move the deltas into the totals in one statement (deleted rows are ours alone)."""
        return _FOLD_COUNTS


# Many rows in one statement (``insert_rows``): table and column names are the code's
# own (tables.py), every value a bound parameter.
_SQLITE_INSERT_ROWS = "INSERT INTO {table} ({columns}) VALUES :rows{returning}"
_PG_INSERT_ROWS = ("INSERT INTO {table} ({columns}) SELECT {picks} FROM "
                   "jsonb_array_elements(CAST(:rows AS jsonb)) WITH ORDINALITY AS r(v, ord) "
                   "ORDER BY ord{returning}")
# pg_notify added to its RETURNING: told to every LISTEN at commit, once however many rows.
_PG_NOTIFIED = "pg_notify(:channel, '') AS notified"


def _returning(table: Any, columns: Sequence[str], extra: str | None = None) -> str:
    """`` RETURNING`` these columns of ``table`` (and ``extra``), or nothing."""
    picks = [table.c[c].name for c in columns] + ([extra] if extra else [])
    return " RETURNING " + ", ".join(picks) if picks else ""


# complete_many in one statement: the items joined to their rows, each row fenced alone.
# SQLite: ``+`` keeps the planner off the status and worker indexes (it would walk every
# running job for each item); the walk is the items, each a rowid lookup.
_SQLITE_COMPLETE_ROWS = text(
    "UPDATE jobs SET status = 'completed', result = i.value ->> 2, lease_expires_at = NULL, "
    "finished_at = :now, updated_at = :now FROM json_each(:items) AS i "
    "WHERE jobs.id = i.value ->> 0 AND +jobs.status = 'running' "
    "AND jobs.attempt = i.value ->> 1 AND +jobs.worker_id = :wkr "
    "RETURNING id, type, status")
# Their attempts closed in one more statement (each item a primary-key lookup).
_SQLITE_CLOSE_ATTEMPTS = text(
    "UPDATE job_attempts SET finished_at = :now, outcome = :outcome, error = NULL "
    "FROM json_each(:items) AS i "
    "WHERE job_attempts.job_id = i.value ->> 0 AND job_attempts.attempt = i.value ->> 1")
# PostgreSQL closes the completed jobs' attempts in the same statement (a CTE).
_PG_COMPLETE_ROWS = text(
    "WITH done AS (UPDATE jobs SET status = 'completed', result = v.res, "
    "lease_expires_at = NULL, finished_at = :now, updated_at = :now "
    "FROM (SELECT CAST(i ->> 0 AS BIGINT) AS id, CAST(i ->> 1 AS INTEGER) AS att, "
    "i ->> 2 AS res FROM jsonb_array_elements(CAST(:items AS jsonb)) AS e(i)) AS v "
    "WHERE jobs.id = v.id AND jobs.status = 'running' "
    "AND jobs.attempt = v.att AND jobs.worker_id = :wkr "
    "RETURNING jobs.id, jobs.type, jobs.status, jobs.attempt), "
    "ended AS (UPDATE job_attempts SET finished_at = :now, outcome = 'completed', "
    "error = NULL FROM done WHERE job_attempts.job_id = done.id "
    "AND job_attempts.attempt = done.attempt) SELECT id, type, status, CASE WHEN done.type = "
    "ANY(CAST(:slot_types AS VARCHAR[])) THEN pg_notify(:channel, '') END AS notified "
    "FROM done").bindparams(channel=listen.CHANNEL)
_ADVISORY = text("SELECT pg_advisory_xact_lock(:key)")
_NOTIFY = text("SELECT pg_notify(:channel, '')").bindparams(channel=listen.CHANNEL)

# Two folds at once: the second's DELETE waits on the first's rows and then finds them
# gone, so no delta is added twice.
_FOLD_COUNTS = text(
    "WITH moved AS (DELETE FROM job_count_deltas RETURNING status, type, n) "
    "INSERT INTO job_counts (status, type, n) "
    "SELECT status, type, sum(n) FROM moved GROUP BY status, type "
    "ON CONFLICT (status, type) DO UPDATE SET n = job_counts.n + excluded.n")
_BY_NAME: dict[str, Dialect] = {d.name: d for d in (SQLiteDialect(), PostgresDialect())}


def for_url(url: str) -> Dialect:
    """The dialect a DATABASE_URL names; ConfigError for a database queuelog does not run on."""
    backend = make_url(url).get_backend_name()
    if backend not in _BY_NAME:
        hint = " (write postgresql+psycopg://)" if backend == "postgres" else ""
        raise ConfigError(f"DATABASE_URL: queuelog runs on sqlite or postgresql, "
                          f"not {backend!r}{hint}")
    return _BY_NAME[backend]


def of(engine: Engine) -> Dialect:
    """The dialect of an engine made by ``make_engine``."""
    return _BY_NAME[engine.dialect.name]


def writer(engine: Engine) -> Engine:
    """The engine that begins write transactions with the write lock (SQLite: IMMEDIATE)."""
    return of(engine).writer(engine)

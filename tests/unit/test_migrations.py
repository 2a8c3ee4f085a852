"""Schema migrations: empty -> head, the pre-Alembic release -> head, a lock, one truth.

These tests need databases the template fixture did not make, so each gets its own: a fresh
SQLite file, or on PostgreSQL a schema of its own (``search_path``), dropped afterwards,
so the shared test tables are never touched.
"""
from __future__ import annotations

import os
import pathlib
import re
import secrets
import subprocess
import sys
import threading
import time
from typing import Any, Iterator

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, event, inspect, select
from sqlalchemy.engine import make_url

from conftest import BACKENDS
from helpers import minute_rows, sent_statements
from queuelog import create_app
from queuelog.model.problems import ConfigError
from queuelog.model.jobs import Status
from queuelog.server.store.tables import job_counts, metadata, paused_types, type_limits
from queuelog.server import migrations
from queuelog.server.store import NewJob, Store, revisions
from queuelog.server.store.migrate import alembic_config, current, head, scripts

ROOT = pathlib.Path(__file__).resolve().parents[2]
LEGACY_TABLES = ("jobs", "job_attempts", "api_keys", "users")
# The newest revision file's id: a new migration moves it, and these tests with it.
HEAD = migrations.HEAD


@pytest.fixture(params=BACKENDS)
def fresh_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """An empty database (no tables at all) of each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/fresh.sqlite3"
        return
    base = request.getfixturevalue("pg_ready")
    schema = f"qmig_{secrets.token_hex(4)}"
    admin = create_engine(base)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    try:
        yield make_url(base).update_query_dict(
            {"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        admin.dispose()


def differences(url: str) -> list[Any]:
    """What Alembic's autogenerate would change to make the database match schema.py."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            return compare_metadata(context, metadata)  # type: ignore[no-any-return]
    finally:
        engine.dispose()


def legacy_store(url: str) -> Store:
    """A database as the release before Alembic made it: its four tables, no revision."""
    baseline = scripts().get_revision("0001").module
    store = Store(url)
    baseline.metadata.create_all(store.engine)  # what that release's create_schema did
    return store


def fill_every_state(store: Store) -> None:
    """Jobs in every status (with history and idempotency keys), keys and users."""
    def new(key: str | None = None, retries: int = 3) -> NewJob:
        return NewJob(producer="billing", type="email", payload_json='{"n": 1}', priority=10,
                      max_retries=retries, idempotency_key=key, request_hash=key and "h" * 64)
    # Today's claim skips paused and limited types, tables that release did not have: lent
    # for the fill.
    paused_types.create(store.engine)
    type_limits.create(store.engine)
    job_counts.create(store.engine)  # read with the limiter rows (running per type)
    # Today's job statements read and write the columns schedules (0007), outcomes (0012),
    # workflows (0013) and trace context (0014) added: lent too.
    with store.engine.begin() as conn:
        for column in LENT_JOB_COLUMNS:
            conn.exec_driver_sql(f"ALTER TABLE jobs ADD COLUMN {column}")
    store.enqueue(new("pending-1"))
    done, _ = store.enqueue(new("done-1"))
    store.claim("w1", lease_seconds=60)  # pending-1 is older: it is claimed first, stays running
    store.claim("w1", lease_seconds=60)
    store.complete(done.id, "w1", 1, '{"ok": true}')
    failed, _ = store.enqueue(new(retries=0))
    store.claim("w1", lease_seconds=60)
    store.fail(failed.id, "w1", 1, "boom")
    cancelled, _ = store.enqueue(new())
    store.cancel(cancelled.id)
    store.enqueue(new("still-pending"))
    store.accounts.create_key("billing", "producer", types=["email"], max_priority=20)
    store.accounts.create_key("old", "worker", types=None, max_priority=10)
    store.accounts.revoke_key("old")
    store.accounts.create_user("ann", "pbkdf2:sha256:1000$salt$hash", "admin")
    paused_types.drop(store.engine)
    type_limits.drop(store.engine)
    job_counts.drop(store.engine)
    with store.engine.begin() as conn:
        for column in LENT_JOB_COLUMNS:
            conn.exec_driver_sql(f"ALTER TABLE jobs DROP COLUMN {column.split()[0]}")


LENT_JOB_COLUMNS = ("schedule VARCHAR(100)", "scheduled_for BIGINT", "progress TEXT",
                    "watched BOOLEAN NOT NULL DEFAULT false", "depends_on TEXT",
                    "on_parent_failure VARCHAR(8)", "cancelled_by_parent BIGINT",
                    "waiting_for INTEGER", "has_dependents BOOLEAN NOT NULL DEFAULT false",
                    "traceparent TEXT", "tracestate TEXT")


def dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the release's four tables, in key order (that release's columns)."""
    legacy = scripts().get_revision("0001").module.metadata
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {name: [tuple(r) for r in conn.execute(
                select(legacy.tables[name]).order_by(
                    *legacy.tables[name].primary_key.columns))]
                    for name in LEGACY_TABLES}
    finally:
        engine.dispose()


def test_an_empty_database_is_created_at_head(fresh_url):
    store = Store(fresh_url)
    try:
        assert current(store.engine) is None
        store.create_schema()
        assert current(store.engine) == head() == HEAD
        assert {"audit_events", "paused_types", "signin_failures", *LEGACY_TABLES} <= set(
            inspect(store.engine).get_table_names())
    finally:
        store.close()


def test_the_migrations_and_schema_py_agree(fresh_url):
    """Autogenerate finds nothing to do: the tables the migrations make are schema.py's."""
    store = Store(fresh_url)
    store.create_schema()
    store.close()
    assert differences(fresh_url) == []


def test_the_agreement_check_sees_a_difference(fresh_url):
    """The check above can fail: a database one index short of schema.py is reported."""
    store = Store(fresh_url)
    store.create_schema()
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP INDEX ix_audit_at")
    store.close()
    found = differences(fresh_url)
    assert [d[0] for d in found] == ["add_index"] and d_name(found[0]) == "ix_audit_at"


def d_name(diff: Any) -> str:
    """The name of the object an autogenerate difference is about."""
    return diff[1].name  # type: ignore[no-any-return]


def test_the_previous_release_is_stamped_and_upgraded_with_its_data(fresh_url):
    store = legacy_store(fresh_url)
    fill_every_state(store)
    # That release added indexes at start-up, so an old file may lack a recent one.
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP INDEX ix_jobs_status_type_id")
    before = dump(fresh_url)
    # Every status that release knew (``blocked`` came with workflows, 0013).
    assert {r[4] for r in before["jobs"]} == {s.value for s in Status} - {"blocked"}
    assert current(store.engine) is None
    store.create_schema()
    assert current(store.engine) == head()
    assert dump(fresh_url) == before
    assert differences(fresh_url) == []
    store.close()
    # And the upgraded database serves: the old key works, its jobs and keys are there.
    app = create_app({"TESTING": True, "DATABASE_URL": fresh_url, "SECRET_KEY": "x",
                      "BOOTSTRAP_ADMIN": False})
    try:
        s = app.extensions["queuelog.store"]
        assert s.accounts.has_users()
        replay, created = s.enqueue(NewJob(producer="billing", type="email",
                                           payload_json='{"n": 1}', priority=10,
                                           max_retries=3, idempotency_key="still-pending",
                                           request_hash="h" * 64))
        assert not created and replay.status is Status.PENDING
    finally:
        app.extensions["queuelog.store"].close()


def test_downgrade_and_upgrade_again(fresh_url):
    """0002's downgrade removes exactly its tables; the upgrade brings them back."""
    store = Store(fresh_url)
    store.create_schema()
    with store.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0001")
    assert current(store.engine) == "0001"
    assert not {"audit_events", "paused_types", "signin_failures"} & set(
        inspect(store.engine).get_table_names())
    store.create_schema()
    assert current(store.engine) == head()
    store.close()
    assert differences(fresh_url) == []


def changes_schema(statement: str, parameters: Any) -> bool:
    """A statement that changes the schema or stamps its revision."""
    return statement.lstrip().upper().startswith(("CREATE", "ALTER", "DROP", "INSERT"))


def test_upgrades_started_together_take_turns(fresh_url):
    """Like gunicorn workers starting together on a pre-Alembic database.

    Each upgrade is slowed down after it has read the revision, before its first change to
    the schema, so without the lock both would read "no revision" and both would stamp and
    create tables: one would fail.
    """
    legacy_store(fresh_url).close()  # the longer path: complete, stamp, then 0002
    slowed: set[int] = set()

    def slow(conn: Any, statement: str) -> None:
        if threading.get_ident() not in slowed:  # each upgrade's first change, once
            slowed.add(threading.get_ident())
            time.sleep(0.5)
    stores = [Store(fresh_url) for _ in range(3)]
    errors: list[BaseException] = []

    def run(store: Store) -> None:
        try:
            with sent_statements(store.engine, changes_schema, slow, before=True):
                store.create_schema()
        except BaseException as exc:  # reported below, with the others
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for s in stores:
        s.close()
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    engine = create_engine(fresh_url)
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").all() == [
                (head(),)]
    finally:
        engine.dispose()
    assert differences(fresh_url) == []


def test_sqlite_indexed_by_names_are_indexes_the_migrations_make(tmp_path):
    """The store pins SQLite to indexes by name; a migration renaming one must fail here."""
    # Index names, not prose: every queuelog index is named ix_... or uq_...
    pin = re.compile(r"INDEXED BY ((?:ix|uq)_\w+)")
    store_dir = ROOT / "queuelog" / "server" / "store"
    pinners = {store_dir / "sql" / "sqlite.py", store_dir / "backends" / "sqlite.py"}
    pinned = {name for p in pinners for name in pin.findall(p.read_text("utf-8"))}
    assert {"ix_jobs_claim", "ix_jobs_pending_type_claim", "ix_jobs_lease"} <= pinned
    # SQLite's backend is the only place that pins: a pin elsewhere would escape this check.
    elsewhere = {m.name for m in store_dir.rglob("*.py")
                 if m not in pinners and pin.search(m.read_text("utf-8"))}
    assert elsewhere == set()
    url = f"sqlite:///{tmp_path}/q.sqlite3"
    store = Store(url)
    store.create_schema()
    made = {ix["name"] for t in inspect(store.engine).get_table_names()
            for ix in inspect(store.engine).get_indexes(t)}
    store.close()
    declared = {ix.name for t in metadata.sorted_tables for ix in t.indexes}
    assert pinned <= made and pinned <= declared, pinned - (made & declared)


def test_cli_db_current_and_upgrade(fresh_url, tmp_path):
    legacy_store(fresh_url).close()
    app = create_app({"TESTING": True, "DATABASE_URL": fresh_url, "SECRET_KEY": "x",
                      "BOOTSTRAP_ADMIN": False}, serving=False)
    store = app.extensions["queuelog.store"]
    try:
        runner = app.test_cli_runner()
        # create_app upgraded already (every start does); go back one to see `db upgrade` work.
        with store.engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0001")
        out = runner.invoke(args=["db", "current"])
        assert out.exit_code == 0 and out.output.strip() == f"0001 (head is {HEAD})", out.output
        out = runner.invoke(args=["db", "upgrade"])
        assert out.exit_code == 0, out.output
        assert f"upgraded from 0001 to {HEAD}" in out.output
        out = runner.invoke(args=["db", "current"])
        assert out.output.strip() == f"{HEAD} (head)", out.output
        out = runner.invoke(args=["db", "upgrade"])
        assert out.exit_code == 0 and f"already at {HEAD}" in out.output, out.output
        out = runner.invoke(args=["init-db"])
        assert out.exit_code == 0 and HEAD in out.output, out.output
    finally:
        store.close()


def test_db_current_reports_the_revision_found_not_after_an_upgrade(tmp_path):
    """`queuelog db` loads the app without the start-up upgrade: an operator who looks first
    sees the old revision, and `db upgrade` is what moves it."""
    url = f"sqlite:///{tmp_path}/q.sqlite3"
    store = Store(url)
    store.create_schema()
    with store.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0002")
    store.close()
    env = {**os.environ, "QUEUELOG_DATABASE_URL": url, "QUEUELOG_SECRET_KEY": "x",
           "PYTHONPATH": str(ROOT)}

    def run(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "queuelog", *args], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()
    assert run("db", "current") == f"0002 (head is {HEAD})"
    looked = Store(url)
    assert current(looked.engine) == "0002"  # looking changed nothing
    looked.close()
    assert f"upgraded from 0002 to {HEAD}" in run("db", "upgrade")
    assert run("db", "current") == f"{HEAD} (head)"


def test_postgresql_jobs_table_vacuums_early(fresh_url):
    """Revision 0004: the claim path's dead tuples are vacuumed at 1%, pages keep 20% free."""
    store = Store(fresh_url)
    try:
        store.create_schema()
        if store.engine.dialect.name != "postgresql":
            assert current(store.engine) == HEAD  # nothing to set; the revision still applies
            return
        with store.engine.connect() as conn:
            options = set(conn.exec_driver_sql(
                "SELECT reloptions FROM pg_class WHERE oid = 'jobs'::regclass").scalar() or ())
        assert {"fillfactor=80", "autovacuum_vacuum_scale_factor=0.01",
                "autovacuum_vacuum_cost_delay=0"} <= options
    finally:
        store.close()


def test_the_package_names_alembics_head() -> None:
    """Store.create_schema trusts migrations.HEAD, read from the files' names, to skip
    Alembic on a database at head: it is the head Alembic reads from the files' contents."""
    assert migrations.HEAD == head()


def test_a_database_at_head_starts_without_alembic_and_a_behind_one_upgrades(fresh_url):
    """At head: one read, no upgrade. One revision behind: the upgrade runs."""
    store = Store(fresh_url)
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)
    try:
        store.create_schema()
        event.listen(store.engine, "before_cursor_execute", record)
        try:
            store.create_schema()
        finally:
            event.remove(store.engine, "before_cursor_execute", record)
        assert revisions(store.engine) == [HEAD]
        assert len(sent) == 1 and "alembic_version" in sent[0], sent  # the one read
        with store.engine.begin() as conn:
            command.downgrade(alembic_config(conn), "-1")
        assert revisions(store.engine) != [HEAD]
        store.create_schema()
        assert revisions(store.engine) == [HEAD]
    finally:
        store.close()
    assert differences(fresh_url) == []


def test_0015_fills_the_rollup_from_the_two_hours_before_the_newest_end(fresh_url, clock):
    """An upgraded server's pages show the hour they showed before; then the trigger counts."""
    store = Store(fresh_url)
    store.clock = clock
    try:
        store.create_schema()
        for _ in range(4):
            store.enqueue(NewJob(producer="billing", type="email", payload_json="{}",
                                 priority=0, max_retries=0))
        old = store.claim("w1")
        store.complete(old.id, "w1", old.attempt)  # three hours before the newest end
        clock.advance(3 * 3600)
        done, bad = store.claim("w1"), store.claim("w2")
        store.complete(done.id, "w1", done.attempt)
        store.fail(bad.id, "w2", bad.attempt, "boom")
        minute = clock.now - clock.now % 60_000_000
        recent = {(minute, "email", "w1"): (1, 0), (minute, "email", "w2"): (0, 1)}
        assert len(minute_rows(store)) == 3 and recent.items() <= minute_rows(store).items()
        with store.engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0014")
        assert "attempt_minutes" not in inspect(store.engine).get_table_names()
        store.create_schema()
        assert minute_rows(store) == recent
        last = store.claim("w1")
        store.complete(last.id, "w1", last.attempt)
        assert minute_rows(store) == {**recent, (minute, "email", "w1"): (2, 0)}
    finally:
        store.close()


def refused_at_start(url: str, match: str, folder: pathlib.Path,
                     *commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """The app refuses ``url`` at its start (ConfigError matching ``match``), and each of
    ``commands`` exits 1 without a traceback; their processes, to read their one line."""
    with pytest.raises(ConfigError, match=match):
        create_app({"TESTING": True, "DATABASE_URL": url, "SECRET_KEY": "x",
                    "BOOTSTRAP_ADMIN": False}, serving=False)
    env = {**os.environ, "QUEUELOG_DATABASE_URL": url, "QUEUELOG_SECRET_KEY": "x",
           "QUEUELOG_BOOTSTRAP_ADMIN": "false", "PYTHONPATH": str(ROOT)}
    procs = [subprocess.run([sys.executable, "-m", "queuelog", *args], env=env, cwd=folder,
                            capture_output=True, text=True, timeout=120) for args in commands]
    for proc in procs:
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, (proc.args, proc.stderr)
    return procs


def test_a_database_a_newer_release_upgraded_is_refused_in_one_line(fresh_url, tmp_path):
    """A revision this release does not know (a newer queuelog's): every start and command
    says so in one line, exit 1, and changes nothing; Alembic's CommandError was a
    traceback from each of them."""
    store = Store(fresh_url)
    store.create_schema()
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
    store.close()
    # Every command and start goes through migrate.upgrade: two commands show the one line.
    for proc in refused_at_start(fresh_url, "revision 9999, which this release", tmp_path,
                                 ["keys", "list"], ["db", "upgrade"]):
        assert "revision 9999, which this release of queuelog" in proc.stderr, proc.args
    looked = Store(fresh_url)
    assert current(looked.engine) == "9999"  # nothing was changed
    looked.close()


def test_a_database_another_application_made_is_refused_in_one_line(fresh_url, tmp_path):
    """A ``jobs`` table of another application's: the start stops with one line naming
    DATABASE_URL, exit 1; PostgreSQL's ProgrammingError (column "status" does not exist)
    was a traceback from every command and start."""
    engine = create_engine(fresh_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE jobs (x INTEGER)")
    engine.dispose()
    [proc] = refused_at_start(fresh_url, "DATABASE_URL", tmp_path, ["keys", "list"])
    assert proc.stderr.startswith("Error: configuration: DATABASE_URL "), proc.stderr


def test_a_file_that_is_no_sqlite_database_is_refused_in_one_line(tmp_path):
    """DATABASE_URL naming a file that is not SQLite (a dump, a text file): one line, exit
    1, the file untouched; sqlite3's DatabaseError ("file is not a database") was a
    traceback."""
    path = tmp_path / "notes.txt"
    path.write_bytes(b"not a database, but some notes\n" * 100)
    env = {**os.environ, "QUEUELOG_DATABASE_URL": f"sqlite:///{path}",
           "QUEUELOG_SECRET_KEY": "x", "QUEUELOG_BOOTSTRAP_ADMIN": "false",
           "PYTHONPATH": str(ROOT)}
    for args in (["keys", "list"], ["db", "current"], ["init-db"]):
        proc = subprocess.run([sys.executable, "-m", "queuelog", *args], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert "cannot be used: file is not a database" in proc.stderr, (args, proc.stderr)
    assert path.read_bytes() == b"not a database, but some notes\n" * 100

"""``queuelog backup PATH``: a consistent copy of a live SQLite database, WAL content included."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import stat
import threading
import time
from typing import Any

import pytest
from sqlalchemy import insert

from helpers import SQLITE_ONLY
from queuelog.server.store.tables import jobs
from queuelog.server.store import NewJob, Store
from queuelog.server.store.migrate import head


def backup(app: Any, *args: str) -> Any:
    """Run ``queuelog backup`` with ``args``."""
    with app.app_context():
        return app.test_cli_runner().invoke(args=["backup", *args])


def enqueue(store: Store, n: int) -> list[int]:
    """Enqueue ``n`` email jobs, one transaction each; return their ids."""
    return [store.enqueue(NewJob(producer="billing", type="email", payload_json='{"i": 1}',
                                 priority=0, max_retries=3))[0].id for _ in range(n)]


def rows(path: Any, sql: str) -> list[tuple[Any, ...]]:
    """Run one query on a backup file."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchall()


@SQLITE_ONLY
def test_backup_includes_what_is_still_in_the_wal(app, store, tmp_path):
    """The issue's stale copy: a retry still in the WAL was missing from a plain cp."""
    ids = enqueue(store, 5)
    live = store.engine.url.database
    assert os.path.getsize(live + "-wal") > 0  # committed, not yet checkpointed
    shutil.copyfile(live, tmp_path / "cp.sqlite3")
    assert rows(tmp_path / "cp.sqlite3", "SELECT count(*) FROM jobs") == [(0,)]  # why cp fails
    result = backup(app, str(tmp_path / "copy.sqlite3"))
    assert result.exit_code == 0, result.output
    assert "Backed up 5 job(s)" in result.output
    copy = tmp_path / "copy.sqlite3"
    assert [r[0] for r in rows(copy, "SELECT id FROM jobs ORDER BY id")] == ids
    assert rows(copy, "PRAGMA integrity_check") == [("ok",)]
    assert rows(copy, "SELECT version_num FROM alembic_version") == [(head(),)]
    assert stat.S_IMODE(os.stat(copy).st_mode) == 0o600
    assert not os.path.exists(str(copy) + "-wal")  # one self-contained file


@SQLITE_ONLY
def test_backup_while_writes_go_on_is_a_consistent_snapshot(app, store, tmp_path):
    """Each write commits two jobs at once; every copy holds whole pairs, none half."""
    with store.engine.begin() as conn:  # some bulk, so that a copy takes a moment
        conn.execute(insert(jobs), [_row(store, "bulk", i) for i in range(20_000)])
    writer = Store(store.engine.url.render_as_string(hide_password=False))
    committed = [0]
    stop = threading.Event()

    def write() -> None:
        deadline = time.monotonic() + 30
        pair = 0
        while not stop.is_set() and time.monotonic() < deadline and pair < 100_000:
            pair += 1
            with writer.engine.begin() as conn:
                conn.execute(insert(jobs), [_row(store, f"pair-{pair}", 0),
                                            _row(store, f"pair-{pair}", 1)])
            committed[0] = pair

    thread = threading.Thread(target=write)
    thread.start()
    try:
        copies = []
        for n in range(3):
            while committed[0] < 20 * (n + 1) and thread.is_alive():
                time.sleep(0.01)
            floor = committed[0]  # committed before this backup began
            path = tmp_path / f"copy-{n}.sqlite3"
            result = backup(app, str(path))
            assert result.exit_code == 0, result.output
            copies.append((path, floor))
    finally:
        stop.set()
        thread.join(timeout=30)
        writer.close()
    assert not thread.is_alive()
    for path, floor in copies:
        assert rows(path, "PRAGMA integrity_check") == [("ok",)]
        pairs = rows(path, "SELECT json_extract(payload, '$.tag') AS tag, count(*) FROM jobs "
                           "WHERE tag LIKE 'pair-%' GROUP BY tag")
        assert all(count == 2 for _, count in pairs), [p for p in pairs if p[1] != 2]
        assert len(pairs) >= floor  # every commit made before the backup is in it
        bulk = "SELECT count(*) FROM jobs WHERE json_extract(payload, '$.tag') = 'bulk'"
        assert rows(path, bulk) == [(20_000,)]


def _row(store: Store, tag: str, i: int) -> dict[str, Any]:
    now = store.clock()
    return {"type": "email", "payload": json.dumps({"tag": tag, "i": i}), "priority": 0,
            "status": "pending", "attempt": 0, "retry_count": 0, "max_retries": 3,
            "producer": "billing", "run_at": now, "created_at": now, "updated_at": now}


@SQLITE_ONLY
def test_backup_replaces_an_older_backup_and_refuses_the_live_file(app, store, tmp_path):
    path = tmp_path / "nightly.sqlite3"
    path.write_bytes(b"yesterday")
    enqueue(store, 2)
    assert backup(app, str(path)).exit_code == 0
    assert rows(path, "SELECT count(*) FROM jobs") == [(2,)]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    live = store.engine.url.database
    refused = backup(app, live)
    assert refused.exit_code == 1 and "live database" in refused.output
    refused = backup(app, str(tmp_path / "no-such-dir" / "x.sqlite3"))
    assert refused.exit_code == 1 and "does not exist" in refused.output
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".queuelog")) == []
    assert rows(live, "SELECT count(*) FROM jobs") == [(2,)]


@SQLITE_ONLY
def test_backup_to_a_destination_that_cannot_be_written_is_refused_in_one_line(
        app, store, tmp_path):
    """A name longer than the file system takes (os.replace's OSError), or a folder no file
    can be made in (/proc: mkstemp's): one ``Error:`` line, exit 1, no temporary file
    left; they were tracebacks."""
    enqueue(store, 1)
    for destination, said in ((tmp_path / ("x" * 300 + ".sqlite3"), "File name too long"),
                              ("/proc/queuelog-backup.sqlite3", "No such file")):
        refused = backup(app, str(destination))
        assert refused.exit_code == 1, refused.output
        assert refused.output.startswith("Error: Cannot write the backup to "), refused.output
        assert said in refused.output and len(refused.output.strip().splitlines()) == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".queuelog")] == []


@SQLITE_ONLY
def test_backup_refuses_a_destination_that_is_no_regular_file(app, store, tmp_path):
    """A FIFO (or a device: ``queuelog backup /dev/null`` as root) was replaced by the
    backup file, the rename taking its name; now refused in one line, left as it was."""
    enqueue(store, 1)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    refused = backup(app, str(fifo))
    assert refused.exit_code == 1, refused.output
    assert "is not a regular file" in refused.output
    assert len(refused.output.strip().splitlines()) == 1, refused.output
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".queuelog")] == []


def snapshot(path: str) -> bytes | None:
    """A file's bytes, or None when it does not exist."""
    return open(path, "rb").read() if os.path.exists(path) else None


@SQLITE_ONLY
@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
@pytest.mark.parametrize("via_symlink", [False, True])
def test_backup_refuses_to_clobber_the_live_databases_own_files(app, store, tmp_path, suffix,
                                                                  via_symlink):
    """Bug 9: a destination named like the live -wal, -shm or -journal was accepted."""
    ids = enqueue(store, 3)  # committed into the -wal, not yet checkpointed
    live = store.engine.url.database
    companion = live + suffix
    destination = companion
    if via_symlink:
        destination = str(tmp_path / "innocent.sqlite3")
        os.symlink(companion, destination)
    before = snapshot(companion)
    refused = backup(app, destination)
    assert refused.exit_code == 1
    assert len(refused.output.strip().splitlines()) == 1, refused.output  # one line
    assert suffix in refused.output and "live database" in refused.output
    assert snapshot(companion) == before  # untouched (or still absent)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".queuelog")] == []
    assert [j.id for j in store.list_jobs().jobs] == ids[::-1]  # nothing lost
    assert rows(live, "PRAGMA integrity_check") == [("ok",)]


@pytest.mark.parametrize("backend", [pytest.param("postgresql",
                                                  marks=pytest.mark.postgresql)])
def test_backup_on_postgresql_points_to_pg_dump(app, tmp_path):
    result = backup(app, str(tmp_path / "x.dump"))
    assert result.exit_code == 1
    assert "pg_dump" in result.output
    assert not os.path.exists(tmp_path / "x.dump")

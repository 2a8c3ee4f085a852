"""The instance folder and SQLite files are private (0700, 0600), and the secret key is
created whole, once, however many processes start at once."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any


from queuelog import create_app
from queuelog.server.instance import protect, sqlite_path

ROOT = Path(__file__).resolve().parents[2]


def mode(path: Any) -> int:
    """The permission bits of a file or folder."""
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_sqlite_database_and_its_wal_and_shm_are_0600(tmp_path):
    old = os.umask(0o022)  # the usual umask: SQLite alone would make the files 0644
    try:
        app = create_app({"DATABASE_URL": f"sqlite:///{tmp_path}/q.sqlite3",
                          "SECRET_KEY": "x", "BOOTSTRAP_ADMIN": False})
        store = app.extensions["queuelog.store"]
        store.accounts.create_key("billing", "producer")  # a write: -wal and -shm exist now
        files = [tmp_path / f"q.sqlite3{suffix}" for suffix in ("", "-wal", "-shm")]
        assert all(f.exists() for f in files)
        assert [oct(mode(f)) for f in files] == [oct(0o600)] * 3
        store.close()
    finally:
        os.umask(old)


def test_existing_files_and_the_instance_folder_are_tightened(tmp_path):
    folder = tmp_path / "instance"
    folder.mkdir(mode=0o755)
    db = tmp_path / "old.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").write_bytes(b"")
        os.chmod(f"{db}{suffix}", 0o644)
    protect(str(folder), f"sqlite:///{db}")
    assert mode(folder) == 0o700
    assert [mode(f"{db}{s}") for s in ("", "-wal", "-shm")] == [0o600] * 3


def test_only_sqlite_files_are_touched():
    assert sqlite_path("postgresql+psycopg://u:p@h/db") is None
    assert sqlite_path("sqlite://") is None and sqlite_path("sqlite:///:memory:") is None
    assert sqlite_path("sqlite:////var/lib/q.sqlite3") == "/var/lib/q.sqlite3"


ROUNDS, PROCESSES, STEP = 10, 6, 0.1
RACE = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    import secrets
    from queuelog.server.config import instance_secret
    # A slow writer (a busy disk, a descheduled process): making the key takes 50 ms, so a
    # key file that became visible before it was written would be read empty by the others.
    _token_hex = secrets.token_hex
    secrets.token_hex = lambda n: (time.sleep(0.05), _token_hex(n))[1]
    start = float(sys.argv[3])
    for i in range(int(sys.argv[4])):
        # Every process meets every other at each round's instant, then creates or reads.
        at = start + i * float(sys.argv[5])
        time.sleep(max(0.0, at - time.time() - 0.005))
        while time.time() < at:
            pass
        print(instance_secret(os.path.join(sys.argv[2], str(i))), flush=True)
""")


def test_processes_starting_at_once_all_read_the_one_whole_key(tmp_path):
    """Six processes on empty folders, ten rounds: one whole key per folder, for every one."""
    import time
    for i in range(ROUNDS):
        (tmp_path / str(i)).mkdir()
    start = time.time() + 2.0  # after every process has imported queuelog
    args = [str(ROOT), str(tmp_path), str(start), str(ROUNDS), str(STEP)]
    procs = [subprocess.Popen([sys.executable, "-c", RACE, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(PROCESSES)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-300:] for _, err in outs]
    for i in range(ROUNDS):
        folder = tmp_path / str(i)
        key = (folder / "secret_key").read_text().strip()
        assert len(key) == 64
        assert [out.splitlines()[i] for out, _ in outs] == [key] * PROCESSES, i
        assert mode(folder / "secret_key") == 0o600
        assert [p.name for p in folder.iterdir()] == ["secret_key"]  # no temporary file left

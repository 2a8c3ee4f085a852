"""``queuelog backup``: a consistent copy of a live SQLite database (SQLite's online backup).

Copying the file with ``cp`` misses what is still in the write-ahead log (``-wal``) and can
catch a page mid-write. The backup API reads through SQLite itself: it copies one snapshot,
WAL content included, while the server keeps writing (in WAL mode readers and the writer do
not block each other). It copies every page in one step: a step-by-step copy restarts
whenever another connection writes, and a busy queue would never let it finish.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
import tempfile

from sqlalchemy import Engine

from queuelog.server.store import backends


class BackupRefused(Exception):
    """The backup cannot be made (wrong backend, bad destination); the message says why."""


@dataclasses.dataclass(frozen=True)
class BackupResult:
    """What was written."""

    path: str
    bytes: int
    jobs: int


def _refuse_live_files(source: str, destination: str, companions: tuple[str, ...]) -> None:
    """Refuse a destination that is the live database or one of its -wal/-shm/-journal files.

    Replacing the -wal would clobber committed transactions not yet checkpointed, and the
    -shm or -journal would corrupt the live database for every connection. Compared by
    real path (symlinks resolved), and by inode where the file exists (hard links).
    """
    live = os.path.realpath(source)
    target = os.path.realpath(destination)
    for suffix in ("", *companions):
        path = live + suffix
        if target == path or (os.path.exists(path) and os.path.exists(target)
                              and os.path.samefile(path, target)):
            what = f"the live database's {suffix} file" if suffix else "the live database itself"
            raise BackupRefused(f"The backup would overwrite {what} ({path}); "
                                "choose another destination.")


def backup_sqlite(engine: Engine, destination: str) -> BackupResult:
    """Copy the engine's SQLite database to ``destination`` (mode 0600), atomically."""
    db = backends.of(engine)
    if db.backup_refusal is not None:
        raise BackupRefused(db.backup_refusal)
    source = engine.url.database or ""
    if source in ("", ":memory:") or not os.path.exists(source):
        raise BackupRefused(f"There is no database file to back up at {source!r}.")
    destination = os.path.abspath(destination)
    if os.path.isdir(destination):
        raise BackupRefused(f"{destination} is a directory; give the backup file's path.")
    if os.path.exists(destination) and not os.path.isfile(destination):
        # A device or a FIFO: the rename below would replace it with the backup (as root,
        # `queuelog backup /dev/null` left a 0600 regular file where /dev/null had been).
        raise BackupRefused(f"{destination} is not a regular file (a device, a FIFO?); "
                            "give the backup file's path.")
    _refuse_live_files(source, destination, db.companions)
    folder = os.path.dirname(destination)
    if not os.path.isdir(folder):
        raise BackupRefused(f"The folder {folder} does not exist.")
    # A temporary file beside the destination, renamed over it at the end: a backup that
    # fails half-way never replaces the last good one. 0600 from the start: the copy holds
    # the same password hashes, token hashes, payloads and error text as the database.
    try:
        fd, tmp = tempfile.mkstemp(prefix=".queuelog-backup-", suffix=".tmp", dir=folder)
    except OSError as exc:  # a folder that cannot be written (permissions, read-only, /proc)
        raise _cannot_write(destination, exc) from None
    os.close(fd)
    os.chmod(tmp, 0o600)
    try:
        raw = engine.raw_connection()
        try:
            with contextlib.closing(sqlite3.connect(tmp)) as target:
                raw.driver_connection.backup(target)  # type: ignore[union-attr]
                # A self-contained file (rollback journal, no -wal beside it), so copying or
                # moving the backup file alone is always safe; the server turns WAL back on.
                target.execute("PRAGMA journal_mode=DELETE")
                jobs = int(target.execute("SELECT count(*) FROM jobs").fetchone()[0])
        finally:
            raw.close()
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        try:
            os.replace(tmp, destination)
        except OSError as exc:  # a name too long, a file in the way that cannot be replaced
            raise _cannot_write(destination, exc) from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
    return BackupResult(destination, os.path.getsize(destination), jobs)


def _cannot_write(destination: str, exc: OSError) -> BackupRefused:
    """The refusal for a destination the operating system would not let us write."""
    return BackupRefused(f"Cannot write the backup to {destination}: "
                         f"{exc.strerror or exc}.")

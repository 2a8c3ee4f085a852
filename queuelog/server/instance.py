"""The instance folder and the SQLite files: readable by the user queuelog runs as, no one else.

They hold password and token hashes, the secret key, payloads and error text. SQLite creates
its -wal and -shm files (later, at the first write) with the permissions of the database file,
so making that file 0600 before SQLite first opens it covers them too; existing ones (from an
older queuelog, or copied in) are tightened at every start.
"""
from __future__ import annotations

import os
import sys

from sqlalchemy.engine import make_url

from queuelog.server.store.backends import SQLiteBackend

FOLDER_MODE = 0o700
FILE_MODE = 0o600
SQLITE_COMPANIONS = ("", *SQLiteBackend.companions)


def protect(instance_path: str, database_url: str) -> None:
    """Make the instance folder 0700 and a SQLite database's files 0600 (creating them so)."""
    os.makedirs(instance_path, mode=FOLDER_MODE, exist_ok=True)
    _chmod(instance_path, FOLDER_MODE)
    path = sqlite_path(database_url)
    if path is None:
        return
    try:
        # Create it empty at 0600 (SQLite would make it 0644 under the usual umask); an
        # existing file is left as it is, bar its mode.
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE))
    except OSError:
        return  # a folder that does not exist: the engine's own error says so, better
    for suffix in SQLITE_COMPANIONS:
        if os.path.exists(path + suffix):
            _chmod(path + suffix, FILE_MODE)


def sqlite_path(database_url: str) -> str | None:
    """The file a SQLite URL names, or None (PostgreSQL, in-memory, a URI filename)."""
    try:
        url = make_url(database_url)
    except Exception:  # noqa: BLE001 - a bad URL is reported by the engine, with its reason
        return None
    if url.get_backend_name() != "sqlite":
        return None
    name = url.database or ""
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    return name


def _chmod(path: str, mode: int) -> None:
    try:
        if os.stat(path).st_mode & 0o777 != mode:
            os.chmod(path, mode)
    except PermissionError:
        # Owned by another user (a shared folder): say so rather than refuse to start.
        print(f"queuelog: warning: cannot make {path} private (mode {mode:o}); "
              "other local users may read it", file=sys.stderr, flush=True)

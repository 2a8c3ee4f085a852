"""The API keys a process has found, kept until any key is revoked on this machine.

Every Bearer request looks its key up; with SQLite the processes that share a database
file share one machine, so a revocation can tell them all without a round trip: it bumps
a counter in ``<database file>-keys``, a file every process maps into memory, after its
commit and before it answers. A lookup reads the counter first and trusts a key it found
under the same counter value; any revocation since drops every process's cache at once.
A revoked key therefore stops working as soon as the revocation has answered, as it did
with a lookup per request (tests/unit/test_key_cache.py).

PostgreSQL keeps the lookup per request: its servers share no memory, and a revocation
that answers only once every server dropped the key needs every server to acknowledge it.
"""
from __future__ import annotations

import fcntl
import mmap
import os
import struct
import threading
from typing import Any

_COUNTER = struct.Struct("<Q")


class KeyCache:
    """Keys by token digest, each with the revocation counter it was read under."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._map: mmap.mmap | None = None
        self._keys: dict[str, tuple[bytes, Any]] = {}
        self._lock = threading.Lock()

    def _mapped(self) -> mmap.mmap | None:
        """The counter's mapping, made on first use; None while its directory is missing
        (the database there does not answer either, and says so in its own words)."""
        if self._map is None:
            with self._lock:
                if self._map is None:
                    try:
                        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
                    except OSError:
                        return None
                    try:
                        if os.fstat(fd).st_size < _COUNTER.size:
                            os.ftruncate(fd, _COUNTER.size)
                        self._map = mmap.mmap(fd, _COUNTER.size)
                    finally:
                        os.close(fd)  # the mapping keeps the file
        return self._map

    def generation(self) -> bytes | None:
        """The revocation counter now (read before a lookup, stored with its key); None
        when there is no counter to read, and then nothing is kept."""
        mapped = self._mapped()
        return None if mapped is None else mapped[:_COUNTER.size]

    def get(self, digest: str, generation: bytes | None) -> Any | None:
        """The key found for ``digest`` under this counter value, or None."""
        hit = self._keys.get(digest)
        return hit[1] if hit is not None and hit[0] == generation else None

    def put(self, digest: str, generation: bytes | None, key: Any) -> None:
        """Keep ``key``, found under ``generation`` (read before its lookup began)."""
        if generation is None:
            return
        with self._lock:
            if len(self._keys) >= 10_000:  # many keys: start over rather than grow
                self._keys.clear()
            self._keys[digest] = (generation, key)

    def bump(self) -> None:
        """Tell every process on this machine that a key was revoked (after the commit)."""
        mapped = self._mapped()
        if mapped is None:
            return  # no counter: no process could have kept a key under it
        with open(self._path, "rb") as lock:  # two revocations at once: both counted
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                (n,) = _COUNTER.unpack(mapped[:_COUNTER.size])
                mapped[:_COUNTER.size] = _COUNTER.pack((n + 1) % 2 ** 64)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

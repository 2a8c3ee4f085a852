"""Failed sign-ins per (username, client address): the throttle's shared memory."""
from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, and_, bindparam, delete, insert, select

from queuelog.server.store.tables import signin_failures as t

SWEEP = 100      # expired rows deleted at most per recorded failure: bounded work per call
KEY_CHARS = 255  # the columns' width


def _key(value: str) -> str:
    # Header text may hold what a column cannot (NUL, lone surrogates, any length).
    # Mapped, never refused: the pair stays per address, so names that collide here can
    # only ever throttle the sender's own address.
    value = value.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
    return value[:KEY_CHARS]


class SignIns:
    """Record, look up and clear the failed sign-ins of one (username, address) pair."""

    def __init__(self, engine: Engine, backend: Any) -> None:
        self.engine = engine
        self._write = backend.writer(engine)
        pair = and_(t.c.username == bindparam("username"), t.c.address == bindparam("address"))
        # The latest failures inside the window, at most as many as the limit: enough to
        # tell whether the pair is over it and, from the last one, when it falls back under.
        self._latest = (select(t.c.at).where(pair, t.c.at > bindparam("since"))
                        .order_by(t.c.at.desc()).limit(bindparam("n")))
        self._insert = insert(t)
        expired = (select(t.c.id).where(t.c.at <= bindparam("since")).order_by(t.c.at)
                   .limit(SWEEP).scalar_subquery())
        self._sweep = delete(t).where(t.c.id.in_(expired))
        self._clear = delete(t).where(pair)

    def latest(self, username: str, address: str, n: int, since: int) -> list[int]:
        """The times of the pair's failures after ``since``, latest first, at most ``n``."""
        with self.engine.begin() as conn:
            return list(conn.execute(self._latest, {
                "username": _key(username), "address": _key(address), "since": since,
                "n": n}).scalars())

    def record(self, username: str, address: str, at: int, expired_before: int) -> None:
        """Store one failure; delete a bounded batch of rows at or before ``expired_before``."""
        with self._write.begin() as conn:
            conn.execute(self._insert, {"username": _key(username), "address": _key(address),
                                        "at": at})
            conn.execute(self._sweep, {"since": expired_before})

    def clear(self, username: str, address: str) -> None:
        """Forget the pair's failures (a correct password)."""
        with self._write.begin() as conn:
            conn.execute(self._clear, {"username": _key(username), "address": _key(address)})

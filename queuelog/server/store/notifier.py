"""The wake-up transport: "a job may have become claimable" and "a watched job finished",
to this process and every other.

One ``Notifier`` per store (its engine's database): PostgreSQL's ``NOTIFY`` inside the
transaction, heard by a ``LISTEN`` connection in each process; SQLite's datagrams to every
process's socket beside the database file after the commit (listen.py). A store verb that
makes a job claimable, or finishes a job a request waits for, calls ``notify`` with that
kind in its transaction; the commit tells.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from sqlalchemy import Engine, event, func, literal

from queuelog.server.store import listen
from queuelog.server.store.engine import wake_folder
from queuelog.server.store.listen import CHANNELS, CLAIMABLE, KINDS
from queuelog.server.store.sql import postgres as pg_sql

# Set on a connection by ``notify``, per kind; what the commit then tells (see ``watch``).
_FLAGS = {kind: f"queuelog.{kind}" for kind in KINDS}


class Notifier:
    """Wake-ups of one engine's database (the base: told after the commit, to no one)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def notify(self, conn: Any, *, told: bool = False, kind: str = CLAIMABLE) -> None:
        """Within ``conn``'s transaction: jobs may have become claimable (or, ``kind``
        FINISHED, a watched job finished). Told at commit to this process (``watch``) and
        to every other; once per transaction and kind however often called (a batch of 500
        is one wake-up). ``told``: the statement just run was ``notifying``, so the other
        processes' part is done."""
        flag = _FLAGS[kind]
        if conn.info.get(flag):
            return
        conn.info[flag] = True
        if not told:
            self._in_transaction(conn, kind)

    def notifying(self, statement: Any) -> Any:
        """``statement`` (with RETURNING) made to tell the other processes itself where
        the database can; run it, then ``notify(conn, told=True)``."""
        return statement

    def watch(self, callbacks: Mapping[str, Callable[[], None]]) -> None:
        """Call ``callbacks[kind]`` after each commit whose transaction notified ``kind``."""
        # A connection goes back to the pool only after its commit (or rollback): so the
        # check-in is "after commit" for Core's engine.begin() blocks. A rollback forgets.
        def checkin(_dbapi_conn: Any, record: Any) -> None:
            if record is None:
                return
            told = [kind for kind in KINDS if record.info.pop(_FLAGS[kind], False)]
            if told:
                for kind in told:
                    callbacks[kind]()
                self._after_commit(told)

        def rollback(conn: Any) -> None:
            try:
                if conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
                    return  # each statement committed itself (one_statement): nothing undone
                for flag in _FLAGS.values():
                    conn.info.pop(flag, None)
            except Exception:  # noqa: BLE001 - an invalidated connection: its record is gone
                pass

        event.listen(self.engine, "rollback", rollback)
        event.listen(self.engine, "checkin", checkin)

    def listen(self, rings: Mapping[str, Callable[[], None]]) -> Any:
        """Start hearing other processes' wake-ups (a thread that calls ``rings[kind]``),
        or None where there is nothing to hear (an in-memory database)."""
        return None

    def _in_transaction(self, conn: Any, kind: str) -> None:
        """Tell other processes within the transaction, where that is how it is done."""

    def _after_commit(self, kinds: list[str]) -> None:
        """Tell other processes after a commit that notified ``kinds``, where that is how."""


class SQLiteNotifier(Notifier):
    """A datagram to every other process's socket in ``<db>-wake/`` after the commit."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.folder = wake_folder(engine)

    def _after_commit(self, kinds: list[str]) -> None:
        """One datagram (naming the kinds) to every other process's socket beside the
        database file."""
        if self.folder is not None:
            listen.send_all(self.folder, kinds)

    def listen(self, rings: Mapping[str, Callable[[], None]]) -> Any:
        """A datagram socket of this process in the database's wake folder."""
        return None if self.folder is None else listen.SocketListener(self.folder, rings)


class PgNotifier(Notifier):
    """``pg_notify`` in the transaction: delivered to every LISTEN at commit, or never."""

    def notifying(self, statement: Any) -> Any:
        """pg_notify in the statement's RETURNING: one round trip fewer than its own
        SELECT; PostgreSQL folds a transaction's equal notifications into one."""
        return statement.returning(  # added to the statement's own RETURNING
            func.pg_notify(literal(CHANNELS[CLAIMABLE]), literal("")).label("notified"))

    def listen(self, rings: Mapping[str, Callable[[], None]]) -> Any:
        """One LISTEN connection (psycopg, outside the pool), read in a thread."""
        conninfo = self.engine.url.set(drivername="postgresql").render_as_string(
            hide_password=False)
        return listen.PgListener(conninfo, rings)

    def _in_transaction(self, conn: Any, kind: str) -> None:
        conn.execute(pg_sql.NOTIFY, {"channel": CHANNELS[kind]})

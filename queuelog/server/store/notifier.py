"""The wake-up transport: "a job may have become claimable", to this process and every other.

One ``Notifier`` per store (its engine's database): PostgreSQL's ``NOTIFY`` inside the
transaction, heard by a ``LISTEN`` connection in each process; SQLite's datagrams to every
process's socket beside the database file after the commit (listen.py). A store verb that
makes a job claimable calls ``notify`` in its transaction; the commit tells.
"""
from __future__ import annotations

from typing import Any, Callable

from sqlalchemy import Engine, event, func, literal

from queuelog.server.store import listen
from queuelog.server.store.engine import wake_folder
from queuelog.server.store.sql import postgres as pg_sql

# Set on a connection by ``notify``; what the commit then tells (see ``watch``).
_CLAIMABLE = "queuelog.claimable"


class Notifier:
    """Wake-ups of one engine's database (the base: told after the commit, to no one)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def notify(self, conn: Any, *, told: bool = False) -> None:
        """Within ``conn``'s transaction: jobs may have become claimable. Told at commit
        to this process (``watch``) and to every other; once per transaction however often
        called (a batch of 500 is one wake-up). ``told``: the statement just run was
        ``notifying``, so the other processes' part is done."""
        if conn.info.get(_CLAIMABLE):
            return
        conn.info[_CLAIMABLE] = True
        if not told:
            self._in_transaction(conn)

    def notifying(self, statement: Any) -> Any:
        """``statement`` (with RETURNING) made to tell the other processes itself where
        the database can; run it, then ``notify(conn, told=True)``."""
        return statement

    def watch(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after each commit whose transaction notified."""
        # A connection goes back to the pool only after its commit (or rollback): so the
        # check-in is "after commit" for Core's engine.begin() blocks. A rollback forgets.
        def checkin(_dbapi_conn: Any, record: Any) -> None:
            if record is not None and record.info.pop(_CLAIMABLE, False):
                callback()
                self._after_commit()

        def rollback(conn: Any) -> None:
            try:
                conn.info.pop(_CLAIMABLE, None)
            except Exception:  # noqa: BLE001 - an invalidated connection: its record is gone
                pass

        event.listen(self.engine, "rollback", rollback)
        event.listen(self.engine, "checkin", checkin)

    def listen(self, ring: Callable[[], None]) -> Any:
        """Start hearing other processes' wake-ups (a thread that calls ``ring``), or
        None where there is nothing to hear (an in-memory database)."""
        return None

    def _in_transaction(self, conn: Any) -> None:
        """Tell other processes within the transaction, where that is how it is done."""

    def _after_commit(self) -> None:
        """Tell other processes after a commit that notified, where that is how."""


class SQLiteNotifier(Notifier):
    """A datagram to every other process's socket in ``<db>-wake/`` after the commit."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.folder = wake_folder(engine)

    def _after_commit(self) -> None:
        """One datagram to every other process's socket beside the database file."""
        if self.folder is not None:
            listen.send_all(self.folder)

    def listen(self, ring: Callable[[], None]) -> Any:
        """A datagram socket of this process in the database's wake folder."""
        return None if self.folder is None else listen.SocketListener(self.folder, ring)


class PgNotifier(Notifier):
    """``pg_notify`` in the transaction: delivered to every LISTEN at commit, or never."""

    def notifying(self, statement: Any) -> Any:
        """pg_notify in the statement's RETURNING: one round trip fewer than its own
        SELECT; PostgreSQL folds a transaction's equal notifications into one."""
        return statement.returning(  # added to the statement's own RETURNING
            func.pg_notify(literal(listen.CHANNEL), literal("")).label("notified"))

    def listen(self, ring: Callable[[], None]) -> Any:
        """One LISTEN connection (psycopg, outside the pool), read in a thread."""
        conninfo = self.engine.url.set(drivername="postgresql").render_as_string(
            hide_password=False)
        return listen.PgListener(conninfo, ring)

    def _in_transaction(self, conn: Any) -> None:
        conn.execute(pg_sql.NOTIFY)

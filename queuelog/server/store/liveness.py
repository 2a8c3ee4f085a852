"""PostgreSQL's pooled connections that the server closed while idle are not used again."""
from __future__ import annotations

import select
from typing import Any

from sqlalchemy import exc as sa_exc


def refuse_closed(dbapi_conn: Any, record: Any, proxy: Any) -> None:
    """Refuse a pooled PostgreSQL connection the server has closed (a restart, a failover,
    pg_terminate_backend): SQLAlchemy then drops it and checks out another, connecting
    anew if need be.

    Without a round trip (no pre-ping: one per checkout slows every claim): a connection
    idle in the pool is sent nothing by the server, unless it is going away (its FATAL
    message and the socket's end wait there), so a socket with something to read at
    checkout is not used. Nothing has been sent on it for this request, so nothing can have
    run twice.
    Each process otherwise answered its first request after a restart 503, however long
    after. (A rare message of the server's while idle, a setting it reports changed,
    costs one reconnection.)
    """
    if dbapi_conn.closed or dbapi_conn.broken:
        raise sa_exc.DisconnectionError("the connection was closed")
    try:
        fd = dbapi_conn.pgconn.socket
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
        readable = bool(poller.poll(0))
    except Exception as e:  # noqa: BLE001 - no socket: psycopg knows the connection lost
        raise sa_exc.DisconnectionError(f"the connection is lost: {e}") from e
    if readable:
        raise sa_exc.DisconnectionError("the server closed the connection while it was idle")

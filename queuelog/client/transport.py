"""The client's HTTP: one server and one API key over a kept-alive connection pool.

JSON goes out and comes back decoded; a non-2xx answer is a ``ProblemError`` and no answer
at all is ``Unreachable`` (``errors.py``). Retrying is not done here (``retries.py``).
"""
from __future__ import annotations

import threading
from typing import Any, Iterator

import httpx

from queuelog.client.errors import ClientError, Unreachable, problem

# Long enough for a slow database; a long poll adds its ``wait`` to the read timeout.
TIMEOUT = httpx.Timeout(10.0, connect=5.0)
# A keep-alive connection idle this long is not used again. gunicorn closes one idle for 2 s
# (its default --keep-alive), and a request sent as it closes one is lost ("Server
# disconnected without sending a response"; httpx's own default keeps them 5 s).
KEEPALIVE_EXPIRY = 1.5


class Connection:
    """The kept-alive pool to one server, authenticated by one key; shared between threads."""

    def __init__(self, url: str, token: str, *, timeout: float | httpx.Timeout = TIMEOUT,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.closed = threading.Event()  # set by close(): retries stop waiting
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self.http = httpx.Client(
            base_url=self.url + "/", timeout=timeout, transport=transport,
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY),
            headers={"Authorization": f"Bearer {token}", "User-Agent": "queuelog-client"})

    def close(self) -> None:
        """Close the connections; retries in other threads give up."""
        self.closed.set()
        self.http.close()

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                params: dict[str, Any] | None = None,
                timeout: httpx.Timeout | None = None) -> Any:
        """One request; the decoded JSON answer (None for 204), or an exception."""
        resp = self.send(method, path, body, params=params, timeout=timeout)
        if resp.status_code == 204:
            return None
        return json_of(resp, self.url)

    def send(self, method: str, path: str, body: dict[str, Any] | None = None, *,
             params: dict[str, Any] | None = None,
             timeout: httpx.Timeout | None = None) -> httpx.Response:
        """One request; the 2xx response, or an exception (ProblemError, Unreachable)."""
        extra: dict[str, Any] = {}
        if timeout is not None:
            extra["timeout"] = timeout
        try:
            resp = self.http.request(method, path, json=body, params=params, **extra)
        except httpx.TransportError as exc:
            raise Unreachable(f"{self.url}: {type(exc).__name__}: {exc}") from exc
        except RuntimeError as exc:  # the client was closed by another thread
            raise Unreachable(f"{self.url}: {exc}") from exc
        if not resp.is_success:
            raise problem(resp)
        return resp

    def waiting(self, wait: float) -> httpx.Timeout | None:
        """The timeout of a request the server may hold ``wait`` seconds (None: the usual)."""
        if not wait:
            return None
        t = self.timeout
        return httpx.Timeout(connect=t.connect, read=(t.read or TIMEOUT.read) + wait,
                             write=t.write, pool=t.pool)

    def pages(self, path: str, field: str, filters: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Every item of a paged list (``next_cursor``), fetched a page at a time."""
        params = {k: v for k, v in filters.items() if v is not None}
        while True:
            page = self.request("GET", path, params=params)
            yield from page[field]
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]


def json_of(resp: httpx.Response, url: str) -> Any:
    """The decoded JSON of a 2xx answer; ``ClientError`` when it is not JSON."""
    try:
        return resp.json()
    except ValueError:
        req = resp.request
        raise ClientError(f"{url}: the answer to {req.method} {req.url.path} is not JSON; "
                          "is this a queuelog server?") from None

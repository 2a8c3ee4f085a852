"""queuelog: a persistent background job queue with an HTTP API and a browser dashboard."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flask import Flask


def _version() -> str:
    """The installed version: the full package's, else the client-only one's (client/)."""
    for dist in ("queuelog", "queuelog-client"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "0+unknown"  # a source tree that was never installed


__version__ = _version()


def create_app(test_config: dict[str, Any] | None = None, *, serving: bool = True) -> Flask:
    """Build the server app (imported here lazily: the client and worker need no Flask)."""
    from queuelog.server import create_app as _create_app
    return _create_app(test_config, serving=serving)

"""queuelog: a persistent background job queue with an HTTP API and a browser dashboard."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flask import Flask

try:
    __version__ = version("queuelog")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"


def create_app(test_config: dict[str, Any] | None = None, *, serving: bool = True) -> Flask:
    """Build the server app (imported here lazily: the client and worker need no Flask)."""
    from queuelog.server import create_app as _create_app
    return _create_app(test_config, serving=serving)

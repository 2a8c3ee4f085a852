"""The OpenAPI 3.1 document (placeholder)."""
from __future__ import annotations

from typing import Any


def document(config: Any) -> dict[str, Any]:
    """The OpenAPI document for this app's configuration."""
    return {"openapi": "3.1.0", "info": {"title": "queuelog", "version": "0.1.0"}, "paths": {}}

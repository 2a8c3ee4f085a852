"""The OpenAPI 3.1 document of the JSON API. Request bodies and query strings are the
declarations the views check (``bodies.py``), published as they are; this package
describes the responses, and ``text.py`` holds the words (tags, rules, links). Every schema
is named once: code generators (openapi-python-client) drop models whose names collide.

It is exact in both directions on purpose: the schemathesis test sends data the document
calls valid and expects it accepted, and data it calls invalid and expects a 4xx.

The parts: ``build.py`` (shorthands for schemas, answers and operations), ``schemas.py`` (the
components), ``paths.py`` and ``operating.py`` (the routes), ``text.py`` (the words).
"""
from __future__ import annotations

from typing import Any, Mapping

from queuelog.server.requests.openapi.paths import KEY_HEADER, paths
from queuelog.server.requests.openapi.schemas import schemas
from queuelog.server.requests.openapi.text import TAGS

__all__ = ["KEY_HEADER", "document"]


def document(config: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAPI document for this app's configuration (its job types)."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "queuelog", "version": "0.1.0", "description": (
            "A persistent background job queue. Every error is application/problem+json "
            "(RFC 9457) whose `status` equals the HTTP status."),
            "contact": {"name": "queuelog maintainers"}},
        # Relative: the API is at the root of whichever server answered this document (one
        # document serves every host name and port the server is reached by).
        "servers": [{"url": "/", "description": "The server that serves this document."}],
        "tags": [{"name": tag, "description": text} for tag, (text, _) in TAGS.items()],
        "paths": paths(config),
        "components": {
            "schemas": schemas(config),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "An API key: producer, worker, admin or metrics."},
                "basic": {"type": "http", "scheme": "basic",
                          "description": "A person: viewer or admin. Writes must send "
                                         "Content-Type: application/json."},
            },
        },
    }

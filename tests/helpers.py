"""Assertions and builders shared by the test modules."""
from __future__ import annotations

import base64
from typing import Any

import pytest
from werkzeug.security import generate_password_hash

# For tests of request parsing and checks made before any SQL: running them on PostgreSQL too
# would only repeat them.
SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"])


def problem(resp: Any, status: int, slug: str | None = None) -> dict[str, Any]:
    """Assert an RFC 9457 answer with this status (and type suffix); return its body."""
    assert resp.status_code == status, resp.get_data(as_text=True)
    assert resp.mimetype == "application/problem+json"
    body = resp.get_json(force=True)
    assert set(body) >= {"type", "title", "status", "detail"}
    assert body["status"] == status and body["title"] and body["detail"] and body["type"]
    if slug is not None:
        assert body["type"].endswith(slug), body["type"]
    return body


def basic(username: str, password: str) -> dict[str, str]:
    """An HTTP Basic Authorization header."""
    raw = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"Authorization": f"Basic {raw}"}


def quick_hash(password: str) -> str:
    """A cheap salted hash, so tests do not spend their time in scrypt."""
    return generate_password_hash(password, "pbkdf2:sha256:1000")


def add_user(store: Any, username: str, role: str, password: str = "pw-123456") -> dict[str, str]:
    """Create a user with a cheap hash; return its Basic Authorization header."""
    store.accounts.create_user(username, quick_hash(password), role)
    return basic(username, password)


def post_job(client: Any, headers: dict[str, str], type: str = "email", **body: Any) -> Any:
    """POST /jobs (type email unless given); return the response, closed as a server closes it."""
    with client.post("/jobs", json={"type": type, **body}, headers=headers) as resp:
        resp.get_data()  # read it before the close, so .json still works afterwards
        return resp


def enqueue(client: Any, headers: dict[str, str], type: str = "email", *, expect: int = 201,
            **body: Any) -> dict[str, Any]:
    """POST /jobs, assert the status (201: created) and return the job."""
    resp = post_job(client, headers, type, **body)
    assert resp.status_code == expect, resp.get_data(as_text=True)
    return resp.json  # type: ignore[no-any-return]

"""The server's Flask class: Flask's behaviour, with per-call work done once."""
from __future__ import annotations

from typing import Any

import flask.app

from queuelog.server.app import QueuelogFlask


def test_each_view_and_hook_is_checked_once(monkeypatch: Any) -> None:
    """``ensure_sync`` asks ``inspect`` once per function, not at every request."""
    app = QueuelogFlask(__name__)
    asked: list[Any] = []

    def counting(func: Any) -> bool:
        asked.append(func)
        return False

    monkeypatch.setattr(flask.app, "iscoroutinefunction", counting)

    @app.get("/x")
    def view() -> str:
        return "ok"

    @app.after_request
    def hook(response: Any) -> Any:
        return response

    client = app.test_client()
    for _ in range(3):
        assert client.get("/x").get_data(as_text=True) == "ok"
    assert asked.count(view) == 1 and asked.count(hook) == 1

"""The no-op route bench_http.py measures beside queuelog: Flask, JSON in and out, no work."""
from __future__ import annotations

from typing import Any

from flask import Flask, request

app = Flask(__name__)


@app.post("/noop")
def noop() -> Any:
    """Read the JSON body and answer a small JSON object, as queuelog's calls do."""
    request.get_json(silent=True)
    return {"ok": True}


@app.get("/healthz")
def healthz() -> Any:
    """Ready: the bench waits for this."""
    return {"status": "ok"}

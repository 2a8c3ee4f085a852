"""The dashboard (placeholder until the dashboard lands)."""
from __future__ import annotations

from flask import Flask, redirect


def init_app(app: Flask) -> None:
    """Register the dashboard routes."""
    app.add_url_rule("/", "index", lambda: redirect("/ui/"))

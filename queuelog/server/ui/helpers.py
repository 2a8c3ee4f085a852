"""What every dashboard page shares: its security headers, CSRF, the error page, and the
Jinja filters that format times, counts and priorities for people."""
from __future__ import annotations

import json
from typing import Any

from flask import Flask, render_template
from flask_wtf.csrf import CSRFProtect

from queuelog.model.jobs import Priority, isoformat, to_datetime
from queuelog.server.auth import refuse_cross_site

csrf = CSRFProtect()
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; object-src 'none'; base-uri 'none'; "
                               "frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def error_page(status: int, title: str, detail: str) -> Any:
    """The dashboard's error page, with ``status``."""
    return render_template("ui/error.html", title=title, detail=detail), status


def check_form() -> None:
    """A POST of the dashboard: not cross-site, and its form carries the CSRF token."""
    # Called inside the views, after authentication and authorization (401/403 first).
    refuse_cross_site()
    csrf.protect()


def secure_headers(response: Any) -> Any:
    """Every response gets the dashboard's security headers."""
    for name, value in HEADERS.items():
        response.headers[name] = value
    return response


def init_app(app: Flask) -> None:
    """Register the headers and the template filters."""
    app.after_request(secure_headers)
    app.jinja_env.filters.update(ts=_ts, iso=isoformat, count=_count, prio=_prio,
                                 pretty=_pretty, duration=duration)


def _ts(us: int | None) -> str:
    return "" if us is None else to_datetime(us).strftime("%Y-%m-%d %H:%M:%S")


def _count(value: int, cap: int) -> str:
    return f"{cap:,}+" if value > cap else f"{value:,}"


def _prio(value: int) -> str:
    return Priority.from_value(value).label


def duration(us: int | None) -> str:
    """A span of time for people: 850 ms, 12.3 s, 4 min 05 s, 2 h 03 min."""
    if us is None:
        return ""
    seconds = us / 1_000_000
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {sec:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)

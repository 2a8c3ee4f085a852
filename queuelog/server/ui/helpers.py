"""What every dashboard page shares: its security headers, CSRF, the error page, and the
Jinja filters that format times, counts and priorities for people."""
from __future__ import annotations

import json
from typing import Any

from flask import Flask, render_template
from flask_wtf.csrf import CSRFProtect

from queuelog.model.jobs import Priority, isoformat, to_datetime
from queuelog.server import actions
from queuelog.server.auth import refuse_cross_site
from queuelog.server.store import PRIORITY_DETAILS

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
                                 pretty=_pretty, duration=duration, ago=_ago,
                                 detail=detail_value, brief=brief)


def _ts(us: int | None) -> str:
    return "" if us is None else to_datetime(us).strftime("%Y-%m-%d %H:%M:%S")


def _count(value: int, cap: int) -> str:
    return f"{cap:,}+" if value > cap else f"{value:,}"


def _prio(value: int) -> str:
    return Priority.from_value(value).label


def detail_value(key: str, value: Any) -> str:
    """An audit detail's value for people: a priority's label bare (``high``; the store
    gives labels, store/audit.py), else JSON."""
    if key in PRIORITY_DETAILS and isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _ago(us: int | None) -> str:
    return "" if us is None else relative(us, actions.now())


def relative(us: int, now: int) -> str:
    """A time relative to ``now`` for people: ``just now``, ``3 min ago``, ``in 2 h``."""
    seconds = (now - us) / 1_000_000
    span = abs(seconds)
    if span < 10:
        return "just now"
    for limit, unit, size in ((60, "s", 1), (3600, "min", 60), (86400, "h", 3600)):
        if span < limit:
            n = int(span // size)
            break
    else:
        n, unit = int(span // 86400), "day" if span < 2 * 86400 else "days"
    return f"{n} {unit} ago" if seconds > 0 else f"in {n} {unit}"


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


def brief(us: int | None) -> str:
    """A span of time in at most five characters, for a narrow column: 850 ms, 1.2 s,
    12 s, 4.1 min, 2.3 h (``duration`` spells out minutes and seconds)."""
    if us is None:
        return "—"
    seconds = us / 1_000_000
    for limit, unit, size in ((1, "ms", 0.001), (60, "s", 1), (3600, "min", 60)):
        if seconds < limit:
            break
    else:
        unit, size = "h", 3600
    value = seconds / size
    if unit == "ms":
        return f"{round(value)} ms"
    return f"{value:.1f} {unit}" if value < 10 else f"{round(value)} {unit}"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)

"""The dashboard's query strings, read through their declarations (``requests/bodies.py``).

As on the JSON API, a value is checked against ``QUERIES[name]``; unlike it, an empty value
means "any" (a form sends every field), a job id may be typed as ``#12``, and a bad value is
a 400 page (``BadFilter``), not a problem+json.
"""
from __future__ import annotations

from typing import Any, Mapping

from queuelog.model.jobs import Priority
from queuelog.server.requests.check import FieldErrors, params, query, unknown

PAGE_SIZE = 50
JOB_IDS = ("before", "after", "id")  # typed by people: "#12" and " 12 " are job 12
TYPED = JOB_IDS + ("q", "producer", "worker")  # typed or pasted: outer spaces are no part


class BadFilter(Exception):
    """A query-string value the dashboard cannot use."""


def read(name: str, args: Mapping[str, str], *, also: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every parameter of the declared query ``name``: its value, or None when absent or empty.

    A parameter the declaration lacks (nor ``also``, e.g. a form's ``csrf_token``) is refused:
    a mistyped filter silently ignored would show every job as if they matched it.
    """
    strangers = unknown(name, args, also)
    if strangers:
        raise BadFilter(f"Unknown parameter{'s' if len(strangers) > 1 else ''}: "
                        f"{', '.join(strangers)[:200]}. This page takes "
                        f"{', '.join(params(name))}.")
    given = {}
    for param in params(name):
        raw = args.get(param) or None
        if raw is not None and param in TYPED:
            raw = raw.strip()
        if raw is not None and param in JOB_IDS:
            raw = raw.lstrip("#")
        if raw:
            given[param] = raw
    errors = FieldErrors()
    got = query(name, given, errors)
    if errors:
        raise BadFilter(" ".join(_wording(e["field"], e["detail"]) for e in errors))
    return {param: got.get(param) for param in params(name)}


def _wording(field: str, detail: str) -> str:
    """``status must be one of ...``: the field, then its declaration's detail."""
    if field in JOB_IDS:
        return f"{field} must be a job id (a positive whole number)."
    return f"{field} {detail[:1].lower()}{detail[1:]}"


def parse_filters(args: Mapping[str, str], *, also: tuple[str, ...] = ()) -> dict[str, Any]:
    """The filters, search and cursors of ``/ui/`` (status, type, priority, producer, worker,
    q, before, after)."""
    return read("QueueFilters", args, also=also)


def prio_value(label: str | None) -> int | None:
    """A priority label as the store's number (None: any)."""
    return None if label is None else int(Priority.from_label(label))

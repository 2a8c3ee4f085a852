"""The dashboard's query strings, read through their declarations (``requests/bodies.py``).

As on the JSON API, a value is checked against ``QUERIES[name]``; unlike it, an empty value
means "any" (a form sends every field), a job id may be typed as ``#12``, and a bad value is
a 400 page (``BadFilter``), not a problem+json.
"""
from __future__ import annotations

from typing import Any, Mapping

from queuelog.model.jobs import Priority
from queuelog.server.requests.check import FieldErrors, params, query

PAGE_SIZE = 50
JOB_IDS = ("before", "after", "id")  # typed by people: "#12" and " 12 " are job 12


class BadFilter(Exception):
    """A query-string value the dashboard cannot use."""


def read(name: str, args: Mapping[str, str]) -> dict[str, Any]:
    """Every parameter of the declared query ``name``: its value, or None when absent or empty."""
    given = {}
    for param in params(name):
        raw = args.get(param) or None
        if raw is not None and param in JOB_IDS:
            raw = raw.strip().lstrip("#")
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


def parse_filters(args: Mapping[str, str]) -> dict[str, Any]:
    """The filters and cursors of ``/ui/`` (status, type, priority, before, after)."""
    return read("QueueFilters", args)


def prio_value(label: str | None) -> int | None:
    """A priority label as the store's number (None: any)."""
    return None if label is None else int(Priority.from_label(label))

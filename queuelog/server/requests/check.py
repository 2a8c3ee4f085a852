"""Strict parsing of request bodies and fields: every rule of the contract's 400/415/422."""
from __future__ import annotations

import datetime as dt
import json
import math
import re
from typing import Any, Iterable

from flask import Flask, current_app, request
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.routing import BaseConverter, ValidationError

from queuelog.model.problems import MalformedRequest, UnsupportedMediaType, ValidationFailed
from queuelog.model.jobs import from_datetime
from queuelog.server.requests.compiler import Check, compile_schema, holds
from queuelog.server.requests.bodies import MAX_JOB_ID, PATTERN_DETAILS, bodies

MAX_DEPTH = 64
# RFC 3339 date-time (upper-case T and Z), the zone optional here only to name it when missing.
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?"
                      r"(?P<zone>Z|[+-]\d{2}:\d{2})?", re.ASCII)
# The years a run_at may be written in: any instant of them, after any UTC offset, is stored
# and formatted (4 digits) whole; one before now is stored as now (no backdating).
YEARS = (1970, 9998)
_MISSING: Any = object()


class JobIdConverter(BaseConverter):
    """``<job_id:name>`` in a route: 1 to 19 ASCII digits, at most MAX_JOB_ID, else 404.

    Werkzeug's ``int`` converter matches any run of Unicode digits and calls ``int()`` on
    it, which raises past 4,300 digits (a 500 before authentication) and takes "３１４"
    as 314.
    """

    regex = r"[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        """The id; ValidationError (no match, so 404) above the largest BIGINT."""
        number = int(value)
        if number > MAX_JOB_ID:
            raise ValidationError()
        return number

    def to_url(self, value: Any) -> str:
        """The id as digits."""
        return str(int(value))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class _OutOfRange:
    """Stands in for a JSON number Python cannot hold: well-formed JSON, so a 422, not a 400."""

    __slots__ = ()


OUT_OF_RANGE: Any = _OutOfRange()


def _finite_float(literal: str) -> Any:
    # 1e400 is valid JSON syntax but no double: it would be stored as "Infinity".
    value = float(literal)
    return value if math.isfinite(value) else OUT_OF_RANGE


def _int(literal: str) -> Any:
    try:
        return int(literal)
    except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits)
        return OUT_OF_RANGE


def parse_json(raw: bytes) -> Any:
    """Decode strict RFC 8259 JSON: no NaN/Infinity, valid UTF-8, no lone surrogates."""
    try:
        text = raw.decode("utf-8")
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                           parse_int=_int)
        # Lone surrogates ("\ud800") decode in Python but cannot be stored as UTF-8.
        json.dumps(value, ensure_ascii=False, default=lambda _: None).encode("utf-8")
    except RecursionError:
        raise MalformedRequest(f"JSON nests deeper than {MAX_DEPTH} levels.") from None
    except (UnicodeError, ValueError) as exc:
        raise MalformedRequest(f"The body is not valid JSON: {exc}") from None
    if _depth(value) > MAX_DEPTH:
        raise MalformedRequest(f"JSON nests deeper than {MAX_DEPTH} levels.")
    return value


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:
                stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict)
                                                        else node))
    return deepest


def _object_body() -> dict[str, Any]:
    """The request's JSON object body, parsed strictly; ``{}`` when there is no body at all."""
    raw = request.get_data(cache=True)  # over MAX_CONTENT_LENGTH raises 413 here...
    limit = request.max_content_length
    # ...unless the body came chunked, without a Content-Length: then Werkzeug stops
    # reading at the limit and hands over the first MAX_CONTENT_LENGTH bytes, as if that
    # were the whole body. One more byte from the server's stream tells the two apart.
    if request.content_length is None and limit is not None and len(raw) >= limit \
            and request.environ["wsgi.input"].read(1):
        raise RequestEntityTooLarge()
    if not raw:
        return {}
    if not request.is_json:
        raise UnsupportedMediaType("Send the body as application/json.")
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise MalformedRequest("The body must be a JSON object.")
    return body


def json_body() -> dict[str, Any]:
    """The request's JSON object body (``{}`` when none), for views checked with ``Fields``."""
    body = _object_body()
    errors = [{"field": name, "detail": "Holds a number out of range (no double or integer "
                                        "can hold it)."}
              for name, value in body.items() if holds(value, OUT_OF_RANGE)]
    field_errors(errors)
    return body


def body(name: str, errors: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """The request's body checked against its declaration ``schemas.BODIES[name]``.

    400/413/415 for a body that is not a strict JSON object; 422 (ValidationFailed) listing
    every field that breaks the declaration, each at its path (``jobs[3].priority``).
    Integral floats under ``integer`` come back as ints. No body at all is ``{}``.
    With ``errors`` given, field errors are appended there instead of raised, so a view
    can add the rules a schema cannot state and report them all at once (``field_errors``).
    """
    return validate(name, _object_body(), errors)


def validate(name: str, data: dict[str, Any],
             errors: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """Check ``data`` against the declared body ``name`` of the current app (see ``body``)."""
    found: list[dict[str, str]] = [] if errors is None else errors
    data = _checks(current_app)[name](data, "", found)
    if errors is None:
        field_errors(found)
    return data


def _checks(app: Flask) -> dict[str, Check]:
    # Compiled once per app (its job types and MAX_BATCH are in the schemas). Two threads
    # racing here compile twice and keep one: harmless, and no lock on the hot path.
    checks = app.extensions.get("queuelog.bodies")
    if checks is None:
        checks = {name: compile_schema(schema, {"date-time": timestamp_detail}, OUT_OF_RANGE,
                                       PATTERN_DETAILS)
                  for name, schema in bodies(app.config).items()}
        app.extensions["queuelog.bodies"] = checks
    return checks  # type: ignore[no-any-return]


def given(data: dict[str, Any], name: str, default: Any = None) -> Any:
    """A checked body's field; ``default`` when left out or ``null`` (the contract's rule)."""
    value = data.get(name)
    return default if value is None else value


def field_errors(errors: list[dict[str, str]]) -> None:
    """Raise ValidationFailed (422) for rules checked outside the schema, if any failed."""
    if errors:
        raise ValidationFailed("; ".join(f"{e['field']}: {e['detail']}" for e in errors),
                               errors=errors)


def _parse_timestamp(value: str) -> tuple[int | None, str | None]:
    """An RFC 3339 timestamp with a zone as epoch microseconds, or the reason it is not one."""
    if len(value) > 64:
        return None, "Must be 1 to 64 characters."
    shape = _RFC3339.fullmatch(value)
    if shape is not None and not shape.group("zone"):
        return None, "Must carry a time zone offset or Z."
    try:
        if shape is None:
            # fromisoformat alone takes far more than RFC 3339 (week dates, a space,
            # a trailing NUL on some versions); the published schema promises only it.
            raise ValueError(value)
        # Python 3.10's fromisoformat does not take a trailing "Z" (3.11's does).
        parsed = dt.datetime.fromisoformat(value[:-1] + "+00:00" if value[-1:] == "Z"
                                           else value)
    except ValueError:
        return None, "Must be an RFC 3339 timestamp, e.g. 2030-01-02T03:04:05Z."
    if not YEARS[0] <= parsed.year <= YEARS[1]:
        return None, f"Must be in the years {YEARS[0]} to {YEARS[1]}."
    return from_datetime(parsed), None


def timestamp_detail(value: str) -> str | None:
    """Why ``value`` is not an RFC 3339 timestamp with a zone, or None when it is one."""
    return _parse_timestamp(value)[1]


def timestamp_us(value: str) -> int:
    """A checked RFC 3339 timestamp as epoch microseconds."""
    us, detail = _parse_timestamp(value)
    if us is None:
        raise ValueError(detail)
    return us


def is_name(value: Any, max_len: int = 100) -> bool:
    """A name of a job type, key or user: 1 to ``max_len`` printable characters.

    Printable excludes NUL, which PostgreSQL refuses in text outright (a 500, not a 4xx).
    """
    return isinstance(value, str) and 1 <= len(value) <= max_len and value.isprintable()


def compact(value: Any) -> str:
    """Compact UTF-8 JSON, the form payloads are measured and stored in."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=False)


class Fields:
    """Collects every field error of one body, so a client learns them all at once."""

    def __init__(self, body: dict[str, Any], allowed: Iterable[str],
                 ignored: Iterable[str] = ()) -> None:
        self.body = body
        self.errors: list[dict[str, str]] = []
        known = set(allowed) | set(ignored)
        for name in body:
            if name not in known:
                self.error(name, "Unknown field.")

    def error(self, field: str, detail: str) -> None:
        """Record one field error."""
        self.errors.append({"field": field, "detail": detail})

    def check(self) -> None:
        """Raise ValidationFailed (422) if any error was recorded."""
        field_errors(self.errors)

    def integer(self, name: str, lo: int, hi: int, default: Any = _MISSING) -> Any:
        """An integer (not a bool; 3.0 counts, as in JSON Schema) within [lo, hi]."""
        value = self.body.get(name, _MISSING)
        if value is _MISSING or value is None and default is not _MISSING:
            return self._absent(name, default)
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # JSON has one number type; clients may write 3 as 3.0
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(name, "Must be an integer.")
        elif not lo <= value <= hi:
            self.error(name, f"Must be between {lo} and {hi}.")
        else:
            return value
        return None

    def number(self, name: str, lo: float, hi: float, default: Any = _MISSING) -> Any:
        """A finite number within [lo, hi]."""
        value = self.body.get(name, _MISSING)
        if value is _MISSING or value is None and default is not _MISSING:
            return self._absent(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                isinstance(value, float) and not math.isfinite(value)):
            self.error(name, "Must be a number.")
        elif not lo <= value <= hi:
            self.error(name, f"Must be between {lo:g} and {hi:g}.")
        else:
            return value
        return None

    def string(self, name: str, *, max_len: int, default: Any = _MISSING,
               printable_ascii: bool = False, min_len: int = 1) -> Any:
        """A string of bounded length."""
        value = self.body.get(name, _MISSING)
        if value is _MISSING or value is None and default is not _MISSING:
            return self._absent(name, default)
        if not isinstance(value, str):
            self.error(name, "Must be a string.")
        elif not min_len <= len(value) <= max_len:
            self.error(name, f"Must be {min_len} to {max_len} characters.")
        elif printable_ascii and not all(" " <= c <= "~" for c in value):
            self.error(name, "Must be printable ASCII.")
        else:
            return value
        return None

    def boolean(self, name: str, default: Any = _MISSING) -> Any:
        """A JSON boolean."""
        value = self.body.get(name, _MISSING)
        if value is _MISSING:
            return self._absent(name, default)
        if not isinstance(value, bool):
            self.error(name, "Must be true or false.")
            return None
        return value

    def obj(self, name: str, default: Any = _MISSING) -> Any:
        """A JSON object."""
        value = self.body.get(name, _MISSING)
        if value is _MISSING or value is None and default is not _MISSING:
            return self._absent(name, default)
        if not isinstance(value, dict):
            self.error(name, "Must be a JSON object.")
            return None
        return value

    def string_list(self, name: str, *, max_items: int, default: Any = _MISSING) -> Any:
        """A non-empty list of strings."""
        value = self.body.get(name, _MISSING)
        if value is _MISSING or value is None and default is not _MISSING:
            return self._absent(name, default)
        if (not isinstance(value, list) or not value or len(value) > max_items
                or not all(isinstance(v, str) for v in value)):
            self.error(name, f"Must be a list of 1 to {max_items} strings.")
            return None
        return value

    def timestamp(self, name: str) -> int | None:
        """An RFC 3339 timestamp with a time zone (Z or an offset), as epoch microseconds."""
        value = self.string(name, max_len=64, default=None)
        if value is None:
            return None
        us, detail = _parse_timestamp(value)
        if detail is not None:
            self.error(name, detail)
        return us

    def _absent(self, name: str, default: Any) -> Any:
        if default is _MISSING:
            self.error(name, "Required.")
            return None
        return default


def idempotency_header(value: str | None) -> str | None:
    """The ``Idempotency-Key`` header as a key: a structured-field string or a bare token."""
    if value is None:
        return None
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        out, chars = [], iter(value[1:-1])
        for c in chars:
            if c == "\\":
                c = next(chars, "")
                if c not in ('"', "\\"):
                    raise ValidationFailed("Idempotency-Key is not a valid string.",
                                           errors=[{"field": "Idempotency-Key",
                                                    "detail": "Bad escape."}])
            out.append(c)
        return "".join(out)
    return value

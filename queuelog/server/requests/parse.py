"""The lexical half of a request: strict JSON, timestamps, names, the Idempotency-Key header.

``check.py`` then holds a parsed value against its declaration (``bodies.py``).
"""
from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import math
import re
from typing import Any

from flask import request
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.routing import BaseConverter, ValidationError

from queuelog.model import jsontext
from queuelog.model.jobs import from_datetime
from queuelog.model.problems import MalformedRequest, UnsupportedMediaType, ValidationFailed
from queuelog.server.requests.bodies import MAX_JOB_ID

MAX_DEPTH = 64
# RFC 3339 date-time (upper-case T and Z), the zone optional here only to name it when missing.
# An offset's minutes are 00 to 59 (fromisoformat alone takes +00:99, 99 minutes ahead).
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?"
                      r"(?P<zone>Z|[+-]\d{2}:[0-5]\d)?", re.ASCII)
# The years a run_at may be written in: any instant of them, after any UTC offset, is stored
# and formatted (4 digits) whole; one before now is stored as now (no backdating).
YEARS = (1970, 9998)


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


def parse_json(raw: bytes) -> Any:
    """Decode strict RFC 8259 JSON: no NaN/Infinity, valid UTF-8, no lone surrogates."""
    return decode(raw)[0]


def decode(raw: bytes) -> tuple[Any, bool]:
    """``parse_json``, and whether the value holds OUT_OF_RANGE (so only then is it looked for)."""
    value = jsontext.fast_strict_loads(raw)
    if value is not jsontext.NOT_FAST:
        # orjson refused nothing: no NaN, no infinity, no lone surrogate, no integer past 64
        # bits (those take the path below, for its own wording). Its depth limit is 1024:
        # ours is looked for only where the brackets could reach it.
        if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(value) > MAX_DEPTH:
            raise MalformedRequest(f"JSON nests deeper than {MAX_DEPTH} levels.")
        return value, False
    seen: list[bool] = []

    def finite_float(literal: str) -> Any:
        # 1e400 is valid JSON syntax but no double: it would be stored as "Infinity".
        value = float(literal)
        if math.isfinite(value):
            return value
        seen.append(True)
        return OUT_OF_RANGE

    def whole(literal: str) -> Any:
        try:
            return int(literal)
        except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits)
            seen.append(True)
            return OUT_OF_RANGE
    try:
        text = raw.decode("utf-8")
        value = json.loads(text, parse_constant=_reject_constant, parse_float=finite_float,
                           parse_int=whole)
        # Lone surrogates ("\ud800") decode in Python but cannot be stored as UTF-8.
        json.dumps(value, ensure_ascii=False, default=lambda _: None).encode("utf-8")
    except RecursionError:
        raise MalformedRequest(f"JSON nests deeper than {MAX_DEPTH} levels.") from None
    except (UnicodeError, ValueError) as exc:
        raise MalformedRequest(f"The body is not valid JSON: {exc}") from None
    if _depth(value) > MAX_DEPTH:
        raise MalformedRequest(f"JSON nests deeper than {MAX_DEPTH} levels.")
    return value, bool(seen)


def _depth(value: Any) -> int:
    """How deep ``value`` nests (a scalar 0), counted no further than ``MAX_DEPTH + 1``.

    Level by level, containers only (a batch's scalars are most of its values), and
    ``type() is``: JSON's own dicts and lists, never subclasses.
    """
    kind = type(value)
    level = [value] if kind is dict or kind is list else []
    depth = 0
    while level and depth <= MAX_DEPTH:
        depth += 1
        below: list[Any] = []
        add = below.append
        for node in level:
            for item in (node.values() if type(node) is dict else node):
                kind = type(item)
                if kind is dict or kind is list:
                    add(item)
        level = below
    return depth


def object_body() -> tuple[dict[str, Any], bool]:
    """The request's JSON object body, parsed strictly (``{}`` when there is no body at all),
    and whether it holds a number out of range."""
    raw = request.get_data(cache=True)  # over MAX_CONTENT_LENGTH raises 413 here...
    limit = request.max_content_length
    # ...unless the body came chunked, without a Content-Length: then Werkzeug stops
    # reading at the limit and hands over the first MAX_CONTENT_LENGTH bytes, as if that
    # were the whole body. One more byte from the server's stream tells the two apart.
    if request.content_length is None and limit is not None and len(raw) >= limit \
            and request.environ["wsgi.input"].read(1):
        raise RequestEntityTooLarge()
    if not raw:
        return {}, False
    if not request.is_json:
        raise UnsupportedMediaType("Send the body as application/json.")
    body, out_of_range = decode(raw)
    if not isinstance(body, dict):
        raise MalformedRequest("The body must be a JSON object.")
    return body, out_of_range


def is_timestamp(value: Any) -> bool:
    """Whether ``value`` is an RFC 3339 timestamp with a zone, in the years we keep (a
    non-string passes: JSON Schema's ``format`` speaks of strings only)."""
    return not isinstance(value, str) or _parse_timestamp(value)[1] is None


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
    return jsontext.dumps(value)


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


def encode_cursor(job_id: int) -> str:
    """An opaque cursor for the page after ``job_id`` (``bodies.CURSOR`` matches it)."""
    return base64.urlsafe_b64encode(f"v1:{job_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The id inside a cursor that matched ``bodies.CURSOR`` (checked by ``check.query``)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        prefix, _, number = raw.partition(":")
        if prefix == "v1" and number.isdigit() and len(number) <= 18:
            return int(number)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    # The declared pattern admits only what decodes: reaching here is a bug of ours.
    raise ValueError(f"not a cursor: {cursor!r}")

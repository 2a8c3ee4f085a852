"""JSON text in and out, through orjson where it says exactly what the standard library would.

Payloads, results and answers are JSON: a batch of 100 jobs encodes or decodes a payload per
job several times per request, and ``json`` alone would be a large share of a batch
enqueue's CPU (bench/profile_calls.py). orjson (a C extension) does the same work several
times faster, with two differences that matter here, so each call falls back to ``json``
where they would show:

- an integer beyond 64 bits: orjson's ``dumps`` refuses it, and its ``loads`` reads it as a
  float (precision lost), so a text with a run of 19 or more digits goes to ``json``;
- NaN and infinities: ``loads`` refuses them (as queuelog's bodies must), ``dumps`` writes
  ``null``: values here come from strict parses, which never hold them.

Without orjson (the client-only install), both are the standard library's.
"""
from __future__ import annotations

import json
import re
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - the server's install always has it
    orjson = None

_LONG_DIGITS = re.compile(rb"\d{19}")
_LONG_DIGITS_STR = re.compile(r"\d{19}")
_OPTIONS = 0 if orjson is None else orjson.OPT_NON_STR_KEYS


def loads(text: str | bytes) -> Any:
    """Parse JSON text (``json.loads``'s result, faster where nothing differs)."""
    if orjson is not None and not (_LONG_DIGITS if isinstance(text, bytes)
                                   else _LONG_DIGITS_STR).search(text):
        return orjson.loads(text)
    return json.loads(text)


NOT_FAST: Any = object()  # fast_strict_loads: "take the careful path"


def fast_strict_loads(raw: bytes) -> Any:
    """A request body parsed by orjson, or NOT_FAST where it refused it or might differ
    (then the caller's strict ``json`` parse decides, with its own error wording)."""
    if orjson is None or _LONG_DIGITS.search(raw):
        return NOT_FAST
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return NOT_FAST


def dumps(value: Any) -> str:
    """Compact UTF-8 JSON text, keys in their order (``json.dumps`` with
    ``separators=(",", ":"), ensure_ascii=False``)."""
    if orjson is not None:
        try:
            return orjson.dumps(value, option=_OPTIONS).decode("utf-8")
        except TypeError:  # an integer beyond 64 bits, or a type only ``json`` knows
            pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def dumps_bytes(value: Any, default: Any = None) -> bytes:
    """``dumps`` as UTF-8 bytes, with ``default`` for types JSON does not know."""
    if orjson is not None:
        try:  # dates go to ``default`` as in ``json`` (Flask's writes them as HTTP dates)
            return orjson.dumps(value, default=default,
                                option=_OPTIONS | orjson.OPT_PASSTHROUGH_DATETIME)
        except TypeError:
            pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                      default=default).encode("utf-8")

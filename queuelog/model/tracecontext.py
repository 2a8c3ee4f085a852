"""W3C Trace Context (https://www.w3.org/TR/trace-context/): ``traceparent`` and
``tracestate`` checked as the spec says, without Flask (the server stores them, the worker
host hands them on).

What does not pass is dropped, never refused: the spec has a receiver that cannot parse a
``traceparent`` start afresh, and a ``tracestate`` means nothing without its ``traceparent``.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

# version "-" trace-id "-" parent-id "-" trace-flags, lower-case hex only (the spec's
# HEXDIGLC); a later version may append fields after a "-".
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?",
                          re.DOTALL)
_ZERO_TRACE, _ZERO_PARENT = "0" * 32, "0" * 16
_KEY = re.compile(r"[a-z][a-z0-9_\-*/]{0,255}"
                  r"|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13}")
# 0..255 printable ASCII but "," and "=", not ending in a space.
_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")
MAX_MEMBERS = 32
MAX_TRACESTATE = 512  # the spec: propagate at least 512 characters; more may be cut
_LONG_MEMBER = 128    # cut first when over MAX_TRACESTATE (the spec's truncation order)
_OWS = " \t"


def traceparent(values: Sequence[str]) -> str | None:
    """The one ``traceparent`` header in ``values`` (every one the request sent) in the
    version 00 format, or None: absent, sent twice, or invalid (not lower-case hex, an
    all-zero id, version ff, or a version 00 with more after it)."""
    if len(values) != 1:
        return None
    value = values[0].strip(_OWS)
    found = _TRACEPARENT.fullmatch(value)
    if found is None:
        return None
    version, trace_id, parent_id, flags, rest = found.groups()
    if version == "ff" or trace_id == _ZERO_TRACE or parent_id == _ZERO_PARENT:
        return None
    if version == "00" and rest is not None:
        return None
    # A later version is read as far as version 00 goes and handed on as 00 (the spec's
    # "versioning": a vendor propagates the version it understands).
    return f"00-{trace_id}-{parent_id}-{flags}"


def tracestate(values: Sequence[str]) -> str | None:
    """The ``tracestate`` headers (their members joined in order) as one value, or None:
    none sent, none left, a malformed member, a duplicated key, or over 32 members.
    Over 512 characters, members are dropped as the spec says: those over 128 characters
    first, then from the right."""
    members: list[str] = []
    keys: set[str] = set()
    for member in ",".join(values).split(","):
        member = member.strip(_OWS)
        if not member:
            continue  # empty members are allowed, and dropped
        key, eq, value = member.partition("=")
        if not eq or not _KEY.fullmatch(key) or not _VALUE.fullmatch(value) or key in keys:
            return None
        keys.add(key)
        members.append(member)
        if len(members) > MAX_MEMBERS:
            return None
    return _bounded(members) or None


def _bounded(members: list[str]) -> str:
    """``members`` joined, cut to MAX_TRACESTATE characters by whole members."""
    joined = ",".join(members)
    if len(joined) <= MAX_TRACESTATE:
        return joined
    members = [m for m in members if len(m) <= _LONG_MEMBER]
    while members and len(",".join(members)) > MAX_TRACESTATE:
        members.pop()
    return ",".join(members)


def from_headers(parent: Sequence[str], state: Sequence[str]) -> tuple[str | None, str | None]:
    """A request's (traceparent, tracestate): the state only with a valid parent."""
    kept = traceparent(parent) if parent else None
    return kept, tracestate(state) if kept is not None and state else None


def carried(job: Mapping[str, Any]) -> dict[str, str]:
    """A claimed job's trace context as headers (``traceparent``, ``tracestate``) for
    whoever handles it; checked again, as the job came over the network. Empty: none."""
    parent, state = job.get("traceparent"), job.get("tracestate")
    kept = traceparent([parent]) if isinstance(parent, str) else None
    if kept is None:
        return {}
    state = tracestate([state]) if isinstance(state, str) else None
    return {"traceparent": kept, "tracestate": state} if state else {"traceparent": kept}

"""What a push target's answer means for the job: the contract's answer rules, and nothing else.

Pure functions of the status, the headers and the first bytes of the body, so that every rule
is tested without a socket (tests/unit/test_push_verdict.py), and the request code
(push.py) only has to hand them what it got.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Mapping

from queuelog.worker.process import json_object

RESULT_TEXT = 4096      # a 2xx body that is not a JSON object is kept as its first 4 KiB
ERROR_TEXT = 1024       # an error names the first 1 KiB of the answer
MAX_RETRY_IN = 86_400   # the server's limit on a fail's retry_in
# Worth another try: the target is busy, down for a moment, or too slow this time.
RETRIED = frozenset({408, 429})


@dataclass(frozen=True)
class Verdict:
    """A delivery's outcome: complete with ``result``, or fail with ``error``."""

    completed: bool
    result: dict[str, Any] | None = None
    error: str = ""
    retry: bool = True
    retry_in: float | None = None
    text: str = ""  # the body's first 4 KiB: the result if the server refuses the JSON

    @property
    def as_text(self) -> dict[str, Any]:
        """The result as text, for a server that refuses the JSON object itself."""
        return {"body": self.text}


def of_answer(status: int, headers: Mapping[str, str], body: bytes, whole: bool,
              reason: str = "") -> Verdict:
    """The verdict on an HTTP answer; ``whole``: ``body`` is all of it (not cut short)."""
    if 200 <= status < 300:
        return Verdict(True, result_of(body, whole),
                       text=body[:RESULT_TEXT].decode("utf-8", "ignore"))
    head = f"HTTP {status}{' ' + reason if reason else ''}"
    if 300 <= status < 400:
        where = headers.get("location")
        head += f": redirect to {where} not followed" if where else ": redirect not followed"
        return Verdict(False, error=_with_body(head, body), retry=False)
    if status in RETRIED or status >= 500:
        return Verdict(False, error=_with_body(head, body),
                       retry_in=retry_after(headers.get("retry-after")))
    return Verdict(False, error=_with_body(head, body), retry=False)


def of_failure(what: str) -> Verdict:
    """The verdict on a request that got no answer (a timeout, a refused connection)."""
    return Verdict(False, error=what)


def result_of(body: bytes, whole: bool) -> dict[str, Any] | None:
    """A 2xx body as the job's result: a JSON object, none for an empty body, else its text."""
    if whole and not body.strip():
        return None
    if whole:
        try:
            value = json_object(body.decode("utf-8"))
        except UnicodeDecodeError:
            value = None
        if value is not None:
            return value
    return {"body": body[:RESULT_TEXT].decode("utf-8", "ignore")}


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` (seconds, or an HTTP date) as seconds from now; None if none."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value) if value.isdigit() else \
            parsedate_to_datetime(value).timestamp() - (time.time() if now is None else now)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_IN)


def _with_body(head: str, body: bytes) -> str:
    """The error: the status, then the first 1 KiB of the answer when it has one."""
    text = body[:ERROR_TEXT].decode("utf-8", "ignore").strip()
    return f"{head}\n{text}" if text else head

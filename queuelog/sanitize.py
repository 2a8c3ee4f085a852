"""Worker error text, made safe to store (V-10): secrets redacted, control bytes gone, size cut."""
from __future__ import annotations

import re

REDACTED = "[REDACTED]"

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # PEM private key blocks, whole (also a block cut off by truncation).
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
                re.S), REDACTED),
    # Credentials in URLs: scheme://user:password@host
    # (A lookbehind, not \b: "a.a.a..." has a boundary at every dot, and each would rescan.)
    (re.compile(r"(?i)(?<![a-z0-9+.\-])([a-z][a-z0-9+.\-]*://)[^\s/@:]*:[^\s/@]*@"),
     r"\1" + REDACTED + "@"),
    # Authorization headers and bare bearer/basic tokens.
    (re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9\-._~+/]{8,}=*"), r"\1\2" + REDACTED),
    # key=value / key: value / "key": "value" for secret-looking keys. The match starts
    # at the keyword (what precedes it is kept anyway) and the rest of the name is bounded:
    # an open-ended [a-z0-9_-]* on both sides made this quadratic (20 000 letters: 80 s).
    (re.compile(r"""(?ix)
        ( (?:password|passwd|pwd|secret|token|api[_\-]?key|apikey|access[_\-]?key|
             private[_\-]?key|auth|credentials?|session[_\-]?id)[a-z0-9_\-]{0,64}
          ["']? \s* [=:] \s* )
        ( "[^"]*" | '[^']*' | [^\s,;&"'}\]]+ )
    """), r"\1" + REDACTED),
    # queuelog's own API tokens, wherever they appear.
    (re.compile(r"\bql_[A-Za-z0-9_\-]{20,}"), REDACTED),
]
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def sanitize_error(text: str, max_bytes: int) -> str:
    """Redact secrets, drop control characters, and cut to ``max_bytes`` of UTF-8."""
    text = _CONTROL.sub("", text)
    # Only the first max_bytes characters can survive the cut; redact those plus an equal
    # margin (so a secret across the cut is still seen whole), not a megabyte of text.
    text = text[:2 * max_bytes + 1024]
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    raw = text.encode("utf-8", "replace")
    if len(raw) > max_bytes:
        # Redact before cutting (so a cut cannot split a secret past its pattern) and
        # cut on a character boundary.
        text = raw[:max_bytes].decode("utf-8", "ignore")
    return text

"""Worker error text, made safe to store (V-10): secrets redacted, control bytes gone, size cut.

It runs on every fail, so each pattern is one linear pass: every repetition that could rescan
is either anchored to a fixed keyword or bounded. tests/unit/test_sanitize.py holds the property
tests (generated secrets in random text never survive) and the adversarial timing cases.
"""
from __future__ import annotations

import re

REDACTED = "[REDACTED]"

# Names whose value is a secret: "password=...", "X-Api-Key: ...", '"client_secret": "..."'.
_SECRET_NAMES = (r"password|passwd|passphrase|pwd|secret|token|api[_\-]?key|apikey|"
                 r"access[_\-]?key|private[_\-]?key|auth|credentials?|session[_\-]?id|cookie")

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # PEM and PGP private key blocks, whole ("-----BEGIN PGP PRIVATE KEY BLOCK-----",
    # "ENCRYPTED PRIVATE KEY", ...), also a block cut off by truncation: up to the end.
    (re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}(?:PRIVATE|SECRET)[A-Z0-9 ]{0,40}-----"
                r".*?(?:-----END [A-Z0-9 ]{0,80}-----|\Z)", re.S), REDACTED),
    # Authorization headers and bare bearer/basic tokens.
    (re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9\-._~+/]{8,}=*"), r"\1\2" + REDACTED),
    # name=value / name: value / "name": "value" / name%3Dvalue (URL-encoded) for secret
    # names. The match starts at the keyword (what precedes it is kept anyway) and the rest
    # of the name is bounded: open-ended on both sides was quadratic (20 000 letters: 80 s).
    # A quoted value runs to its closing quote (escapes included) or, unterminated, to the
    # end of the line.
    (re.compile(rf"""(?ix)
        ( (?:{_SECRET_NAMES})[a-z0-9_\-]{{0,64}}
          (?:["']|%22|%27)? \s* (?:[=:]|%3d|%3a) \s* )
        ( "(?:[^"\\\n]|\\.)*"? | '(?:[^'\\\n]|\\.)*'? | [^\s,;&"'}}\]]+ )
    """), r"\1" + REDACTED),
    # queuelog's own API tokens, wherever they appear, even glued to a word ("xql_...",
    # "%3Dql_..."); but not a snake_case identifier that happens to contain "ql_"
    # ("postgresql_connection_lost").
    (re.compile(r"ql_(?![a-z]+(?:_[a-z]+)*(?![A-Za-z0-9_\-]))[A-Za-z0-9_\-]{20,}"), REDACTED),
    # Well-known token shapes: JSON Web Tokens, GitHub, Slack, AWS access key ids.
    (re.compile(r"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"), REDACTED),
    (re.compile(r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|"
                r"xox[abprs]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16})"), REDACTED),
]
# Credentials in URLs: scheme://user:password@host. The password runs to the last "@"
# before a blank, a quote or "<>", at most _URL_PASSWORD characters on, so one holding "@"
# or "/" (not percent-encoded, as people write them) goes whole. A match starts at "://",
# whatever the scheme (or text) glued before it. The matches of the pattern
# ``://[^\s/:"'<>]{0,256}:[^\s"'<>]{0,512}@``, found without it: as a regex, every "://"
# backtracked through up to 512 characters looking for an "@" (text made of "://" costs a
# worker's fail batch seconds); ``_redact_url_credentials`` reads each character a bounded
# number of times, however many starts share it.
_URL_USER = re.compile(r"://[^\s/:\"'<>]{0,256}:")  # user names hold no ":": no rescan
_URL_STOP = re.compile(r"[\s\"'<>]")
_URL_PASSWORD = 512
_URL_REPLACEMENT = "://" + REDACTED + "@"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def redact(text: str) -> str:
    """Replace every secret the patterns know by ``[REDACTED]``."""
    text = _redact_url_credentials(text)
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


def _redact_url_credentials(text: str) -> str:
    """``scheme://user:[REDACTED]@host`` for every URL with a password (see _URL_USER)."""
    if "@" not in text or "://" not in text:
        return text
    out: list[str] = []
    done = pos = 0
    stop = at = -1  # the first stop character and "@" at or after the last start's password
    while (m := _URL_USER.search(text, pos)) is not None:
        k = m.end()  # the password's first character
        if stop < k:
            found = _URL_STOP.search(text, k)
            stop = len(text) if found is None else found.start()
        if at < k:
            at = text.find("@", k)
            if at < 0:
                break  # no "@" left: nothing further can match
        if at > stop:
            pos = stop  # every start before the stop shares it, and no "@" comes before it
            continue
        if at > k + _URL_PASSWORD:
            # Too far for this start; a start can reach it only from 772 characters before
            # ("://", a user name of 256, ":", a password of 512).
            pos = max(m.start() + 1, at - _URL_PASSWORD - 260)
            continue
        last = text.rfind("@", at, min(stop, k + _URL_PASSWORD + 1))
        out.append(text[done:m.start()])
        out.append(_URL_REPLACEMENT)
        done = pos = last + 1
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def sanitize_error(text: str, max_bytes: int) -> str:
    """Redact secrets, drop control characters, and cut to ``max_bytes`` of UTF-8."""
    text = _CONTROL.sub("", text)
    # Only the first max_bytes characters can survive the cut; redact those plus an equal
    # margin (so a secret across the cut is still seen whole), not a megabyte of text.
    text = redact(text[:2 * max_bytes + 1024])
    raw = text.encode("utf-8", "replace")
    if len(raw) > max_bytes:
        # Redact before cutting (so a cut cannot split a secret past its pattern) and
        # cut on a character boundary.
        text = raw[:max_bytes].decode("utf-8", "ignore")
    return text

"""The docs' examples as runnable steps, and the check of their shown output.

The convention every page follows (README.md and docs/*.md):

- A ```` ```console ```` block is a terminal: a line starting with ``$ `` is a command (it runs on
  while bash says it is incomplete, e.g. after a trailing ``\\`` or inside a quote); the lines
  after it, up to the next ``$ ``, are what it prints (standard error included). Nothing shown:
  the output is not checked.
- A ```` ```python ```` block is a script run with ``python3``; a ```` ```text ```` block right after
  it is its output.
- Shown output that is JSON is abridged: every field shown must have that value (the answer's
  last line is compared). Other output must match line by line, where ``<anything>`` stands for
  any text (an id, a time, a token) and a line ``...`` for any number of lines; a JSON string
  ``"<anything>"`` stands for any value.
- ``<!-- not-run: why -->`` right before a block shows it without running it (it starts a
  server, needs systemd, ...); ``<!-- file: PATH -->`` says the block is that file, as it is.
  A shell block (``sh``, ``bash``) must carry one of the two: commands go in ``console`` blocks.
"""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.M | re.S)
MARKER = re.compile(r"<!--\s*(not-run|file):\s*(.*?)\s*-->\s*$", re.S)
SHELLS = ("sh", "bash", "shell")
PLACEHOLDER = re.compile(r"<[A-Za-z][\w .:/-]*>")
BEGIN, END = "<!-- walkthrough:begin -->", "<!-- walkthrough:end -->"


@dataclasses.dataclass
class Block:
    """One fenced block of a page, with the marker written right before it."""

    lang: str
    body: str
    line: int
    marker: tuple[str, str] | None = None


@dataclasses.dataclass
class Step:
    """One command (or one Python script) and the output the page shows for it."""

    code: str
    expected: str
    where: str


def blocks(text: str) -> list[Block]:
    """Every fenced block of a page, in order."""
    found, last_end = [], 0
    for match in FENCE.finditer(text):
        indent = len(match["indent"])
        body = "".join(line[indent:] + "\n" for line in match["body"].splitlines())
        before = MARKER.search(text, last_end, match.start())
        marker = (before[1], before[2]) if before else None
        found.append(Block(match["lang"], body, text.count("\n", 0, match.start()) + 1, marker))
        last_end = match.end()
    return found


def is_complete(command: str) -> bool:
    """Whether bash would run ``command`` as it is (no open quote, no trailing backslash)."""
    if command.rstrip("\n").endswith("\\"):
        return False
    check = subprocess.run(["bash", "-n"], input=command, capture_output=True, text=True)
    return check.returncode == 0 and "unexpected end of file" not in check.stderr


def console_steps(block: Block, page: str) -> list[Step]:
    """The commands of a console block, each with the output shown after it."""
    lines = block.body.splitlines()
    if lines and not lines[0].startswith("$ "):
        raise ValueError(f"{page}:{block.line}: a console block starts with a '$ ' command")
    steps: list[Step] = []
    i = 0
    while i < len(lines):
        code, where = lines[i][2:], f"{page}:{block.line + 1 + i}"
        i += 1
        while not is_complete(code + "\n") and i < len(lines):
            code, i = code + "\n" + lines[i], i + 1
        shown = []
        while i < len(lines) and not lines[i].startswith("$ "):
            shown, i = shown + [lines[i]], i + 1
        steps.append(Step(code, "\n".join(shown).strip("\n"), where))
    return steps


def page_steps(text: str, page: str) -> list[Step]:
    """Every runnable step of a page, in order; raises on a block that breaks the convention."""
    steps: list[Step] = []
    found = blocks(text)
    for i, block in enumerate(found):
        if block.marker is not None:
            kind, value = block.marker
            if not value:
                raise ValueError(f"{page}:{block.line}: <!-- {kind}: --> needs a reason or path")
            continue
        if block.lang in SHELLS:
            raise ValueError(f"{page}:{block.line}: a {block.lang} block: write commands as a "
                             "console block, or mark it <!-- file: PATH --> or <!-- not-run: why -->")
        if block.lang == "console":
            steps += console_steps(block, page)
        elif block.lang == "python":
            after = found[i + 1] if i + 1 < len(found) else None
            shown = after.body if after and after.lang == "text" and after.marker is None \
                and _adjacent(text, block, after) else ""
            delimiter = "QUEUELOG_DOCS_PY"
            steps.append(Step(f"python3 - <<'{delimiter}'\n{block.body}{delimiter}",
                              shown.strip("\n"), f"{page}:{block.line}"))
    return steps


def _adjacent(text: str, first: Block, second: Block) -> bool:
    """Whether only blank lines and comments separate two blocks (the second is the output)."""
    lines = text.splitlines()
    end = first.line + first.body.count("\n") + 1  # the closing fence's line (1-based)
    return all(not line.strip() or re.fullmatch(r"\s*<!--.*-->\s*", line)
               for line in lines[end:second.line - 1])


def walkthrough(text: str) -> str:
    """The walk-through (docs/walkthrough.md): the part every docs page runs after."""
    return text[text.index(BEGIN):text.index(END)]


def files_shown(text: str) -> list[tuple[str, str]]:
    """(path, body) of every block that says it is a file of the checkout."""
    return [(b.marker[1], b.body) for b in blocks(text) if b.marker and b.marker[0] == "file"]


def _text_pattern(expected: str) -> re.Pattern[str]:
    parts = []
    for line in expected.splitlines():
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
            continue
        pieces = PLACEHOLDER.split(line.rstrip())
        parts.append(".+?".join(re.escape(p) for p in pieces) + r"[ \t]*\n")
    return re.compile("".join(parts))


def matches_text(expected: str, actual: str) -> bool:
    """Whether ``actual`` is ``expected`` line by line, placeholders and ``...`` aside."""
    return _text_pattern(expected).fullmatch(actual.strip("\n") + "\n") is not None


def subset(expected: Any, actual: Any, path: str = "$") -> None:
    """Assert that every field shown in ``expected`` has that value in ``actual``."""
    if isinstance(expected, str) and PLACEHOLDER.fullmatch(expected):
        return
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected an object, got {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{path}.{key} missing from {actual!r}"
            subset(value, actual[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), \
            f"{path}: expected {len(expected)} items, got {actual!r}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            subset(e, a, f"{path}[{i}]")
    else:
        assert actual == expected, f"{path}: the docs show {expected!r}, the server said {actual!r}"


def check_output(step: Step, actual: str) -> None:
    """Assert that a step printed what its page shows (nothing shown: nothing checked)."""
    if not step.expected:
        return
    try:
        shown = json.loads(step.expected)
    except ValueError:
        assert matches_text(step.expected, actual), \
            f"{step.where}: {step.code}\nthe docs show:\n{step.expected}\nit printed:\n{actual}"
        return
    last = [line for line in actual.splitlines() if line.strip()]
    assert last, f"{step.where}: {step.code}\nprinted nothing; the docs show {step.expected}"
    try:
        subset(shown, json.loads(last[-1]))
    except AssertionError as exc:
        raise AssertionError(f"{step.where}: {step.code}\n{exc}") from None

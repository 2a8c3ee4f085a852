"""MkDocs hooks: the README is the site's front page.

Listed in mkdocs.yml (``hooks:``); MkDocs loads this file by path, so it imports nothing of
queuelog. It is not a page: ``exclude_docs`` keeps it out of the built site.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[1] / "README.md"
# README.md links into docs/ as GitHub shows it; on the site those pages are siblings.
_INTO_DOCS = re.compile(r"\]\(docs/")


def on_page_read_source(page: Any, config: Any) -> str | None:
    """The home page's source is README.md, with its ``docs/`` links made site links."""
    if page.file.src_uri != "index.md":
        return None
    return _INTO_DOCS.sub("](", README.read_text(encoding="utf-8"))

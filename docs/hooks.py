"""MkDocs hooks: the README is the site's front page, and pages not yet written stay out of nav.

Listed in mkdocs.yml (``hooks:``); MkDocs loads this file by path, so it imports nothing of
queuelog. It is not a page: ``exclude_docs`` keeps it out of the built site.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.queuelog")
README = Path(__file__).resolve().parents[1] / "README.md"
# README.md links into docs/ as GitHub shows it; on the site those pages are siblings.
_INTO_DOCS = re.compile(r"\]\(docs/")


def on_config(config: Any) -> Any:
    """Drop the nav entries of the pending pages that are not in docs/ yet."""
    docs = Path(config["docs_dir"])
    pending = set(config["extra"].get("pending_pages", []))
    missing = {page for page in pending if not (docs / page).exists()}
    for page in sorted(missing):
        log.info("nav: %s is not written yet; left out of the nav", page)
    config["nav"] = _without(config["nav"], missing)
    return config


def _without(nav: list[Any], missing: set[str]) -> list[Any]:
    kept: list[Any] = []
    for item in nav:
        (title, target), = item.items() if isinstance(item, dict) else ((None, item),)
        if isinstance(target, list):
            kept.append({title: _without(target, missing)})
        elif target not in missing:
            kept.append(item)
    return kept


def on_page_read_source(page: Any, config: Any) -> str | None:
    """The home page's source is README.md, with its ``docs/`` links made site links."""
    if page.file.src_uri != "index.md":
        return None
    return _INTO_DOCS.sub("](", README.read_text(encoding="utf-8"))

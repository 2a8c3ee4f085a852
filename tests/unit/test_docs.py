"""The docs, checked without a server: the strict site build, the settings table, the layout,
the files shown, and the example convention itself (tests/docs_examples.py).

The examples themselves run against a live server in tests/e2e/test_docs_run.py.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from docs_examples import (ROOT, Block, blocks, check_output, console_steps, files_shown,
                           matches_text, page_steps, subset, walkthrough, Step)
from queuelog.server.config import DEFAULTS

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("**/*.md"))]
# Settings the table shows that are not in DEFAULTS: computed at start, or Flask's own.
NOT_IN_DEFAULTS = {"DATABASE_URL", "SECRET_KEY", "TRUSTED_HOSTS", "SESSION_COOKIE_SECURE"}
CONTRACT_KEYS = ("DATABASE_URL", "JOB_TYPES", "MAX_PAYLOAD_BYTES", "MAX_CONTENT_LENGTH",
                 "MAX_ERROR_BYTES", "LEASE_SECONDS", "RETRY_BACKOFF_SECONDS",
                 "RETRY_BACKOFF_MAX_SECONDS", "SQLITE_SYNCHRONOUS", "SECRET_KEY")


def read(path: Path) -> str:
    """A page's text."""
    return path.read_text(encoding="utf-8")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """``mkdocs build --strict``: a broken link, a missing anchor or a nav typo fails it."""
    pytest.importorskip("mkdocs", reason="mkdocs is a test dependency: pip install -e '.[test]'")
    # Not --quiet: it hides the warnings, and a strict build with none shown passes.
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    home = read(tmp_path / "site" / "index.html")
    assert "A five-minute walk-through" in home, "the site's home page is no longer the README"


def settings_table() -> dict[str, str]:
    """The configuration page's table: each key and the default it shows."""
    rows = re.findall(r"^\| `([A-Z_]+)` \| ([^|]*) \|", read(DOCS / "configuration.md"), re.M)
    keys = [key for key, _ in rows]
    assert len(keys) == len(set(keys)), "a setting is listed twice"
    return {key: shown.strip() for key, shown in rows}


def shown_default(cell: str) -> object:
    """A default as the table shows it: JSON in backticks, else the text itself."""
    text = cell.strip("`")
    try:
        return json.loads(text)
    except ValueError:
        return text


def test_the_configuration_page_lists_every_setting_with_its_default() -> None:
    """The table is DEFAULTS: every key, its default, and nothing the code does not have."""
    table = settings_table()
    for key, value in DEFAULTS.items():
        row = f"| `{key}` | `{json.dumps(value) if not isinstance(value, str) else value}` |"
        assert key in table, f"docs/configuration.md lacks {key}; add a row: {row}"
        assert shown_default(table[key]) == value, f"{key}: the page shows {table[key]}; {row}"
    extra = set(table) - set(DEFAULTS) - NOT_IN_DEFAULTS
    assert not extra, f"docs/configuration.md lists settings the code does not have: {extra}"
    assert set(CONTRACT_KEYS) <= set(table)


def test_the_configuration_page_says_how_to_add_a_job_type() -> None:
    """The page has a section on adding a job type that shows JOB_TYPES being set."""
    text = read(DOCS / "configuration.md")
    section = text[text.index("## Adding a job type"):]
    assert "QUEUELOG_JOB_TYPES" in section and "--types" in section


def test_the_readme_states_the_two_commands_and_ci_runs_the_test_one() -> None:
    """The install/run and test commands appear exactly; .ci/run ends with the test one."""
    text = read(README)
    assert "pip install -e . && queuelog run" in text
    assert "pip install -e '.[test]' && pytest" in text
    ci = read(ROOT / ".ci" / "run").rstrip().splitlines()
    assert ci[-1] == "pip install -e '.[test]' && pytest"


def test_the_walkthrough_covers_the_job_life_cycle() -> None:
    """The walk-through shows keys, enqueue, claim, complete, fail, retry and list."""
    code = "\n".join(s.code for s in page_steps(walkthrough(read(DOCS / "walkthrough.md")),
                                                 "docs/walkthrough.md"))
    for needle in ("--role producer", "--role worker", "/jobs/claim", "/complete", "/fail",
                   "/retry", "$ADMIN_TOKEN", "/jobs?"):
        assert needle in code, f"walk-through no longer shows {needle}"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_page_follows_the_example_convention(page: Path) -> None:
    """Every block of every page parses as the convention says (no stray shell block)."""
    page_steps(read(page), page.name)


def test_the_files_shown_are_the_files() -> None:
    """A block marked ``<!-- file: PATH -->`` is that file of the checkout, byte for byte."""
    shown = [item for page in PAGES for item in files_shown(read(page))]
    assert len(shown) >= 2
    for path, body in shown:
        assert read(ROOT / path) == body, f"the docs' copy of {path} differs from the file"


def test_the_readme_links_to_pages_that_exist() -> None:
    """Every relative link of the README names a file of the checkout (GitHub's view)."""
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", read(README))
    assert len(links) >= 10
    for link in links:
        assert (ROOT / link).exists(), f"README.md links to {link}, which does not exist"


def layout_paths() -> list[str]:
    """The paths the design page's tree names, built from its indentation."""
    text = read(DOCS / "design.md")
    tree = text[text.index("<!-- layout:begin -->"):text.index("<!-- layout:end -->")]
    body = blocks(tree)[0].body
    stack: list[str] = []
    paths = []
    for line in body.splitlines():
        name = line.strip().split(" ", 1)[0]
        depth = (len(line) - len(line.lstrip())) // 2
        if not name or len(line) - len(line.lstrip()) > 2 * len(stack) + 2:
            continue  # a description's second line
        stack = stack[:depth] + [name.rstrip("/")]
        paths.append("/".join(stack))
    return paths


def test_the_design_page_describes_the_tree_as_it_is() -> None:
    """Every path of the layout exists, and every module of the package is in the layout."""
    paths = layout_paths()
    for path in paths:
        assert (ROOT / path).exists(), f"docs/design.md names {path}, which does not exist"
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "queuelog").rglob("*.py")
               if "versions" not in p.parts or p.name == "__init__.py"}
    missing = sorted(modules - set(paths))
    assert not missing, f"docs/design.md's layout lacks {missing}"


def test_console_commands_run_on_while_incomplete_and_keep_their_output() -> None:
    """A command spans lines while bash says it is incomplete; its output follows it."""
    body = ("$ curl -d '{\"a\": [\n  1]}' \\\n  http://x\n{\"ok\": true}\n"
            "$ echo done\ndone\n$ true\n")
    steps = console_steps(Block("console", body, 1), "page.md")
    assert [s.code for s in steps] == ["curl -d '{\"a\": [\n  1]}' \\\n  http://x",
                                      "echo done", "true"]
    assert [s.expected for s in steps] == ['{"ok": true}', "done", ""]


def test_a_shell_block_without_a_marker_is_refused() -> None:
    """Commands belong in console blocks; a bare sh block is neither run nor allowed."""
    with pytest.raises(ValueError, match="console block"):
        page_steps("```sh\nrm -rf /tmp/x\n```\n", "page.md")
    assert page_steps("<!-- not-run: needs systemd -->\n```sh\nsystemctl start x\n```\n",
                      "page.md") == []


def test_text_output_matches_with_placeholders_and_ellipsis_only() -> None:
    """``<anything>`` stands for some text on its line, ``...`` for lines; nothing else."""
    assert matches_text("Deleted <n> job(s).", "Deleted 12 job(s).")
    assert not matches_text("Deleted <n> job(s).", "Deleted job(s).")
    assert matches_text("...\nlast line", "noise\nmore noise\nlast line")
    assert not matches_text("204", "204\n409")
    assert not matches_text("first", "other")


def test_json_output_is_checked_field_by_field() -> None:
    """Shown JSON is a subset of the answer; a differing or missing field fails."""
    subset({"id": 3, "at": "<time>"}, {"id": 3, "at": "2026-01-01T00:00:00Z", "more": 1})
    with pytest.raises(AssertionError):
        subset({"id": 3}, {"id": 4})
    with pytest.raises(AssertionError):
        subset({"jobs": [{"id": 1}]}, {"jobs": [{"id": 1}, {"id": 2}]})
    with pytest.raises(AssertionError):
        check_output(Step("curl", '{"status": 200}', "page.md:1"), '{"status": 409}')

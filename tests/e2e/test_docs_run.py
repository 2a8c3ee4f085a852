"""The docs cannot drift: every page's examples run, in order, against a live ``queuelog run``.

The convention is in tests/docs_examples.py. docs/walkthrough.md runs as it is; every other page of docs/ runs
after that walk-through (its keys, jobs and shell variables are the page's starting
point: the walk-through runs once, and each page gets a copy of its database and scratch
directory), on a server of its own, in a scratch directory where ``examples/`` is the checkout's.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from docs_examples import ROOT, Step, check_output, page_steps, walkthrough
from helpers import once_per_run

MARK = "@@docs-step@@"
BIN = os.path.dirname(sys.executable)  # where pip put the ``queuelog`` script
# The walk-through: run as it is, and the state every other page starts from.
WALKTHROUGH = ROOT / "docs" / "walkthrough.md"
# The pages with examples to run (a page of prose alone is still parsed, in tests/unit).
PAGES = [p for p in sorted((ROOT / "docs").glob("**/*.md"))
         if p != WALKTHROUGH and page_steps(p.read_text(encoding="utf-8"), p.name)]


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(tmp_path: Path) -> dict[str, str]:
    """The environment of the server and of the examples: a temp database, no stray config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    env.update(PATH=BIN + os.pathsep + env.get("PATH", ""),
               QUEUELOG_DATABASE_URL=f"sqlite:///{tmp_path / 'docs.sqlite3'}",
               # Keeps the run from writing a secret into the checkout's instance folder.
               QUEUELOG_SECRET_KEY="docs-test-secret-key")
    return env


@contextlib.contextmanager
def serve(tmp_path: Path, env: dict[str, str]) -> Iterator[str]:
    """``queuelog run`` on a free port, on ``env``'s database; yields its URL."""
    if shutil.which("queuelog", path=BIN) is None:
        pytest.skip(f"the queuelog console script is not installed in {BIN}")
    if shutil.which("curl") is None:
        pytest.skip("the docs' examples need curl")
    port = free_port()
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([os.path.join(BIN, "queuelog"), "run", "--host", "127.0.0.1",
                             "--port", str(port)], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:  # polling a starting process, not waiting for time to pass
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("queuelog run did not come up:\n"
                            + (tmp_path / "server.log").read_text(errors="replace"))
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """``queuelog run`` on a fresh database; yields its URL and the environment to talk to it."""
    env = clean_env(tmp_path)
    with serve(tmp_path, env) as url:
        yield url, {**env, "QUEUELOG_URL": url}


# The shell state the walk-through made (its variables and functions), kept for the pages.
KEEP_STATE = ('for v in $(compgen -v); do grep -qx "$v" "$BEFORE" || declare -p "$v"; done '
              '> "$STATE"; declare -f >> "$STATE"')


@pytest.fixture(scope="session")
def walked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The walk-through (docs/walkthrough.md), run once per test run: the database, scratch directory and
    shell state every page starts from (a page costs its own steps, not the walk-through)."""
    def walk(base: Path) -> None:
        env = clean_env(base)
        prelude = page_steps(walkthrough(WALKTHROUGH.read_text(encoding="utf-8")),
                             "docs/walkthrough.md")
        before = Step('compgen -v > "$BEFORE"', "", "state")
        after = Step(KEEP_STATE, "", "state")
        with serve(base, env) as url:
            run_steps([before, *prelude, after], {**env, "QUEUELOG_URL": url,
                                                  "BEFORE": str(base / "before"),
                                                  "STATE": str(base / "state.sh")},
                      scratch(base))
    # Once for the whole run. The server has stopped: its database files are whole, and
    # safe to copy.
    return once_per_run(tmp_path_factory, "walkthrough", walk)


def resume(walked: Path, tmp_path: Path) -> Path:
    """A copy of the walk-through's database and scratch directory in ``tmp_path``."""
    for name in os.listdir(walked):
        if name.startswith("docs.sqlite3") and not name.endswith("-wake"):
            shutil.copy2(walked / name, tmp_path / name)
    shutil.copytree(walked / "work", tmp_path / "work", symlinks=True)
    return tmp_path / "work"


def run_steps(steps: list[Step], env: dict[str, str], cwd: Path) -> list[str]:
    """Run every step in one bash process (stderr into stdout); return each step's output."""
    script = ["set -euo pipefail", "exec 2>&1"]
    for i, step in enumerate(steps):
        script += [step.code, f"printf '\\n{MARK} %d\\n' {i}"]
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)
    outputs = re.split(rf"^{MARK} \d+$", done.stdout, flags=re.M)
    failed = steps[min(len(outputs), len(steps)) - 1]  # the step after the last marker
    assert done.returncode == 0, (f"{failed.where} failed (rc={done.returncode}):\n{failed.code}"
                                  f"\noutput:\n{done.stdout[-4000:]}")
    assert len(outputs) == len(steps) + 1, done.stdout
    return [out.strip("\n") for out in outputs[:-1]]


def scratch(tmp_path: Path) -> Path:
    """The directory the examples run in: empty but for the checkout's ``examples/``."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    return work


def test_the_walkthrough_runs_against_a_live_server(server: tuple[str, dict[str, str]],
                                                   tmp_path: Path) -> None:
    """Every command of the walk-through succeeds and answers what the page shows."""
    steps = page_steps(WALKTHROUGH.read_text(encoding="utf-8"), "docs/walkthrough.md")
    assert sum(bool(s.expected) for s in steps) >= 10, "the walk-through lost its outputs"
    for step, out in zip(steps, run_steps(steps, server[1], scratch(tmp_path))):
        check_output(step, out)


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_page_runs_against_a_live_server(page: Path, walked: Path, tmp_path: Path) -> None:
    """A page's examples succeed after the walk-through, and answer what the page shows."""
    work = resume(walked, tmp_path)
    env = clean_env(tmp_path)
    steps = page_steps(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)))
    state = Step(f"source {walked / 'state.sh'}", "", "the walk-through's shell state")
    with serve(tmp_path, env) as url:
        outputs = run_steps([state, *steps], {**env, "QUEUELOG_URL": url}, work)
    for step, out in zip(steps, outputs[1:]):
        check_output(step, out)

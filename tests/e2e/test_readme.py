"""The README cannot drift: its walk-through runs against a live ``queuelog run`` server.

The shell blocks between ``<!-- walkthrough:begin -->`` and ``<!-- walkthrough:end -->`` run in
order in one bash process; a ``json`` block right after a shell block is that block's answer,
abridged (every field shown must match), a ``text`` block its exact output.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from queuelog.server.config import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BEGIN, END = "<!-- walkthrough:begin -->", "<!-- walkthrough:end -->"
FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARK = "@@walkthrough-step@@"
BIN = os.path.dirname(sys.executable)  # where pip put the ``queuelog`` script


@dataclasses.dataclass
class Step:
    """One shell block of the walk-through and the output the README shows for it."""

    code: str
    lang: str | None = None
    expected: str | None = None


def readme() -> str:
    """The README's text."""
    return README.read_text(encoding="utf-8")


def walkthrough_steps(text: str) -> list[Step]:
    """The walk-through's shell blocks, each with the output block that follows it, if any."""
    start, end = text.index(BEGIN), text.index(END)
    steps: list[Step] = []
    for match in FENCE.finditer(text, start, end):
        lang, body = match.groups()
        if lang == "sh":
            steps.append(Step(body))
        elif lang in ("json", "text"):
            assert steps and steps[-1].lang is None, f"output block without its command: {body}"
            steps[-1].lang, steps[-1].expected = lang, body
        else:
            pytest.fail(f"walk-through block of unknown kind {lang!r}: {body[:60]}")
    return steps


def subset(expected: Any, actual: Any, path: str = "$") -> None:
    """Assert that every field shown in ``expected`` has that value in ``actual``."""
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
        assert actual == expected, f"{path}: README shows {expected!r}, server said {actual!r}"


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(tmp_path: Path) -> dict[str, str]:
    """The environment of the server and of the walk-through: a temp database, no stray config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    env.update(PATH=BIN + os.pathsep + env.get("PATH", ""),
               QUEUELOG_DATABASE_URL=f"sqlite:///{tmp_path / 'readme.sqlite3'}",
               # Keeps the run from writing a secret into the checkout's instance folder.
               QUEUELOG_SECRET_KEY="readme-test-secret-key")
    return env


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """``queuelog run`` on a free port; yields its URL and the environment to talk to it."""
    if shutil.which("queuelog", path=BIN) is None:
        pytest.skip(f"the queuelog console script is not installed in {BIN}")
    env = clean_env(tmp_path)
    port = free_port()
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([os.path.join(BIN, "queuelog"), "run", "--host", "127.0.0.1",
                             "--port", str(port)], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 15
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
        yield url, {**env, "QUEUELOG_URL": url}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def run_walkthrough(steps: list[Step], env: dict[str, str], cwd: Path) -> list[str]:
    """Run every step in one bash process; return each step's standard output."""
    script = ["set -euo pipefail"]
    for i, step in enumerate(steps):
        script += [step.code, f"printf '\\n{MARK} %d\\n' {i}"]
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    outputs = re.split(rf"^{MARK} \d+$", done.stdout, flags=re.M)
    failed = steps[min(len(outputs), len(steps)) - 1]  # the step after the last marker
    assert done.returncode == 0, (f"walk-through step {len(outputs)} failed "
                                  f"(rc={done.returncode}):\n{failed.code}"
                                  f"\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    assert len(outputs) == len(steps) + 1, done.stdout
    return [out.strip("\n") for out in outputs[:-1]]


def test_walkthrough_runs_against_a_live_server(server: tuple[str, dict[str, str]],
                                                tmp_path: Path) -> None:
    """Every command of the walk-through succeeds and answers what the README shows."""
    if shutil.which("curl") is None or shutil.which("bash") is None:
        pytest.skip("the walk-through needs curl and bash")
    _, env = server
    steps = walkthrough_steps(readme())
    assert sum(s.expected is not None for s in steps) >= 10, "walk-through lost its outputs"
    outputs = run_walkthrough(steps, env, tmp_path)
    for step, out in zip(steps, outputs):
        if step.lang == "text":
            assert out.strip() == step.expected.strip(), f"{step.code}\n-> {out!r}"
        elif step.lang == "json":
            last = [line for line in out.splitlines() if line.strip()][-1]
            subset(json.loads(step.expected), json.loads(last))


def test_walkthrough_covers_the_job_life_cycle() -> None:
    """The walk-through shows keys, enqueue, claim, complete, fail, retry and list."""
    code = "\n".join(s.code for s in walkthrough_steps(readme()))
    for needle in ("--role producer", "--role worker", "/jobs/claim", "/complete", "/fail",
                   "/retry", "$ADMIN_TOKEN", '/jobs?'):
        assert needle in code, f"walk-through no longer shows {needle}"


def test_readme_states_the_two_commands() -> None:
    """The install/run and test commands appear exactly, as the project promises."""
    text = readme()
    assert "pip install -e . && queuelog run" in text
    assert "pip install -e '.[test]' && pytest" in text


CONTRACT_KEYS = ("DATABASE_URL", "JOB_TYPES", "MAX_PAYLOAD_BYTES", "MAX_CONTENT_LENGTH",
                 "MAX_ERROR_BYTES", "LEASE_SECONDS", "RETRY_BACKOFF_SECONDS",
                 "RETRY_BACKOFF_MAX_SECONDS", "SQLITE_SYNCHRONOUS", "SECRET_KEY")


def test_configuration_table_matches_the_defaults() -> None:
    """Every contract config key is documented, with the default the code really uses."""
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| ([^|]*) \|", readme(), flags=re.M))
    for key in CONTRACT_KEYS:
        assert key in rows, f"README's configuration table lacks {key}"
        if key in DEFAULTS:
            shown, real = rows[key].strip().strip("`"), DEFAULTS[key]
            assert (json.loads(shown) if isinstance(real, (dict, int)) else shown) == real, key


def test_every_setting_is_documented() -> None:
    """A setting added to the code's defaults shows up in the README, by name."""
    text = readme()
    for key in DEFAULTS:  # every default, retention's included, lives in config.DEFAULTS
        assert f"`{key}`" in text, f"README does not document the setting {key}"

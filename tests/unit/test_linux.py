"""queuelog.worker.linux: the token's bytes leave /proc/PID/environ, on every interpreter."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOKEN = "ql_scrub-me-0123456789"
# In a fresh interpreter: the token is in its environment from exec, as for `queuelog work`.
SCRUB = f"""
import os
from queuelog.worker.linux import scrub_environ
took = scrub_environ("QUEUELOG_TOKEN")
with open("/proc/self/environ", "rb") as fh:
    seen = fh.read()
print(took, {TOKEN.encode()!r} in seen, "QUEUELOG_TOKEN" in os.environ,
      b"QUEUELOG_OTHER=kept" in seen)
"""
DISTRIBUTION_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/PID/environ is Linux's")
@pytest.mark.parametrize("python", [sys.executable, DISTRIBUTION_PYTHON],
                         ids=["this-python", "distribution-python"])
def test_scrub_environ_zeroes_the_token_where_proc_shows_it(python: str) -> None:
    """Issue 35: Debian's python3.11 (non-PIE) keeps its own ``environ``; libc's is NULL there,
    and ``queuelog work`` died at start with ``ValueError: NULL pointer access``."""
    if not os.path.exists(python):
        pytest.skip(f"{python} does not exist on this host: no distribution Python to run")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT),
           "QUEUELOG_TOKEN": TOKEN, "QUEUELOG_OTHER": "kept"}
    done = subprocess.run([python, "-c", SCRUB], env=env, capture_output=True, text=True,
                          timeout=30, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "False", "True"]

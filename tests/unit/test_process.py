"""The runner's child processes: the death signal, and a command that cannot start."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from queuelog.worker import linux
from queuelog.worker.process import JobProcess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A stand-in for the runner: starts ``sleep 60`` as a job's command would be started
# (wrapper or preexec_fn, as with_death_signal says), prints its pid, then waits to be killed.
STAND_IN = """
import subprocess, sys, time
from queuelog.worker import linux
if sys.argv[1] == "preexec":
    linux._setpriv = lambda: None
argv, preexec = linux.with_death_signal(["sleep", "60"])
proc = subprocess.Popen(argv, preexec_fn=preexec, start_new_session=True)
print(proc.pid, flush=True)
time.sleep(60)
"""


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def running_sleep(pid: int) -> bool:
    """True once the process has exec'd the command itself (past any wrapper)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().split(b"\0")[0].endswith(b"sleep")
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("way", ["setpriv", "preexec"])
def test_a_command_dies_with_its_sigkilled_runner_without_the_reaper(way: str) -> None:
    if way == "setpriv" and linux._setpriv() is None:
        pytest.skip("no setpriv with --pdeathsig on this host")
    runner = subprocess.Popen([sys.executable, "-c", STAND_IN, way], stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": ROOT})
    assert runner.stdout is not None
    command = int(runner.stdout.readline())
    try:
        assert alive(command)
        # The kill must come after the death signal is set: setpriv sets it, then execs
        # the command (the window before is the reaper's, see linux.with_death_signal).
        deadline = time.monotonic() + 5
        while not running_sleep(command) and time.monotonic() < deadline:
            time.sleep(0.005)
        runner.kill()  # SIGKILL: no handler runs, only the kernel's death signal
        runner.wait()
        deadline = time.monotonic() + 5  # real processes: the kernel's pace, not a clock's
        while alive(command) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not alive(command)
    finally:
        if alive(command):
            os.kill(command, signal.SIGKILL)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="no setpriv (util-linux) here")
def test_the_wrapper_is_setpriv_with_the_signal_named() -> None:
    setpriv = shutil.which("setpriv")  # Debian's util-linux has a --pdeathsig one
    assert linux.with_death_signal(["cmd", "a"]) == (
        [setpriv, "--pdeathsig", "KILL", "--", "cmd", "a"], None)


def test_a_command_that_cannot_start_raises_as_exec_would(tmp_path: Any) -> None:
    """Behind the wrapper, exec's error would be an exit status; the job must say 'cannot run'."""
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\n")
    with pytest.raises(FileNotFoundError):
        JobProcess([str(tmp_path / "missing")], None, dict(os.environ))
    with pytest.raises(FileNotFoundError):
        JobProcess(["no-such-command-here"], None, {"PATH": str(tmp_path)})
    with pytest.raises(PermissionError):
        JobProcess([str(plain)], None, dict(os.environ))

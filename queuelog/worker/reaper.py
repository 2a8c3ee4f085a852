"""The runner's reaper: one small process that kills the jobs' process groups if it dies.

``PR_SET_PDEATHSIG`` kills a command when its runner dies, but not what the command started
in the background (a death signal is not inherited). The reaper closes that gap: the runner
tells it each job's process group on a pipe (``+PGID`` / ``-PGID``); when the pipe reaches
end-of-file, the runner is gone (however it died) and the reaper SIGKILLs every group left.
Run as ``python -m queuelog.worker.reaper``; it imports the standard library only.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import IO



class Reaper:
    """The runner's side: start the reaper once, then name the groups it must kill."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pipe: IO[bytes] | None = None

    def start(self) -> None:
        """Start the reaper now (the runner's start), rather than in the first job's."""
        with self._lock:
            self._start()

    def _start(self) -> IO[bytes] | None:
        if self._pipe is None:
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "queuelog.worker.reaper"], stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL, start_new_session=True)
                # No death signal: it would fire when the *thread* that started the reaper
                # ends (a job's), not the runner; end-of-file on the pipe is the runner's end.
            except OSError:
                return None  # the death signal still kills the commands themselves
            self._pipe = proc.stdin
        return self._pipe

    def _send(self, line: str) -> None:
        with self._lock:
            pipe = self._start()
            if pipe is None:
                return
            try:
                pipe.write(line.encode() + b"\n")
                pipe.flush()
            except OSError:
                pass  # the reaper died: nothing to tell

    def watch(self, pgid: int) -> None:
        """Kill group ``pgid`` if the runner dies before ``forget``."""
        self._send(f"+{pgid}")

    def forget(self, pgid: int) -> None:
        """Group ``pgid`` ended with its job: no longer ours to kill."""
        self._send(f"-{pgid}")


def serve(commands: IO[bytes]) -> None:
    """Read ``+PGID``/``-PGID`` lines until end-of-file, then SIGKILL the groups left."""
    groups: set[int] = set()
    signal.signal(signal.SIGTERM, lambda *_: _kill_all(groups))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the runner's to handle
    for line in commands:
        text = line.strip().decode("ascii", "replace")
        if text[:1] in "+-" and text[1:].isdigit():
            (groups.add if text[0] == "+" else groups.discard)(int(text[1:]))
    _kill_all(groups)


def _kill_all(groups: set[int]) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass  # already gone
    os._exit(0)


if __name__ == "__main__":
    serve(sys.stdin.buffer)

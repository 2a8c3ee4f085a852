"""One run of the worker's command: its own process group, payload in, bounded output out."""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from typing import IO, Any, Callable

from queuelog.worker import linux
from queuelog.worker.reaper import Reaper

STDOUT_TAIL = 4096           # kept as {"stdout": ...} when the output is not a JSON object
STDOUT_WHOLE = 1 << 20       # output up to this size is tried as a JSON result
ERROR_BYTES = 8192           # MAX_ERROR_BYTES' default (--max-error-bytes): the server cuts there
PIPE_SETTLE_SECONDS = 1.0    # after the group is killed, how long its pipes may stay open
TERM_TO_KILL_SECONDS = 5.0   # a stopped command's group: SIGTERM, then SIGKILL this much later

# One per runner process: kills the jobs' groups if the runner dies (see reaper.py).
REAPER = Reaper()


def prepare() -> None:
    """Start the reaper and settle the death signal's way now, before the first job waits."""
    linux.prepare()
    REAPER.start()


class Capture:
    """The bytes a pipe carried: all of them up to ``whole``, then only the last ``tail``."""

    def __init__(self, whole: int, tail: int) -> None:
        self.whole, self.tail = whole, tail
        self.data = bytearray()
        self.overflowed = False

    def add(self, chunk: bytes) -> None:
        """Append a chunk, dropping the oldest bytes once over the limit."""
        self.data += chunk
        if len(self.data) > self.whole or (self.overflowed and len(self.data) > self.tail):
            self.overflowed = True
            del self.data[:-self.tail]

    def last(self, size: int) -> str:
        """The last ``size`` bytes as text (a character cut in half is dropped)."""
        return bytes(self.data[-size:]).decode("utf-8", "ignore") if size > 0 else ""


class JobProcess:
    """COMMAND started without a shell in a new session, the payload on its standard input.

    A new session makes it the leader of its own process group, so ``kill`` reaches its
    children and grandchildren too, and a Ctrl-C at the runner's terminal does not. It dies
    with the runner (``PR_SET_PDEATHSIG``), and the reaper kills its group if the runner is
    SIGKILLed, so a background grandchild does not outlive the runner either.
    """

    def __init__(self, argv: list[str], payload: Any, env: dict[str, str], *,
                 error_bytes: int = ERROR_BYTES) -> None:
        runnable(argv[0], env)
        full, preexec = linux.with_death_signal(argv)
        self.proc = subprocess.Popen(full, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, start_new_session=True,
                                     preexec_fn=preexec)
        REAPER.watch(self.proc.pid)
        self.stdout = Capture(STDOUT_WHOLE, STDOUT_TAIL)
        self.stderr = Capture(error_bytes, error_bytes)  # the error's room, at most
        self._readers = [self._thread(self._read, self.proc.stdout, self.stdout),
                         self._thread(self._read, self.proc.stderr, self.stderr)]
        data = json.dumps(payload, separators=(",", ":")).encode("utf-8") + b"\n"
        if len(data) <= 65536:  # fits a Linux pipe: the write cannot block
            self._write(self.proc.stdin, data)
        else:
            self._thread(self._write, self.proc.stdin, data)

    @staticmethod
    def _thread(target: Any, *args: Any) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        return thread

    @staticmethod
    def _write(pipe: IO[bytes] | None, data: bytes) -> None:
        assert pipe is not None
        try:
            pipe.write(data)
            pipe.close()
        except OSError:  # the command exited without reading it all: its business
            pass

    @staticmethod
    def _read(pipe: IO[bytes], into: Capture) -> None:
        with pipe:
            while chunk := pipe.read1(65536):  # type: ignore[attr-defined]
                into.add(chunk)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the command to exit; True once it has."""
        try:
            self.proc.wait(timeout=max(0.0, timeout))
            return True
        except subprocess.TimeoutExpired:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (the command and everything it started)."""
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, hurry: Callable[[], bool], patience: float = TERM_TO_KILL_SECONDS) -> None:
        """SIGTERM the group; SIGKILL it ``patience`` s later, or as soon as ``hurry()``."""
        self.kill(signal.SIGTERM)
        deadline = time.monotonic() + patience
        while not self.wait(min(0.1, deadline - time.monotonic())):
            if hurry() or time.monotonic() >= deadline:
                break
        self.kill()

    def finish(self) -> int:
        """After exit: kill what is left of its group, collect the output; the exit status.

        The job ends with its command: a background child it left is killed now (its
        output so far is still read), so a job's stray processes never outlive it.
        """
        code = self.proc.wait()
        self.kill()
        self._drain(PIPE_SETTLE_SECONDS)
        REAPER.forget(self.proc.pid)
        return code

    def _drain(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        for reader in self._readers:
            reader.join(max(0.0, deadline - time.monotonic()))
        return not any(r.is_alive() for r in self._readers)


def runnable(name: str, env: dict[str, str]) -> None:
    """Raise the OSError exec would when ``name`` cannot run (not found, not executable).

    Behind an exec wrapper (setpriv) that error would only be the wrapper's exit status; a
    job whose command cannot start fails with ``cannot run ...`` either way.
    """
    if shutil.which(name, path=env.get("PATH", os.defpath)) is not None:
        return
    code = errno.EACCES if os.sep in name and os.path.exists(name) else errno.ENOENT
    raise OSError(code, os.strerror(code), name)


def describe_exit(code: int) -> str:
    """``exit status 3`` or ``killed by signal 9 (SIGKILL)``."""
    if code >= 0:
        return f"exit status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "unknown"
    return f"killed by signal {-code} ({name})"


def parse_result(out: Capture) -> dict[str, Any] | None:
    """A JSON object on standard output is the result; other output is its tail; none: None."""
    text = bytes(out.data).decode("utf-8", "replace") if not out.overflowed else None
    if text is not None:
        if not text.strip():
            return None
        value = json_object(text)
        if value is not None:
            return value
    return {"stdout": out.last(STDOUT_TAIL)}


def json_object(text: str) -> dict[str, Any] | None:
    """``text`` as a JSON object that can be sent on as a result, else None (not JSON, not
    an object, or holding what JSON cannot carry)."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) and _sendable(value) else None


def _sendable(value: dict[str, Any]) -> bool:
    """True when the object can go out as JSON in UTF-8.

    ``1e400`` parses as infinity and ``"\\ud800"`` as a lone surrogate: neither can be sent,
    and the request would fail before it left (the output is then kept as text).
    """
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (ValueError, UnicodeError, RecursionError):
        return False
    return True


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity: the server would refuse them

"""Linux process controls the runner needs (``prctl``), through ctypes; no-ops elsewhere.

- ``PR_SET_PDEATHSIG`` in a command's child before exec: the kernel kills the command when
  the runner dies, even by SIGKILL, which no handler of ours could catch.
- ``PR_SET_DUMPABLE 0`` in the runner: its ``/proc/PID/environ`` and memory become root's to
  read, so a command (same user) cannot read the runner's token from there.
- ``scrub_environ``: ``/proc/PID/environ`` shows the environment as it was at exec (the
  original strings, whatever ``unsetenv`` does later), and root reads it despite the above;
  so the token's bytes are overwritten where they lie.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from typing import Any, Callable

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4


def _load_libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def _load_prctl() -> Any:
    if _LIBC is None:
        return None
    prctl = _LIBC.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_LIBC = _load_libc()
# Resolved once in the parent: the child between fork and exec only calls it.
_PRCTL = _load_prctl()


def make_not_dumpable() -> bool:
    """Make this process non-dumpable; True if it took (Linux)."""
    return _PRCTL is not None and _PRCTL(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def scrub_environ(name: str) -> None:
    """Zero ``NAME=value`` in the process's original environment block, then unset it."""
    if _LIBC is not None:
        prefix = name.encode() + b"="
        environ = ctypes.POINTER(ctypes.c_char_p).in_dll(_LIBC, "environ")
        i = 0
        while environ[i] is not None:
            entry = environ[i]
            if entry.startswith(prefix):
                address = ctypes.cast(environ, ctypes.POINTER(ctypes.c_void_p))[i]
                ctypes.memset(address, 0, len(entry))
            i += 1
    os.environ.pop(name, None)


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child get ``sig`` when this process dies; None off Linux."""
    if _PRCTL is None:
        return None
    parent = os.getpid()
    prctl = _PRCTL

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the runner died before prctl took: do not run at all
            os._exit(1)
    return preexec

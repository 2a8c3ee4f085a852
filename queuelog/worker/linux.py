"""Linux process controls the runner needs (``prctl``), through ctypes; no-ops elsewhere.

- ``PR_SET_PDEATHSIG`` in a command's child before exec: the kernel kills the command when
  the runner dies, even by SIGKILL, which no handler of ours could catch. Set by util-linux's
  ``setpriv --pdeathsig`` exec'd in front of the command where it can (``with_death_signal``),
  else by a ``preexec_fn``: Python runs a ``preexec_fn`` in a full ``fork()`` of the runner,
  and that fork path costs several times a ``vfork()`` plus the extra exec, on every
  command.
- ``PR_SET_DUMPABLE 0`` in the runner: its ``/proc/PID/environ`` and memory become root's to
  read, so a command (same user) cannot read the runner's token from there.
- ``scrub_environ``: ``/proc/PID/environ`` shows the environment as it was at exec (the
  original strings, whatever ``unsetenv`` does later), and root reads it despite the above;
  so the token's bytes are overwritten where they lie. The live ``environ`` is looked up among
  the process's own symbols: a non-PIE executable (Debian's ``/usr/bin/python3.11``) holds a
  copy of it that libc itself uses, and libc's own symbol is then left NULL.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import shutil
import signal
import subprocess
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


def _load_self() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None)  # dlsym(RTLD_DEFAULT): the executable's symbols first
    except OSError:
        return None


_LIBC = _load_libc()
_SELF = _load_self()
# Resolved once in the parent: the child between fork and exec only calls it.
_PRCTL = _load_prctl()


def make_not_dumpable() -> bool:
    """Make this process non-dumpable; True if it took (Linux)."""
    return _PRCTL is not None and _PRCTL(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def _environ() -> Any:
    """The process's live ``environ`` array, or None where it cannot be found (off Linux)."""
    # The executable's copy first: where it has one (a non-PIE executable's copy relocation),
    # that is the array libc uses, and libc's own ``environ`` stays NULL.
    for lib in (_SELF, _LIBC):
        if lib is None:
            continue
        try:
            environ = ctypes.POINTER(ctypes.c_char_p).in_dll(lib, "environ")
        except ValueError:  # no such symbol there
            continue
        if environ:  # a NULL pointer is false
            return environ
    return None


def scrub_environ(name: str) -> bool:
    """Zero ``NAME=value`` in the process's original environment block, then unset it.

    False when ``NAME`` was set but its bytes could not be reached (off Linux, or no
    ``environ`` found): it is still unset for what this process starts.
    """
    prefix, scrubbed = name.encode() + b"=", name not in os.environ
    environ = _environ()
    if environ is not None:
        addresses = ctypes.cast(environ, ctypes.POINTER(ctypes.c_void_p))
        i = 0
        while environ[i] is not None:
            entry = environ[i]
            if entry.startswith(prefix):
                ctypes.memset(addresses[i], 0, len(entry))
                scrubbed = True
            i += 1
    os.environ.pop(name, None)
    return scrubbed


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


def with_death_signal(argv: list[str], sig: int = signal.SIGKILL
                      ) -> tuple[list[str], Callable[[], None] | None]:
    """``argv`` and a ``preexec_fn`` that start it to get ``sig`` when this process dies."""
    setpriv = _setpriv()
    if setpriv is None:
        return argv, die_with_parent(sig)
    # No preexec_fn: Popen takes its vfork path. Unlike die_with_parent, setpriv cannot see
    # a runner that died before its prctl; the reaper, told of the group as soon as Popen
    # returns, covers that (all but a SIGKILL within the spawn itself, well under 1 ms).
    # setpriv execs with execvp: a script without a #! line runs under /bin/sh, where
    # Popen alone would refuse it (ENOEXEC).
    return [setpriv, "--pdeathsig", signal.Signals(sig).name[3:], "--", *argv], None


@functools.cache
def _setpriv() -> str | None:
    """setpriv's path if it sets a death signal here (util-linux 2.33 or later), else None."""
    path = shutil.which("setpriv") if _PRCTL is not None else None
    if path is None:
        return None
    try:  # tried once, for real: an older setpriv refuses the option, exit status 1
        done = subprocess.run([path, "--pdeathsig", "KILL", "--", path, "--version"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return path if done.returncode == 0 else None


def prepare() -> None:
    """Find out now, not in the first job's start, how commands get their death signal."""
    _setpriv()

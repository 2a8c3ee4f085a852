"""gunicorn settings that make the metrics right: counters summed over every worker.

prometheus_client's multiprocess mode needs ``PROMETHEUS_MULTIPROC_DIR`` set before it is
first imported, empty at start, and told when a worker dies. Importing this module (the
project's ``gunicorn.conf.py`` does; an operator's own ``-c`` file can too) sets the
variable to a fresh private directory unless the operator set one, and the hooks below
keep it: ``child_exit`` marks a dead worker, ``on_exit`` removes the directory made here.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

__all__ = ["child_exit", "on_exit", "on_starting"]

VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
# Which directory this module made (so a config reload does not mistake it for the
# operator's). Not QUEUELOG_*: that prefix is read as settings.
_MADE = "_QUEUELOG_MADE_PROMETHEUS_DIR"


def prepare() -> str:
    """The multiprocess directory: the operator's, else a fresh empty one made now."""
    folder = os.environ.get(VARIABLE)
    if not folder:
        folder = tempfile.mkdtemp(prefix="queuelog-metrics-")  # 0700, empty
        os.environ[VARIABLE] = os.environ[_MADE] = folder
    return folder


def _ours() -> str | None:
    folder = os.environ.get(VARIABLE)
    return folder if folder and os.environ.get(_MADE) == folder else None


def on_starting(server: Any) -> None:
    """gunicorn hook (master, before workers): the directory exists and, if ours, is empty."""
    folder = prepare()
    if _ours() == folder:
        for name in os.listdir(folder):  # a reused one: last run's counts are not ours
            os.unlink(os.path.join(folder, name))


def child_exit(server: Any, worker: Any) -> None:
    """gunicorn hook (master): a worker died; its live gauges no longer count."""
    from prometheus_client import multiprocess  # after prepare(): multiprocess mode
    multiprocess.mark_process_dead(worker.pid)


def on_exit(server: Any) -> None:
    """gunicorn hook (master, at the end): remove the directory made here."""
    folder = _ours()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


prepare()

"""A job's progress: a file the command writes, the runner sends with a heartbeat.

Each command gets ``QUEUELOG_PROGRESS_FILE``, a path in a private directory (mode 0700) made
for its job and removed when the job ends; the job's other files (``QUEUELOG_JOB_PARENTS_FILE``,
its parents as JSON) go there too, and with it. The command writes a JSON object there whenever it
likes (``echo '{"percent": 40}' > "$QUEUELOG_PROGRESS_FILE"``), in any language and without
HTTP; the runner looks at the file's size and modification time twice a second, which costs
one ``stat``, and reads it only when they changed. A file that is not a JSON object, or over
the server's 1 KiB, is skipped with one log line: progress never fails a job.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any, Callable

ENV = "QUEUELOG_PROGRESS_FILE"
PARENTS_ENV = "QUEUELOG_JOB_PARENTS_FILE"
MAX_BYTES = 1024        # the server's limit, as compact UTF-8 JSON
READ_LIMIT = 64 * 1024  # a file larger than this is not read at all
LOOK_SECONDS = 0.5      # how often the runner looks at the file while the command runs

Signature = tuple[int, int, int]  # modification time (ns), size, inode


class ProgressFile:
    """The progress file of one job: made empty-handed, watched, removed with the job."""

    def __init__(self, job_id: int, *, log: Callable[[str], None]) -> None:
        self.job_id, self.log = job_id, log
        self.folder = tempfile.mkdtemp(prefix=f"queuelog-job-{job_id}-")  # mode 0700
        self.path = os.path.join(self.folder, "progress.json")
        self._seen: Signature | None = None  # the last version read (sent or skipped)
        self._bad: Signature | None = None   # a version that did not parse once
        self._warned = False

    def changed(self) -> dict[str, Any] | None:
        """The progress written since the last call, or None (unchanged, or not sendable)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None  # nothing written yet (or the command removed it)
        version = (st.st_mtime_ns, st.st_size, st.st_ino)
        if version == self._seen or st.st_size == 0:
            return None  # unchanged, or truncated for a write under way
        if st.st_size > READ_LIMIT:
            self._seen = version
            return self._skip(f"{st.st_size} bytes, over {MAX_BYTES}")
        value, why = _read(self.path)
        if why is None:
            self._seen = version
            return value
        # Read while the command was writing it? Then it changes again: skip it quietly.
        # The same version twice is what the command wrote: say so, once.
        if version == self._bad:
            self._seen = version
            return self._skip(why)
        self._bad = version
        return None

    def write(self, name: str, value: Any) -> str:
        """Write ``value`` as JSON into the job's folder (removed with it); the file's path."""
        path = os.path.join(self.folder, name)
        # "x": a name already there is a bug here, never a file to overwrite.
        with open(path, "x", encoding="utf-8") as fh:
            json.dump(value, fh, ensure_ascii=False)
        return path

    def remove(self) -> None:
        """Remove the file and its folder (the job has ended)."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def _skip(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            self.log(f"job={self.job_id} progress skipped ({why}); the job goes on")
        return None


def _read(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """The progress object in the file, or why it is not one."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(READ_LIMIT + 1)
        value = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError too
        return None, f"not JSON: {type(exc).__name__}"
    if not isinstance(value, dict):
        return None, f"a JSON {type(value).__name__}, not an object"
    try:
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False).encode("utf-8"))
    except (ValueError, UnicodeError, RecursionError):
        return None, "not sendable as JSON"
    if size > MAX_BYTES:
        return None, f"{size} bytes as compact JSON, over {MAX_BYTES}"
    return value, None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")

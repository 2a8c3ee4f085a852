"""Where a runner's pickup goes: enqueue -> claim answered -> Popen -> the command's clock.

    python bench/trace_runner.py [--samples 30] [--database-url URL]

One ``gunicorn -w 1`` server (SQLite in a temporary folder unless ``--database-url``), and
a ``queuelog work`` runner in this process with its claim and its ``Popen`` timed, running
``date +%s%N``. Each sample waits 0.2-0.6 s idle (as ``bench_latency.py``'s do), enqueues,
and prints per step p50 and max, in ms: the enqueue's answer, the runner's claim answer
(both from the send), the runner's own work up to ``Popen``, ``Popen`` itself, and the
command's start (its clock reading) after ``Popen`` began.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from queuelog.client import Client  # noqa: E402
from queuelog.worker import process  # noqa: E402
from queuelog.worker.runner import Runner  # noqa: E402
from server_process import Server, make_keys  # noqa: E402

KIND = "traced"
MARKS: dict[str, int] = {}


class TimedClient(Client):
    """The runner's client: notes when a claim's answer arrived."""

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        """Claim, and note the time of the answer."""
        got = super().claim(*args, **kwargs)
        MARKS["claimed"] = time.time_ns()
        return got


class TimedPopen(subprocess.Popen):  # type: ignore[type-arg]
    """``subprocess.Popen`` as the runner's process module sees it, timed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        MARKS["popen"] = time.time_ns()
        super().__init__(*args, **kwargs)
        MARKS["popen_done"] = time.time_ns()


def sample(producer: Client, admin: Client) -> list[float]:
    """One enqueue after an idle pause; the steps' times in ms."""
    time.sleep(random.uniform(0.2, 0.6))
    sent = time.time_ns()
    job = producer.enqueue(KIND)
    answered = time.time_ns()
    time.sleep(0.1)  # no polling on the path being measured
    while (got := admin.get(job["id"]))["status"] != "completed":
        time.sleep(0.01)
    clock = int(got["result"]["stdout"].strip())
    return [(t - s) / 1e6 for t, s in ((answered, sent), (MARKS["claimed"], sent),
                                       (MARKS["popen"], MARKS["claimed"]),
                                       (MARKS["popen_done"], MARKS["popen"]),
                                       (clock, MARKS["popen"]), (clock, sent))]


def main() -> None:
    """Start the server and the runner, take the samples, print the steps."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--database-url", default=None)
    opts = parser.parse_args()
    folder = tempfile.mkdtemp()
    url = opts.database_url or f"sqlite:///{folder}/trace.sqlite3"
    keys = make_keys(url, {"p": "producer", "w": "worker", "a": "admin"})
    token = {k: v["Authorization"].split()[1] for k, v in keys.items()}
    server = Server(url, os.path.join(folder, "server.log"), workers=1, threads=8,
                    env={"QUEUELOG_JOB_TYPES": json.dumps({KIND: {}})}).start()
    base = f"http://127.0.0.1:{server.port}"
    untimed = process.subprocess.Popen
    process.subprocess.Popen = TimedPopen  # type: ignore[misc]
    runner = Runner(TimedClient(base, token["w"]), ["date", "+%s%N"], types=[KIND],
                    log=open(os.devnull, "w"))
    threading.Thread(target=runner.run, daemon=True).start()
    producer, admin = Client(base, token["p"]), Client(base, token["a"])
    try:
        time.sleep(2)  # started and long-polling
        rows = [sample(producer, admin) for _ in range(opts.samples)]
    finally:
        runner.stop()
        server.stop()
        process.subprocess.Popen = untimed  # type: ignore[misc]
    names = ("enqueue answered", "claim answered", "runner to Popen", "Popen call",
             "Popen to command's clock", "enqueue to command's clock")
    for name, column in zip(names, zip(*rows)):
        print(f"{name:27s} p50 {statistics.median(column):6.2f}  max {max(column):6.2f}")


if __name__ == "__main__":
    main()

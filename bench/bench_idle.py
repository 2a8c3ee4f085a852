"""What a request costs right after the process slept: why pickup is slower than a busy call.

    python bench/bench_idle.py [--rounds 5] [--samples 60]

Pickup (bench/peers, bench_latency.py) is measured on an idle server: the waiting claim
and the enqueue that wakes it are the first work in tens of milliseconds. This measures,
in one process through Flask's test client (no gunicorn, no network, no other thread),
the wall time of one call after sleeping 0, 1, 5 and 50 ms, for three pieces of work:

- ``cpu``: a pure-Python loop that touches little memory (the control: is it the clock?);
- ``noop``: ``POST /noop`` of ``bench/noop_app.py`` (Flask, JSON in and out, no work);
- ``enqueue``: queuelog's ``POST /jobs`` on SQLite FULL (a temporary file).

Gaps are interleaved within each round; the figures are the medians over rounds of each
round's median, in milliseconds, and each gap's ratio to no gap.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

GAPS_MS = (0, 1, 5, 50)


def cpu_call() -> Callable[[], None]:
    """A loop of about 0.7 ms whose data fits in a few cache lines."""
    def call() -> None:
        total = 0
        for i in range(20_000):
            total += i * i
    return call


def noop_call() -> Callable[[], None]:
    """One ``POST /noop`` through the no-op app's test client."""
    from bench.noop_app import app
    client = app.test_client()

    def call() -> None:
        assert client.post("/noop", json={"type": "email"}).status_code == 200
    return call


def enqueue_call(folder: str) -> Callable[[], None]:
    """One single enqueue through queuelog's test client, SQLite FULL in ``folder``."""
    from queuelog import create_app
    app = create_app({"DATABASE_URL": f"sqlite:///{folder}/bench.db", "SECRET_KEY": "bench",
                      "BOOTSTRAP_ADMIN": False, "SQLITE_SYNCHRONOUS": "FULL"}, serving=False)
    token = app.extensions["queuelog.store"].accounts.create_key("bench-idle", "producer")[1]
    client = app.test_client()
    headers = {"Authorization": "Bearer " + token}

    def call() -> None:
        resp = client.post("/jobs", json={"type": "email", "payload": {"n": 1}}, headers=headers)
        assert resp.status_code == 201, resp.get_data(as_text=True)
    return call


def timed(call: Callable[[], None], gap_ms: int, samples: int) -> float:
    """The median milliseconds of ``call`` each made ``gap_ms`` after the previous ended."""
    out = []
    for _ in range(samples):
        if gap_ms:
            time.sleep(gap_ms / 1000)
        start = time.perf_counter()
        call()
        out.append((time.perf_counter() - start) * 1000)
    return statistics.median(out)


def main() -> None:
    """Run the rounds and print one line per kind of work."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--samples", type=int, default=60)
    a = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="ql-idle-")
    try:
        calls: dict[str, Callable[[], None]] = {
            "cpu": cpu_call(), "noop": noop_call(), "enqueue": enqueue_call(folder)}
        for call in calls.values():  # warm: imports, caches, the first statements
            for _ in range(20):
                call()
        got: dict[tuple[str, int], list[float]] = {}
        for r in range(a.rounds):
            gaps = GAPS_MS if r % 2 == 0 else tuple(reversed(GAPS_MS))
            for gap in gaps:
                for kind, call in calls.items():
                    got.setdefault((kind, gap), []).append(timed(call, gap, a.samples))
        report(got, a)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def report(got: dict[tuple[str, int], list[float]], a: Any) -> None:
    """A markdown table: per kind, each gap's median ms and its ratio to no gap."""
    print(f"{a.rounds} rounds x {a.samples} calls per gap; ms, median of round medians "
          f"(ratio to no gap)\n")
    print("| work | " + " | ".join(f"after {g} ms" for g in GAPS_MS) + " |")
    print("| --- |" + " --- |" * len(GAPS_MS))
    for kind in ("cpu", "noop", "enqueue"):
        base = statistics.median(got[(kind, 0)])
        cells = [f"{statistics.median(got[(kind, g)]):.2f} ({statistics.median(got[(kind, g)]) / base:.1f}x)"
                 for g in GAPS_MS]
        print(f"| {kind} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

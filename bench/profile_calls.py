"""CPU time per request of the hot calls, in process, through the Flask test client.

    python bench/profile_calls.py                    # SQLite file in a temp dir
    python bench/profile_calls.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/queuelog_bench
    python bench/profile_calls.py --profile claim    # plus the cProfile top of one call kind
    SORT=cumulative TOP=40 CALLERS='_dump_list|search' python bench/profile_calls.py --profile enqueue_batch
                                                     # sorted, longer, and who called these
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.%p \
        python bench/profile_calls.py --callgrind --rounds 1 --single 20 --batches 2

CPU time (``time.process_time``) depends less on how busy the machine is than wall-clock
rates (measured here: up to 1.6x under load 10-16); callgrind's instruction counts (only
the measured calls are instrumented) do not depend on it at all: use them for before/after.
It prints the minimum and the median over rounds of (CPU seconds / calls) in microseconds: a
single enqueue, claim and complete, and one request of each kind in batches of 100 (reported
per request and per job). Its temporary folder is removed at the end.
The PostgreSQL database must be one for benchmarks: its queuelog tables are emptied.
"""
from __future__ import annotations

import argparse
import atexit
import cProfile
import io
import os
import pstats
import re
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

KINDS = ("enqueue", "claim", "complete", "enqueue_batch", "claim_batch", "complete_batch")


def make_app(url: str, workdir: str) -> Any:
    """A queuelog app on ``url``, schema created, tables emptied (PostgreSQL)."""
    from queuelog import create_app
    app = create_app({"DATABASE_URL": url, "SECRET_KEY": "bench", "BOOTSTRAP_ADMIN": False},
                     serving=False)
    store = app.extensions["queuelog.store"]
    if store.backend.name == "postgresql":
        from sqlalchemy import text
        with store.engine.begin() as conn:
            conn.execute(text("TRUNCATE jobs, job_attempts, api_keys, audit_events, job_counts, job_count_deltas CASCADE"))
    return app


class Calls:
    """The six kinds of call, each a function doing ``n`` requests of that kind."""

    def __init__(self, app: Any) -> None:
        store = app.extensions["queuelog.store"]
        self.client = app.test_client()
        suffix = str(time.time_ns())
        self.prod = {"Authorization": "Bearer " + store.accounts.create_key(
            "bench-p" + suffix, "producer")[1]}
        self.work = {"Authorization": "Bearer " + store.accounts.create_key(
            "bench-w" + suffix, "worker")[1]}
        self.held: list[tuple[int, int]] = []

    def _post(self, path: str, body: Any, headers: dict[str, str], want: int) -> Any:
        resp = self.client.post(path, json=body, headers=headers)
        assert resp.status_code == want, (path, resp.status_code, resp.get_data(as_text=True))
        return resp.get_json()

    def enqueue(self, n: int) -> None:
        """``n`` single enqueues."""
        for _ in range(n):
            self._post("/jobs", {"type": "email", "payload": {"n": 1}}, self.prod, 201)

    def claim(self, n: int) -> None:
        """``n`` single claims (jobs held for ``complete``)."""
        for _ in range(n):
            job = self._post("/jobs/claim", {}, self.work, 200)
            self.held.append((job["id"], job["attempt"]))

    def complete(self, n: int) -> None:
        """``n`` single completes of held jobs."""
        for _ in range(n):
            job_id, attempt = self.held.pop()
            self._post(f"/jobs/{job_id}/complete", {"attempt": attempt}, self.work, 200)

    def enqueue_batch(self, n: int) -> None:
        """``n`` batch enqueues of 100."""
        body = {"jobs": [{"type": "email", "payload": {"n": i}} for i in range(100)]}
        for _ in range(n):
            self._post("/jobs/batch", body, self.prod, 201)

    def claim_batch(self, n: int) -> None:
        """``n`` claims of up to 100."""
        for _ in range(n):
            got = self._post("/jobs/claim", {"max_jobs": 100}, self.work, 200)["jobs"]
            self.held.extend((j["id"], j["attempt"]) for j in got)

    def complete_batch(self, n: int) -> None:
        """``n`` batch completes of 100 held jobs."""
        for _ in range(n):
            items, self.held = self.held[:100], self.held[100:]
            self._post("/jobs/complete", {"jobs": [{"id": i, "attempt": a} for i, a in items]},
                       self.work, 200)


def instructions(fn: Callable[[int], None], n: int, kind: str) -> float:
    """Instructions per call of ``fn`` over ``n`` calls, counted by callgrind (this process
    runs under ``valgrind --tool=callgrind --instr-atstart=no``): independent of load."""
    pid = str(os.getpid())
    subprocess.run(["callgrind_control", "-z", pid], check=True, capture_output=True)
    subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
    fn(n)
    out = subprocess.run(["callgrind_control", "-e", "Ir", pid], check=True, capture_output=True,
                         text=True).stdout  # read while instrumented: off, it tells nothing
    subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)
    # "Totals: Ir" then "Th 1  16,905,274" per thread: the sum is the run's.
    counts = [int(c.replace(",", "")) for c in re.findall(r"Th\s+\d+\s+([\d,]+)", out)]
    assert counts, out
    return sum(counts) / n


def cpu_us(fn: Callable[[int], None], n: int) -> float:
    """CPU microseconds per call of ``fn`` over ``n`` calls."""
    start = time.process_time()
    fn(n)
    return (time.process_time() - start) / n * 1e6


def main() -> None:
    """Measure and print CPU per request; optionally the cProfile top of one kind."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--database-url")
    ap.add_argument("--single", type=int, default=300, help="single calls per round")
    ap.add_argument("--batches", type=int, default=10, help="batch requests per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", choices=KINDS, help="print the cProfile top of this kind")
    ap.add_argument("--callgrind", action="store_true",
                    help="count instructions (run under valgrind --tool=callgrind "
                         "--instr-atstart=no) instead of CPU time")
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="ql-profile-")
    atexit.register(shutil.rmtree, workdir, True)  # the database, its WAL and wake-up folder
    url = args.database_url or f"sqlite:///{workdir}/bench.db"
    calls = Calls(make_app(url, workdir))
    calls.enqueue(20)  # warm: statement caches, psycopg's prepared statements
    calls.claim(20)
    calls.complete(20)
    results: dict[str, list[float]] = {k: [] for k in KINDS}
    for _ in range(args.rounds):
        for kind in KINDS:
            n = args.single if "batch" not in kind else args.batches
            if args.callgrind:
                results[kind].append(instructions(getattr(calls, kind), n, kind))
            else:
                results[kind].append(cpu_us(getattr(calls, kind), n))
    unit = "instructions (thousands)" if args.callgrind else "CPU us"
    if args.callgrind:
        results = {k: [v / 1000 for v in vs] for k, vs in results.items()}
    print(f"database: {url.split('@')[-1]}; {unit} per request over {args.rounds} rounds: "
          "min (the least disturbed by other load) and median")
    for kind in KINDS:
        best, med = min(results[kind]), statistics.median(results[kind])
        per_job = f"  ({best / 100:.1f} per job)" if "batch" in kind else ""
        print(f"  {kind:15s} min {best:7.0f}  median {med:7.0f}{per_job}")
    if args.profile:
        kind = args.profile
        n = args.single if "batch" not in kind else args.batches
        if kind in ("claim", "complete", "claim_batch", "complete_batch"):
            calls.enqueue_batch(n * (100 if "batch" in kind else 1) // 100 + 1)
        if kind in ("complete", "complete_batch"):
            getattr(calls, kind.replace("complete", "claim"))(n)
        prof = cProfile.Profile()
        prof.enable()
        getattr(calls, kind)(n)
        prof.disable()
        out = io.StringIO()
        st = pstats.Stats(prof, stream=out).sort_stats(os.environ.get("SORT", "tottime"))
        st.print_stats(int(os.environ.get("TOP", "25")))
        if os.environ.get("CALLERS"):
            st.print_callers(os.environ["CALLERS"])
        print(out.getvalue())


if __name__ == "__main__":
    main()

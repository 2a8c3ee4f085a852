"""Password guessing vs. everyone else: an unrelated API call's latency while clients guess.

    python bench/bench_guessing.py [--tree DIR] [--guessers 8] [--seconds 10] [--mode rotate]

Serves ``app:app`` from DIR (default: this checkout; give an export of another commit to
compare, e.g. ``git archive main | tar -x -C /tmp/before``) under gunicorn
(-w 2 -k gthread --threads 4) on 127.0.0.1, with a SQLite database in a temporary folder
and a user whose password has the real (slow) default hash. It times ``GET /jobs?limit=1``
with an API key, one call after another: first alone, then while GUESSERS threads send
wrong Basic passwords as fast as answers come. Prints medians and 90th percentiles (ms)
and what the guessers got.

``--mode same``: every guess names one user (the sign-in throttle applies after 10);
``--mode rotate``: each guess names a fresh username (what dodges a per-name throttle), so
only the bound on concurrent password hashes protects the server.
"""
from __future__ import annotations

import argparse
import base64
import collections
import http.client
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

from queuelog.server.store import Store  # noqa: E402
from werkzeug.security import generate_password_hash  # noqa: E402


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(port: int, path: str, headers: dict[str, str],
        conn: http.client.HTTPConnection | None = None) -> int:
    """One GET; the status."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        if own:
            conn.close()


def timed_calls(port: int, headers: dict[str, str], seconds: float) -> list[float]:
    """Latencies (ms) of back-to-back unrelated calls for ``seconds``."""
    out: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        start = time.perf_counter()
        status = get(port, "/jobs?limit=1", headers)
        out.append((time.perf_counter() - start) * 1000)
        assert status == 200, status
    return out


def summary(label: str, ms: list[float]) -> str:
    """Median and p90 of a list of milliseconds."""
    p90 = statistics.quantiles(ms, n=10)[-1] if len(ms) >= 10 else max(ms)
    return f"{label}: median {statistics.median(ms):.1f} ms, p90 {p90:.1f} ms ({len(ms)} calls)"


def main() -> None:
    """Run the benchmark and print its numbers."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", default=HERE)
    parser.add_argument("--guessers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--mode", choices=["same", "rotate"], default="rotate")
    args = parser.parse_args()

    folder = tempfile.mkdtemp(prefix="queuelog-guess-")
    url = f"sqlite:///{folder}/q.sqlite3"
    store = Store(url)
    store.create_schema()
    store.accounts.create_user("ada", generate_password_hash("the right one"), "admin")
    _, token = store.accounts.create_key("reader", "producer")
    store.close()
    key = {"Authorization": f"Bearer {token}"}

    port = free_port()
    env = {**os.environ, "QUEUELOG_DATABASE_URL": url, "QUEUELOG_SECRET_KEY": "bench",
           "QUEUELOG_BOOTSTRAP_ADMIN": "false", "PYTHONPATH": args.tree}
    log = open(os.path.join(folder, "server.log"), "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-w", "2", "-k", "gthread", "--threads", "4",
         "-b", f"127.0.0.1:{port}", "app:app"],
        cwd=args.tree, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if get(port, "/healthz", {}) == 200:
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise SystemExit("server did not start")
        timed_calls(port, key, 1)  # warm up both workers
        print(f"tree {args.tree}, {args.guessers} guessers, mode {args.mode}")
        print(summary("alone        ", timed_calls(port, key, args.seconds)))

        stop = threading.Event()
        answers: collections.Counter[int] = collections.Counter()
        lock = threading.Lock()

        def guess(n: int) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            i = 0
            while not stop.is_set():
                i += 1
                name = "ada" if args.mode == "same" else f"guess-{n}-{i}"
                raw = base64.b64encode(f"{name}:wrong-{i}".encode()).decode()
                try:
                    status = get(port, "/jobs", {"Authorization": f"Basic {raw}"}, conn)
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    status = 0
                with lock:
                    answers[status] += 1
            conn.close()

        threads = [threading.Thread(target=guess, args=(n,)) for n in range(args.guessers)]
        for t in threads:
            t.start()
        time.sleep(1)  # let the guessers get going
        print(summary("while guessing", timed_calls(port, key, args.seconds)))
        stop.set()
        for t in threads:
            t.join(timeout=60)
        print("guessers got:", dict(sorted(answers.items())))
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


if __name__ == "__main__":
    main()

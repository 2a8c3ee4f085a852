"""``queuelog work --post URL`` against ``-- true``: jobs per second, the same no-op jobs.

    python bench/bench_push.py [--jobs 2000] [--concurrency 8] [--rounds 3] [--database-url URL]

Starts gunicorn (4 workers x 8 threads, as bench_runner.py does) on a fresh database and a
no-op push target (a threaded ``http.server`` answering 204 with keep-alive, in a process of
its own), then, for each round, enqueues the jobs and times from the runner's start until
every job is completed:

- **push**: ``queuelog work --concurrency N --post URL --secret-file F`` (signed requests);
- **command**: ``queuelog work --concurrency N -- true`` (a process started per job).

The two alternate which goes first from round to round; the medians are printed, then every
round.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_runner import fill, unfinished  # noqa: E402
from queuelog.client import Client  # noqa: E402
from server_process import Server, free_port, make_keys  # noqa: E402

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
# The target: reads the body, answers 204, keeps the connection (HTTP/1.1).
NOOP_TARGET = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
s.daemon_threads = True
s.serve_forever()
"""


def time_runner(url: str, token: str, kind: str, how: list[str], concurrency: int,
                admin: Client) -> float:
    """Seconds for ``queuelog work ... HOW`` to complete every job of ``kind``."""
    env = {**os.environ, "PYTHONPATH": ROOT, "QUEUELOG_URL": url, "QUEUELOG_TOKEN": token}
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "queuelog", "work", "--types", kind,
                             "--concurrency", str(concurrency), *how],
                            env=env, stderr=subprocess.DEVNULL)
    try:
        while unfinished(admin, kind):
            time.sleep(0.1)
        return time.monotonic() - began
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    """Alternate the two runners for ``--rounds`` rounds; print jobs/s, medians first."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="queuelog-bench-push-")
    kinds = [f"{k}{r}" for r in range(args.rounds) for k in ("push", "command")]
    db = args.database_url or f"sqlite:///{tmp}/bench.sqlite3"
    keys = make_keys(db, {"producer": "producer", "worker": "worker", "root": "admin"})
    tokens = {n: h["Authorization"].split()[1] for n, h in keys.items()}
    server = Server(db, os.path.join(tmp, "server.log"), workers=4, threads=8, env={
        "QUEUELOG_JOB_TYPES": "{" + ", ".join(f'"{k}": {{}}' for k in kinds) + "}"}).start()
    port = free_port()
    target = subprocess.Popen([sys.executable, "-c", NOOP_TARGET, str(port)])
    secret = os.path.join(tmp, "hook.secret")
    with open(secret, "w", encoding="utf-8") as fh:
        fh.write(SECRET)
    os.chmod(secret, 0o600)
    how = {"push": ["--post", f"http://127.0.0.1:{port}/hook", "--secret-file", secret],
           "command": ["--", "true"]}
    url = f"http://127.0.0.1:{server.port}"
    producer, admin = Client(url, tokens["producer"]), Client(url, tokens["root"])
    rates: dict[str, list[float]] = {"push": [], "command": []}
    try:
        time.sleep(0.3)  # the target's start
        for r in range(args.rounds):
            order = ["push", "command"] if r % 2 == 0 else ["command", "push"]
            for name in order:
                kind = f"{name}{r}"
                fill(producer, args.jobs, kind)
                seconds = time_runner(url, tokens["worker"], kind, how[name],
                                      args.concurrency, admin)
                rates[name].append(args.jobs / seconds)
        load = os.getloadavg()[0]
        print(f"{args.jobs} jobs a round, concurrency {args.concurrency}, {db.split(':')[0]}, "
              f"{args.rounds} rounds (load average {load:.2f} at the end):")
        for name, got in rates.items():
            print(f"  {name:<8} median {statistics.median(got):6.0f} jobs/s   rounds: "
                  + ", ".join(f"{x:.0f}" for x in got))
        ratio = statistics.median(rates["push"]) / statistics.median(rates["command"])
        print(f"  push / command: {ratio:.2f}x")
    finally:
        for c in (producer, admin):
            c.close()
        target.terminate()
        target.wait(timeout=10)
        server.stop()


if __name__ == "__main__":
    main()

"""What the ``otel`` extra costs when installed but not configured: the peers benchmark's
single calls on two servers that differ only in it.

    python -m venv /tmp/venv-bare && /tmp/venv-bare/bin/pip install <queuelog's dependencies>
    python -m venv /tmp/venv-otel && /tmp/venv-otel/bin/pip install <the same> \\
        opentelemetry-api opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
    python bench/bench_otel.py --bare /tmp/venv-bare/bin/python --otel /tmp/venv-otel/bin/python

Each interpreter serves this checkout (PYTHONPATH) with ``gunicorn -w 1 -k gthread
--threads 4`` on a SQLite database of its own, no OTEL_* variable set. SQLite runs with
``SQLITE_SYNCHRONOUS=NORMAL`` so that the figure is the servers' CPU, not the disk's fsync.
Load: ``--clients`` processes, one keep-alive connection each, single calls for
``--seconds`` per phase: ``POST /jobs`` (enqueue), then ``POST /jobs/claim`` followed by
``POST /jobs/{id}/complete`` (claim + complete). Rounds alternate which server goes first,
so drift on a busy machine hits both. Two figures per round: requests per second, and the
server worker's CPU time per request (from /proc: what the hot path costs, much less moved
by other load on the machine than throughput is). Each is reported as the median of the
per-round ratios (otel / bare; 1.00 is "no cost").
"""
from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from server_process import free_port, make_keys  # noqa: E402


def has_otel(python: str) -> bool:
    """Whether ``python`` can import the otel extra's SDK."""
    code = "try:\n import opentelemetry.sdk\n print(True)\nexcept ImportError:\n print(False)"
    return subprocess.run([python, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "True"


class Server:
    """gunicorn under ``python`` on a database of its own, no OTEL_* in its environment."""

    def __init__(self, python: str, folder: str) -> None:
        self.url = f"sqlite:///{folder}/q.sqlite3"
        self.keys = make_keys(self.url, {"p": "producer", "w": "worker"})
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "QUEUELOG_"))}
        env.update(PYTHONPATH=ROOT, QUEUELOG_DATABASE_URL=self.url,
                   QUEUELOG_SECRET_KEY="bench", QUEUELOG_BOOTSTRAP_ADMIN="false",
                   QUEUELOG_SQLITE_SYNCHRONOUS="NORMAL")
        self.proc = subprocess.Popen(
            [python, "-m", "gunicorn", "-w", "1", "-k", "gthread", "--threads", "4",
             "-b", f"127.0.0.1:{self.port}", "app:app"], cwd=ROOT, env=env,
            stdout=open(f"{folder}/server.log", "ab"), stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if _call(http.client.HTTPConnection("127.0.0.1", self.port, timeout=2),
                         "GET", "/healthz", None, {})[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"server under {python} did not start; see {folder}/server.log")

    def cpu(self) -> float:
        """CPU seconds the gunicorn worker (the master's one child) has used so far."""
        children = open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read().split()
        fields = open(f"/proc/{children[0]}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        """SIGKILL the group: nothing here needs a graceful stop."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


def _call(conn: http.client.HTTPConnection, method: str, path: str, body: Any,
          headers: dict[str, str]) -> tuple[int, Any]:
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    resp = conn.getresponse()
    raw = resp.read()
    return resp.status, json.loads(raw) if raw else None


def _client(port: int, keys: dict[str, dict[str, str]], phase: str, seconds: float,
            out: Any) -> None:
    """One client process: as many single calls of ``phase`` as fit in ``seconds``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        if phase == "enqueue":
            status, _ = _call(conn, "POST", "/jobs", {"type": "email", "payload": {"n": n}},
                              keys["p"])
            assert status == 201, status
            n += 1
        else:
            status, job = _call(conn, "POST", "/jobs/claim", {}, keys["w"])
            if status == 204:
                continue
            status, _ = _call(conn, "POST", f"/jobs/{job['id']}/complete",
                              {"attempt": job["attempt"]}, keys["w"])
            assert status == 200, status
            n += 2
    out.put(n)


def measure(server: Server, phase: str, seconds: float, clients: int) -> tuple[float, float]:
    """Requests per second of ``phase`` against ``server``, and its CPU microseconds per
    request."""
    queue: Any = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_client, args=(server.port, server.keys, phase,
                                                           seconds, queue))
             for _ in range(clients)]
    cpu = server.cpu()
    for proc in procs:
        proc.start()
    total = sum(queue.get() for _ in procs)
    cpu = server.cpu() - cpu
    for proc in procs:
        proc.join()
    return total / seconds, cpu * 1e6 / max(total, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bare", required=True, help="a python without the otel extra")
    parser.add_argument("--otel", required=True, help="a python with it installed")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=2)
    args = parser.parse_args()
    assert not has_otel(args.bare) and has_otel(args.otel), "--bare must lack it, --otel have it"
    folder = tempfile.mkdtemp(prefix="bench-otel-")
    servers = {}
    for name in ("bare", "otel"):
        os.makedirs(f"{folder}/{name}")
        servers[name] = Server(getattr(args, name), f"{folder}/{name}")
    phases = ("enqueue", "claim+complete")
    # per phase, per server: (req/s, CPU us per request) of each round
    got: dict[str, dict[str, list[tuple[float, float]]]] = {
        p: {"bare": [], "otel": []} for p in phases}
    try:
        for r in range(args.rounds):
            order = ("bare", "otel") if r % 2 == 0 else ("otel", "bare")
            for phase in phases:
                for name in order:
                    got[phase][name].append(
                        measure(servers[name], phase, args.seconds, args.clients))
                (b_rate, b_cpu), (o_rate, o_cpu) = got[phase]["bare"][-1], got[phase]["otel"][-1]
                print(f"round {r + 1:2d} {phase:15s} bare {b_rate:6.0f} req/s {b_cpu:6.0f} us  "
                      f"otel {o_rate:6.0f} req/s {o_cpu:6.0f} us  "
                      f"ratios {o_rate / b_rate:.3f} {o_cpu / b_cpu:.3f}", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    print(f"\nmedians over {args.rounds} rounds (ratio: otel / bare, per round):")
    for phase in phases:
        bare, otel = got[phase]["bare"], got[phase]["otel"]
        rate = statistics.median(o[0] / b[0] for b, o in zip(bare, otel))
        cpu = statistics.median(o[1] / b[1] for b, o in zip(bare, otel))
        print(f"{phase:15s} req/s bare {statistics.median(b[0] for b in bare):6.0f} "
              f"otel {statistics.median(o[0] for o in otel):6.0f} ratio {rate:.3f} | "
              f"CPU us/request bare {statistics.median(b[1] for b in bare):5.0f} "
              f"otel {statistics.median(o[1] for o in otel):5.0f} ratio {cpu:.3f}")


if __name__ == "__main__":
    main()

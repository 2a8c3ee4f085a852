"""PostgreSQL restarted under load: counts answers by status, lost and doubled jobs, tracebacks.

Runs gunicorn (``-w 2 -k gthread --threads 8``) on the given database, producers that enqueue
with idempotency keys and retry until answered, and runs RESTART_COMMAND in the middle. Use a
PostgreSQL of your own (the restart cuts every other client of that server too), e.g.:

    python bench/pg_restart.py --database-url postgresql+psycopg://postgres@127.0.0.1:55433/q \\
        --restart "runuser -u postgres -- pg_ctl -D /tmp/pg/data restart -m fast"
"""
from __future__ import annotations

import argparse
import collections
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from server_process import Server, make_keys, request, table_rows  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    """Run the load, restart the database once, print the tally."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--restart", required=True, help="the command that restarts PostgreSQL")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--producers", type=int, default=6)
    args = parser.parse_args(argv)

    table_rows(args.database_url, "SELECT 1")
    headers = make_keys(args.database_url, {f"bench-producer-{time.time_ns()}": "producer"})
    headers = next(iter(headers.values()))
    log = Path(tempfile.mkdtemp()) / "server.log"
    server = Server(args.database_url, str(log), workers=2, threads=8).start()
    statuses: collections.Counter[int] = collections.Counter()
    acked: dict[str, int] = {}
    lock = threading.Lock()
    stop = threading.Event()
    run = time.time_ns()

    def produce(c: int) -> None:
        n = 0
        while not stop.is_set():
            key = f"restart-{run}-{c}-{n}"
            n += 1
            while True:
                try:
                    status, job = request(server.port, "POST", "/jobs",
                                          {"type": "email", "idempotency_key": key}, headers)
                except OSError:
                    status, job = -1, None
                with lock:
                    statuses[status] += 1
                if status in (200, 201):
                    with lock:
                        acked[key] = job["id"]
                    break
                time.sleep(0.05)

    threads = [threading.Thread(target=produce, args=(c,)) for c in range(args.producers)]
    for thread in threads:
        thread.start()
    time.sleep(args.seconds / 2)
    began = time.monotonic()
    subprocess.run(shlex.split(args.restart), check=True, capture_output=True)
    restart_took = time.monotonic() - began
    time.sleep(args.seconds / 2)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    health = request(server.port, "GET", "/healthz")[0]
    server.stop()
    rows = table_rows(args.database_url, "SELECT idempotency_key, count(*) AS n FROM jobs "
                      f"WHERE idempotency_key LIKE 'restart-{run}-%' GROUP BY 1")
    found: dict[str, Any] = {r.idempotency_key: r.n for r in rows}
    text = log.read_text(errors="replace")
    print(f"restart took {restart_took:.1f} s; answers by status {dict(sorted(statuses.items()))}")
    print(f"acknowledged {len(acked)}, found {len(found)}, "
          f"lost {sum(1 for k in acked if k not in found)}, "
          f"doubled {sum(1 for n in found.values() if n > 1)}; /healthz afterwards {health}")
    print(f"log: {text.count('Traceback')} tracebacks, "
          f"{text.count('database unavailable')} 'database unavailable' lines, "
          f"{text.count('database is back')} 'database is back' lines")


if __name__ == "__main__":
    main()

"""What prepared.py buys: a hot statement run by ``Prepared`` vs by SQLAlchemy's own path.

``Prepared`` reads SQLAlchemy's compiled statement (bind processors, positional names,
post-compile parameters) and runs its text on the transaction's driver cursor; the
alternative that reads no private API is ``conn.execute(statement, params)``. Both run a
worker's heartbeat (one fenced UPDATE ... RETURNING, as the API's) on one held job, each
call its own transaction, alternated in rounds; the figures are medians of the rounds.

    python bench/bench_prepared.py                          # SQLite in a temp dir
    python bench/bench_prepared.py --database-url postgresql+psycopg://postgres@127.0.0.1/queuelog_bench
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from queuelog.server.store import NewJob, Store  # noqa: E402
from queuelog.server.store import statements as st  # noqa: E402
from queuelog.server.store.prepared import Prepared  # noqa: E402


def per_call_us(run: Callable[[], Any], calls: int) -> float:
    """Microseconds a call, over ``calls`` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    """Alternate the two paths in rounds and print their medians and ratio."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    url = args.database_url or f"sqlite:///{tempfile.mkdtemp()}/bench.sqlite3"
    store = Store(url, sqlite_synchronous="NORMAL")
    store.create_schema()
    job, _ = store.enqueue(NewJob("bench", "email", "{}", 0, 3))
    held = store.claim("w1")
    assert held is not None and held.id == job.id
    statement = st.heartbeat(st.lease_until(300.0, {}))
    prepared = Prepared(statement, store.engine.dialect)
    write = store.ctx.write
    params = {"jid": held.id, "att": held.attempt, "wkr": "w1", "lease_us": None}

    def by_prepared() -> None:
        with write.begin() as conn:
            assert prepared.first(conn, {**params, "now": store.clock()}) is not None

    def by_core() -> None:
        with write.begin() as conn:
            assert conn.execute(statement, {**params, "now": store.clock()}).first() is not None

    rounds: dict[str, list[float]] = {"prepared": [], "core": []}
    for _ in range(args.rounds):
        rounds["prepared"].append(per_call_us(by_prepared, args.calls))
        rounds["core"].append(per_call_us(by_core, args.calls))
    p, c = (statistics.median(rounds[k]) for k in ("prepared", "core"))
    print(f"{store.backend.name}: heartbeat transaction, median of {args.rounds} rounds of "
          f"{args.calls}: Prepared {p:.0f} us, Core conn.execute {c:.0f} us "
          f"(Core costs {c / p:.2f}x; {c - p:.0f} us a statement)")
    store.close()


if __name__ == "__main__":
    main()

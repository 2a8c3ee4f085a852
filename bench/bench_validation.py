"""Request-body validation per call: the fastjsonschema check of the request path, and the
jsonschema explanation a bad body gets. Run: ``python bench/bench_validation.py``."""
from __future__ import annotations

import copy
import timeit
from typing import Any

from queuelog.server.config import DEFAULTS
from queuelog.server.requests.bodies import bodies
from queuelog.server.requests.check import Declared
from queuelog.server.requests.explain import FieldErrors

BODIES = bodies({**DEFAULTS, "MAX_BATCH": 500})
JOB = {"type": "email", "payload": {"to": "a@example.com"}, "priority": "high",
       "max_retries": 3, "idempotency_key": "k-1"}


def per_call(name: str, body: Any, number: int) -> float:
    """Microseconds per check of a fresh copy of ``body``."""
    declared, bodies_ = Declared(BODIES[name]), [copy.deepcopy(body) for _ in range(number)]
    it = iter(bodies_)
    seconds = timeit.timeit(lambda: declared.check(next(it), FieldErrors()), number=number)
    return seconds / number * 1e6


def main() -> None:
    """Print the cost of each case."""
    bad_item = {"type": "email", **{f"x{n:03d}": 1 for n in range(200)}}
    cases = [("valid NewJob", "NewJob", JOB, 20_000),
             ("valid 500-item batch", "NewJobBatch", {"jobs": [JOB] * 500}, 50),
             ("invalid NewJob (2 errors)", "NewJob", {**JOB, "priority": "x", "bogus": 1}, 2000),
             ("500 items x 200 unknown fields", "NewJobBatch", {"jobs": [bad_item] * 500}, 5)]
    for label, name, body, number in cases:
        print(f"{label:34} {per_call(name, body, number):12.1f} us")


if __name__ == "__main__":
    main()

"""Exact jobs per (status, type), read from the trigger-kept tables (migration 0008).

The cost is the number of (status, type) pairs plus the deltas not yet folded (at most
about ``FOLD_AT``), whatever the size of ``jobs``: /metrics, GET /types, /ui/ and
/ui/types read here instead of walking an index of every job.
"""
from __future__ import annotations

from sqlalchemy import Connection, Engine, func, literal_column, select, union_all

from queuelog.server.store import backends
from queuelog.server.store.tables import job_count_deltas, job_counts

FOLD_AT = 1000  # deltas a read adds up before it folds them into the totals

_PARTS = union_all(
    select(job_counts.c.status, job_counts.c.type, job_counts.c.n,
           literal_column("0").label("delta")),
    select(job_count_deltas.c.status, job_count_deltas.c.type, job_count_deltas.c.n,
           literal_column("1").label("delta"))).subquery()
# One statement, so one snapshot: a fold committing meanwhile is seen whole or not at all.
_READ = (select(_PARTS.c.status, _PARTS.c.type, func.sum(_PARTS.c.n), func.sum(_PARTS.c.delta))
         .group_by(_PARTS.c.status, _PARTS.c.type))

Counts = dict[tuple[str, str], int]


def read_counts(conn: Connection) -> tuple[Counts, int]:
    """Jobs per (status, type), zeros left out, and how many deltas were added up."""
    counts, deltas = {}, 0
    for status, job_type, n, d in conn.execute(_READ):
        deltas += int(d or 0)
        if int(n):
            counts[status, job_type] = int(n)
    return counts, deltas


def fold_if_many(write: Engine, deltas: int) -> None:
    """Fold the deltas into the totals once there are many, so reads stay small."""
    if deltas >= FOLD_AT:
        fold(write)


def fold(write: Engine) -> bool:
    """Fold every delta into the totals now; False where the database keeps none."""
    return backends.of(write).fold_counts(write)


def keeps_deltas(engine: Engine) -> bool:
    """True where the triggers append deltas that need folding (PostgreSQL)."""
    return not backends.of(engine).counts_in_place


def job_counts_of(engine: Engine, write: Engine) -> Counts:
    """Exact jobs per (status, type) (see ``read_counts``), folding the deltas if many."""
    with engine.connect() as conn:
        counts, deltas = read_counts(conn)
    fold_if_many(write, deltas)
    return counts

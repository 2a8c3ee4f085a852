"""Claim-time policy: which due jobs a claim may take now, decided in one place.

Every claim path (single, batch, long poll) runs ``Jobs.claim_many``, which asks this
module inside the claim's own transaction, so no path can skip it:

- **paused types** are a condition of the claim statement itself (``eligible``);
- **flow control** (CONTRACT.md, Flow control): when a type the claim may take has a
  concurrency or rate limit in force, ``allowance`` reads what each such type has left
  (slots and tokens). A type with nothing left is added to the statement's ``:blocked``
  list, skipped as a paused type is, and the claim takes the next best job of another
  type (``take``). ``settle`` then spends the tokens taken. No two claims spend one slot
  or token:

  - SQLite: the write transaction holds the database's one write lock from BEGIN, so the
    reading is already exact;
  - PostgreSQL: claims run on an unlocked reading, in parallel; ``settle`` then locks the
    limiter rows of the types claimed (``FOR UPDATE``, in name order), counts again with
    everything committed meanwhile and, if a limit would be overrun, says so: the claim
    rolls back and runs again with the rows locked first (``locked=True``). Only these
    last statements and the commit take turns per type, not the claim itself (issue 16:
    locking first made a limited type's claims take turns over the whole transaction).

Without a limit in force the claim runs as before: one small read more.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from sqlalchemy import ColumnElement, Connection, bindparam, select

from queuelog.model.limits import NONE, Limits
from queuelog.server.store.limits import Limiter, in_force, token_due_us, tokens_now
from queuelog.server.store.tables import paused_types

UNLIMITED = 1 << 30
NEAR_LIMIT = 2  # claims or tokens left at most: PostgreSQL claims under the lock from the start
# The bucket is refilled in Python for the reading and in SQL for the check: the two may
# differ in the last bits of a float, which must not make a whole token an overrun.
TOKEN_SLACK = 1e-9
# The extra condition of the statements a limited claim runs, and its SQLite text.
BLOCKED_SQL = "cand.type NOT IN :blocked"
BLOCKED_PARAM = bindparam("blocked", expanding=True)


def eligible(cand: Any) -> ColumnElement[bool]:
    """The condition a due job (a row of ``cand``, an alias of jobs) must meet to be claimed.

    A paused type is skipped by the walk (the small paused_types set is read once per
    statement), so the claim stays a walk of the claim index in claim order.
    """
    return cand.c.type.not_in(select(paused_types.c.type))


def not_blocked(cand: Any) -> ColumnElement[bool]:
    """Skip the types at their limit (``:blocked``, a list the claim fills in)."""
    return cand.c.type.not_in(BLOCKED_PARAM)


@dataclasses.dataclass
class Allowance:
    """What each limited type the claim may take has left now, and its bucket."""

    left: dict[str, int]              # claims left per limited type (0: skipped)
    tokens: dict[str, float]          # the bucket now, per rate-limited type
    next_due_us: int | None           # when an empty bucket of a skipped type refills
    limits: dict[str, Limits] = dataclasses.field(default_factory=dict)  # read in force

    def blocked(self) -> list[str]:
        """The types this claim must skip."""
        return sorted(t for t, k in self.left.items() if k <= 0)


def first_read(limiter: Limiter, configured: Mapping[str, Limits]) -> tuple[Any, Any]:
    """The claim's first read of the limiter rows, with running counts (``allowance``'s
    ``first``), as a statement and parameters: the claim sends it with the lease read."""
    return limiter.rows_counting_read(sorted(t for t, lim in configured.items()
                                             if lim.concurrency is not None))


def limited_types(configured: Mapping[str, Limits], types: Sequence[str] | None,
                  first: Sequence[Any]) -> tuple[dict[str, Limits], list[str]]:
    """Every type's limits in force, read from ``first`` (``first_read``'s rows), and the
    types this claim may take that have one (none: the claim needs no allowance)."""
    wanted = None if types is None else set(types)
    everywhere = in_force(configured, first)
    return everywhere, sorted(t for t, lim in everywhere.items()
                              if lim.any and (wanted is None or t in wanted))


def allowance(conn: Connection, limiter: Limiter, configured: Mapping[str, Limits],
              types: Sequence[str] | None, now: int, *, locked: bool = False,
              first: Sequence[Any] | None = None,
              ) -> tuple[Allowance | None, dict[str, Limits]]:
    """What the limited types this claim may take have left (None if none), and every
    type's limits in force; ``locked``: under their limiter rows' locks (PostgreSQL);
    ``first``: the rows of ``first_read`` if the claim has read them already."""
    if first is None:
        statement, params = first_read(limiter, configured)
        first = statement.rows(conn, params)
    everywhere, limited = limited_types(configured, types, first)
    if not limited:
        return None, everywhere
    rows = {r.type: r for r in first if r.type in limited}
    counted = {t: r.running for t, r in rows.items() if r.running is not None}
    if locked or (limiter.backend.writes_lock_reads and len(rows) < len(limited)):
        # Locked, a limit changed since the first read applies now; SQLite's write lock
        # was held from BEGIN, so its first read was exact, unless a row must be made.
        rows = limiter.lock(conn, limited)
        counted = {}
    out = _left(conn, limiter, configured, limited, rows, counted, now)
    if not locked and not limiter.backend.writes_lock_reads and any(
            0 < k <= NEAR_LIMIT for k in out.left.values()):
        # Near a limit, claims racing on the unlocked reading would mostly roll back at
        # the check (every waiter wakes when a slot frees): take the lock first instead.
        out = _left(conn, limiter, configured, limited, limiter.lock(conn, limited), {}, now)
    return out, everywhere


def _left(conn: Connection, limiter: Limiter, configured: Mapping[str, Limits],
          limited: list[str], rows: Mapping[str, Any], counted: Mapping[str, int],
          now: int) -> Allowance:
    """The allowance from the limiter ``rows`` and the running counts (``counted``, the
    rest counted here)."""
    limits = in_force({t: configured.get(t, NONE) for t in limited}, list(rows.values()))
    running = {t: n for t, n in counted.items() if limits[t].concurrency}
    running.update(limiter.running(conn, [t for t, lim in limits.items()
                                          if lim.concurrency and t not in counted]))
    out = Allowance({}, {}, None, dict(limits))
    for t, lim in limits.items():
        left = UNLIMITED
        if lim.concurrency is not None:
            left = max(0, lim.concurrency - running.get(t, 0))
        tokens = tokens_now(lim, rows.get(t), now)
        if tokens is not None:
            out.tokens[t] = tokens
            if left and tokens < 1:
                due = token_due_us(lim, tokens, now)
                out.next_due_us = due if out.next_due_us is None else min(out.next_due_us, due)
            left = min(left, int(tokens))
        out.left[t] = left
    return out


def settle(conn: Connection, limiter: Limiter, configured: Mapping[str, Limits],
           allow: Allowance, got: Sequence[Any], now: int) -> bool:
    """Spend the tokens the claimed jobs ``got`` took; False (roll back) if, with what
    other claims committed meanwhile, that overruns a limit (PostgreSQL).

    PostgreSQL: the limiter rows are locked and, in the same round trip (a pipeline), one
    statement per type refills and spends its bucket from the row as it is now and counts
    its running jobs; begun after the lock, it sees every claim committed before, and our
    own (so the count may reach the concurrency, not pass it). What it wrote is checked
    after: an overrun, or a limit changed since the reading, rolls it back with the rest.
    A type whose limiter row the lock did not return goes the locked way
    (``allowance(locked=True)`` makes it, or waits for the claim making it).
    """
    taken: dict[str, int] = {}
    for r in got:
        if r.type in allow.left:
            taken[r.type] = taken.get(r.type, 0) + 1
    if not taken:
        return True
    if limiter.backend.writes_lock_reads:  # SQLite: the reading was under the write lock
        limiter.spend(conn, now, {t: allow.tokens[t] - n for t, n in taken.items()
                                  if t in allow.tokens})
        return True
    rows, spent = limiter.lock_spend_count(conn, taken, allow.limits, now)
    if len(rows) < len(taken) or len(spent) < len(taken):
        # A row the lock did not return (made by a claim not committed when the lock
        # read): the spend may then have waited for that row's lock, and its count is of
        # the snapshot from before the wait, missing what committed meanwhile.
        return False
    fresh = in_force({t: configured.get(t, NONE) for t in taken}, list(rows.values()))
    for t, (tokens, running) in spent.items():
        lim = allow.limits[t]
        if fresh[t] != lim:  # changed since the reading: the bucket was spent by the old
            return False
        if tokens is not None and tokens < -TOKEN_SLACK:
            return False
        if lim.concurrency is not None and running > lim.concurrency:
            return False
    return True


def take(run: Callable[[list[str], int], list[Any]], n: int, allow: Allowance) -> list[Any]:
    """Claim up to ``n`` jobs in claim order, at most what each limited type has left.

    ``run(blocked, k)`` claims the best ``k`` due jobs outside ``blocked``. Each round takes
    no more than the smallest allowance left, so no type can overrun it, and stops when a
    round comes back short (nothing more is due); a batch takes a few rounds at most when
    some type is nearly out (``settle`` then spends the tokens).
    """
    got: list[Any] = []
    while n > 0:
        open_left = [k for k in allow.left.values() if k > 0]
        k = min([n, *open_left])
        rows = run(allow.blocked(), k)
        got += rows
        for r in rows:
            if r.type in allow.left:
                allow.left[r.type] -= 1
        if len(rows) < k:
            break
        n -= len(rows)
    return got

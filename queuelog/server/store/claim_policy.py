"""Claim-time policy: which due jobs a claim may take now, decided in one place.

Every claim path (single, batch, long poll) runs ``Queue.claim_many``, which asks this
module inside the claim's own transaction, so no path can skip it:

- **paused types** are a condition of the claim statement itself (``eligible``);
- **flow control** (CONTRACT.md, Flow control): when a type the claim may take has a
  concurrency or rate limit in force, its limiter row is locked (``FOR UPDATE`` on
  PostgreSQL; SQLite's write lock already serializes claims), its running jobs are counted
  and its bucket refilled *after* the lock is held, so no two claims spend one slot or token.
  A type with nothing left is added to the statement's ``:blocked`` list, skipped as a
  paused type is, and the claim takes the next best job of another type (``allowance``,
  ``take``). Without a limit in force the claim runs as before: one small read more.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from sqlalchemy import ColumnElement, Connection, bindparam, select

from queuelog.model.limits import NONE, Limits
from queuelog.server.store.limits import Limiter, in_force, token_due_us, tokens_now
from queuelog.server.store.tables import paused_types

UNLIMITED = 1 << 30
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

    def blocked(self) -> list[str]:
        """The types this claim must skip."""
        return sorted(t for t, k in self.left.items() if k <= 0)


def allowance(conn: Connection, limiter: Limiter, configured: Mapping[str, Limits],
              types: Sequence[str] | None, now: int,
              ) -> tuple[Allowance | None, dict[str, Limits]]:
    """Lock and read the limiters of the limited types this claim may take (None if none),
    and every type's limits in force."""
    wanted = None if types is None else set(types)
    first = limiter.rows(conn)
    everywhere = in_force(configured, first)
    limited = sorted(t for t, lim in everywhere.items()
                     if lim.any and (wanted is None or t in wanted))
    if not limited:
        return None, everywhere
    rows = {r.type: r for r in first if r.type in limited}
    if not limiter.dialect.writes_lock_reads or len(rows) < len(limited):
        # Read again under the row locks (PostgreSQL): a limit changed since the first
        # read applies now. SQLite's write transaction held its one lock from BEGIN, so
        # the first read already was under it, unless a row must first be made.
        rows = limiter.lock(conn, limited)
    limits = in_force({t: configured.get(t, NONE) for t in limited}, list(rows.values()))
    running = limiter.running(conn, [t for t, lim in limits.items() if lim.concurrency])
    out = Allowance({}, {}, None)
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
    return out, everywhere


def take(run: Callable[[list[str], int], list[Any]], n: int, allow: Allowance,
         now: int, conn: Connection, limiter: Limiter) -> list[Any]:
    """Claim up to ``n`` jobs in claim order, at most what each limited type has left.

    ``run(blocked, k)`` claims the best ``k`` due jobs outside ``blocked``. Each round takes
    no more than the smallest allowance left, so no type can overrun it, and stops when a
    round comes back short (nothing more is due); a batch takes a few rounds at most when
    some type is nearly out. The tokens spent are written back before the commit.
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
    spent = {t: allow.tokens[t] - sum(1 for r in got if r.type == t)
             for t in allow.tokens if any(r.type == t for r in got)}
    limiter.spend(conn, now, spent)
    return got

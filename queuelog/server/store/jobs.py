"""The job verbs a backend implements: claim, heartbeat, retry, and (finish.py) the endings.

``Jobs`` is the verbs' shared body; each backend's subclass (backends/sqlite.py,
backends/postgres.py) builds its own claim and complete statements and runs them, the way
huey's storage classes or Oban's engines implement the same calls whole. Which types a
claim may take is ``claim_policy``'s, asked inside the claim's transaction on every path.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any, Mapping, Sequence

from sqlalchemy import Connection, update

from queuelog.model.jobs import Job, Status
from queuelog.model.limits import Limits
from queuelog.model.problems import WrongState
from queuelog.server.store import claim_policy
from queuelog.server.store import statements as st
from queuelog.server.store.accounts import ACTIVE_KEY, is_key
from queuelog.server.store.audit import record
from queuelog.server.store.engine import to_us
from queuelog.server.store.finish import Finishing
from queuelog.server.store.limits import Limiter
from queuelog.server.store.part import Context
from queuelog.server.store.prepared import Prepared
from queuelog.server.store.reads import ALL, get_row, status_is
from queuelog.server.store.tables import jobs


class Claimed(list[Job]):
    """The jobs a claim got, with what a waiting claim needs to know when it got none."""

    next_due_in: float | None = None  # seconds until a skipped type's next token comes
    revoked: bool = False             # the claim's key is no longer active: nothing taken


class Overrun(Exception):
    """A claim taken on an unlocked reading would overrun a limit: roll it back."""


class Jobs(Finishing):
    """The job verbs over one backend; subclasses give ``_build_claims`` and
    ``_claim_rows`` (and ``_complete_rows``, finish.py)."""

    def __init__(self, ctx: Context, *, backoff_base: float = 2.0,
                 backoff_cap: float = 3600.0, rng: random.Random | None = None,
                 lease_seconds: float = 300.0,
                 type_leases: Mapping[str, float] | None = None,
                 type_limits: Mapping[str, Limits] | None = None) -> None:
        super().__init__(ctx, backoff_base=backoff_base, backoff_cap=backoff_cap, rng=rng)
        self.lease_seconds = lease_seconds
        self.type_leases = dict(type_leases or {})
        self.configured_limits = dict(type_limits or {})  # JOB_TYPES' flow control
        # Types with any limit in force, as this process's last claim saw them (the
        # config's until then): a claim of one goes the transaction's way at once.
        self.limited_types: frozenset[str] = frozenset()
        self._remember(self.configured_limits)
        self.limiter = Limiter(self.engine, self.backend)
        lease = st.lease_until(lease_seconds, self.type_leases)
        d = self.engine.dialect
        self._heartbeat = Prepared(st.heartbeat(), d)
        self._active_key = Prepared(ACTIVE_KEY, d)
        self._expired: Prepared
        self._build_claims(lease)

    # -- the backend's part --------------------------------------------------------------
    def _build_claims(self, lease: Any) -> None:
        """Build this backend's claim statements (``lease``: the lease they set) and
        ``self._expired``, its read of the leases run out, (id, attempt), at ``:now``."""
        raise NotImplementedError

    def _claim_rows(self, conn: Connection, kind: str, params: dict[str, Any],
                    blocked: list[str]) -> list[Any]:
        """Claim up to ``:n`` due jobs of the ``kind`` of types asked (any, one, many),
        skipping the ``blocked`` types, and open their attempts: the claimed rows."""
        raise NotImplementedError


    # -- claim --------------------------------------------------------------------------------
    def claim(self, worker: str, *, lease_seconds: float | None = None,
              types: Sequence[str] | None = None) -> Job | None:
        """Take back expired leases, then atomically claim the best due job, or None.

        ``lease_seconds`` None: the claimed job's type's lease, else the default.
        """
        got = self.claim_many(worker, 1, lease_seconds=lease_seconds, types=types)
        return got[0] if got else None

    def claim_many(self, worker: str, max_jobs: int, *, lease_seconds: float | None = None,
                   types: Sequence[str] | None = None, key: str | None = None) -> Claimed:
        """Take back expired leases, then claim up to ``max_jobs`` due jobs in one
        transaction; in claim order (priority, run_at, id), each with its own attempt,
        within the types' limits (claim_policy.py).

        ``key``: the token hash of the API key the claim is made with, read again with the
        claim's first reads; if it is no longer active, nothing is claimed
        (``Claimed.revoked``). A claim that waited sends it (actions.claim).
        """
        args = (worker, max_jobs, lease_seconds, types, key)
        try:
            out, rows = self._claim_in_turn(*args, locked=False)
        except Overrun:  # rare: a limit reached meanwhile; again, with the rows locked first
            try:
                out, rows = self._claim_in_turn(*args, locked=True)
            except Overrun:  # not expected under the lock; if it comes: nothing, not a 500
                out, rows = Claimed(), []
        # Built after the commit: the write lock (SQLite's) is held for the SQL alone.
        out.extend(Job.from_row(r) for r in in_claim_order(rows))
        if any(job.depends_on for job in out):  # a step reads its inputs in this request
            with self._read.connect() as conn:
                found = self.flows.parents_of(conn, out)
            out[:] = [dataclasses.replace(j, parents=found[j.id]) if j.id in found else j
                      for j in out]
        return out

    def _claim_in_turn(self, worker: str, max_jobs: int, lease_seconds: float | None,
                       types: Sequence[str] | None, key: str | None, *,
                       locked: bool) -> tuple[Claimed, list[Any]]:
        """One claim transaction; raises Overrun, rolled back, where it would overrun a
        limit (claim_policy.settle)."""
        with self._write.begin() as conn:
            now = self.clock()
            out = Claimed()
            expired, first, still = self._first_reads(conn, now, key)
            if not still:
                return revoked(), []
            if expired:
                self.take_back(conn, now, expired)
            params = claim_params(now, worker, max_jobs, lease_seconds, types)
            allow, limits = claim_policy.allowance(
                conn, self.limiter, self.configured_limits, types, now, locked=locked,
                first=None if expired else first)
            self._remember(limits)
            kind = claim_kind(types)
            if allow is None:
                rows = self._claim_rows(conn, kind, params, [])
            else:
                rows = claim_policy.take(
                    lambda blocked, n: self._claim_rows(conn, kind, {**params, "n": n},
                                                        blocked), max_jobs, allow)
                if not rows and allow.next_due_us is not None:
                    out.next_due_in = (allow.next_due_us - now) / 1e6
            # Last before the commit: on PostgreSQL this locks the types' limiter rows, so
            # claims of one limited type take turns for these statements alone.
            if rows and allow is not None:
                if not claim_policy.settle(conn, self.limiter, self.configured_limits,
                                           allow, rows, now):
                    raise Overrun
                self._settled_claim(conn, now, rows)
        return out, rows

    def _settled_claim(self, conn: Connection, now: int, rows: list[Any]) -> None:
        """After a limited claim's settle, in its transaction: nothing more where the
        reading was made under the write lock (SQLite), so ``now`` is exact."""

    def _first_reads(self, conn: Connection, now: int, key: str | None,
                     ) -> tuple[list[Any], list[Any], bool]:
        """A claim's first reads, together where the backend pipelines them: the leases
        run out, the limiter rows, and whether ``key`` is still active."""
        reads = [(self._expired, {"now": now}),
                 claim_policy.first_read(self.limiter, self.configured_limits)]
        if key is not None:
            reads.append((self._active_key, {"th": key}))
        got = Prepared.together(conn, reads, pipelined=self.backend.pipelines)
        return got[0], got[1], key is None or is_key(got[2][0] if got[2] else None, key)

    def _remember(self, limits: Mapping[str, Limits]) -> None:
        """What a claim's reading found in force, for the next calls of this process."""
        super()._remember(limits)
        self.limited_types = frozenset(t for t, lim in limits.items() if lim.any)

    # -- heartbeat and retry ------------------------------------------------------------------
    def heartbeat(self, job_id: int, worker: str, attempt: int, *,
                  lease_seconds: float | None = None, progress_json: str | None = None) -> Job:
        """Extend the lease of a job the worker holds at this attempt, from now, by
        ``lease_seconds`` or else by the lease it holds; with ``progress_json``, store it
        as the job's progress."""
        with self.backend.one_statement(self._write) as conn:  # one UPDATE: whole alone
            now = self.clock()
            row = self._heartbeat.first(conn, {
                "jid": job_id, "att": attempt, "wkr": worker, "now": now,
                "lease_us": us_or_none(lease_seconds), "progress": progress_json})
            if row is None:
                raise self._refusal(conn, job_id, worker, attempt)
            return Job.from_row(row)

    def retry(self, job_id: int, actor: str | None = None) -> Job:
        """Put a failed or cancelled job back to pending with fresh retries (admin)."""
        with self._write.begin() as conn:
            now = self.clock()
            row = conn.execute(update(jobs).where(
                jobs.c.id == job_id,
                jobs.c.status.in_([Status.FAILED.value, Status.CANCELLED.value]))
                .values(status=Status.PENDING.value, retry_count=0, run_at=now,
                        lease_expires_at=None, finished_at=None, cancelled_by_parent=None,
                        updated_at=now)
                .returning(*jobs.c)).first()
            if row is None:
                get_row(conn, job_id, ALL)
                raise WrongState("Only a failed or cancelled job can be retried.")
            if actor is not None:
                record(conn, now, actor, "job.retry", str(job_id))
            self.notifier.notify(conn)
            self.flows.restore(conn, now, [job_id])  # its failure's cancelled dependents
            if row.depends_on is not None:  # a parent not finished yet: it waits again
                self.flows.rewait(conn, now, [job_id])
                row = get_row(conn, job_id, ALL)
            return Job.from_row(row)


    def run_now(self, job_id: int, actor: str | None = None) -> Job:
        """Make a pending job whose ``run_at`` is still ahead (delayed, or waiting out a
        retry's backoff) due now, and wake waiting claims; audited as ``job.run``.

        A pending job already due is answered unchanged (nothing to do, nothing recorded);
        any other status is WrongState (409), a missing job JobNotFound (404).
        """
        with self._write.begin() as conn:
            now = self.clock()
            row = conn.execute(update(jobs).where(
                jobs.c.id == job_id, status_is(Status.PENDING), jobs.c.run_at > now)
                .values(run_at=now, updated_at=now).returning(*jobs.c)).first()
            if row is None:
                row = get_row(conn, job_id, ALL)
                if row.status != Status.PENDING.value:
                    raise WrongState("Only a pending job can be run now.")
                return Job.from_row(row)  # due already: the next claim may take it
            if actor is not None:
                record(conn, now, actor, "job.run", str(job_id))
            self.notifier.notify(conn)  # claimable now: wake waiting claims, as an enqueue
            return Job.from_row(row)


def in_claim_order(rows: list[Any]) -> list[Any]:
    """Claimed rows in claim order (RETURNING has no order of its own)."""
    if len(rows) > 1:
        rows.sort(key=lambda r: (-r.priority, r.run_at, r.id))
    return rows


def claim_params(now: int, worker: str, max_jobs: int, lease_seconds: float | None,
                 types: Sequence[str] | None) -> dict[str, Any]:
    """The claim statements' parameters."""
    params: dict[str, Any] = {"now": now, "wkr": worker, "n": max_jobs,
                              "lease_us": us_or_none(lease_seconds)}
    if types is not None and len(types) == 1:
        params["type1"] = types[0]
    elif types is not None:
        params["types"] = list(types)
    return params


def claim_kind(types: Sequence[str] | None) -> str:
    """Which of a claim's statements serves ``types``: any type, one, or several."""
    return "any" if types is None else "one" if len(types) == 1 else "many"


def revoked() -> Claimed:
    """A claim's answer when its key is no longer active: nothing."""
    out = Claimed()
    out.revoked = True
    return out


def us_or_none(seconds: float | None) -> int | None:
    """Seconds as microseconds, keeping None (meaning: the configured default)."""
    return None if seconds is None else to_us(seconds)

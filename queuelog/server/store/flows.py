"""Workflows: jobs that depend on jobs (``depends_on``), linked, released and restored.

A job with parents is written ``blocked`` (never claimed) with ``waiting_for``, the number
of its parents not yet finished; each parent is marked ``has_dependents``. When parents
finish, ``release`` runs in the transaction that finished them (``Finishing.settled``): a
dependent whose parent completed (or any parent, under ``on_parent_failure: run``) counts
it, and becomes ``pending`` at its last; under ``cancel``, a parent that failed or was
cancelled cancels it (``cancelled_by_parent``), and so on down its own dependents. An
admin's retry of a parent ``restore``s the dependents its failure cancelled; a retried job
whose parents have not all finished waits for them again (``rewait``).

On PostgreSQL the parents' rows are locked by the enqueue that marks them, and a finish
updates them first, so a parent's finish and a new dependent's link never miss each other:
either the link sees the parent finished, or the finish sees the link.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from sqlalchemy import Connection, and_, bindparam, case, select, update

from queuelog.model import jsontext
from queuelog.model.jobs import FINISHED, Status
from queuelog.server.store.part import Context, Part
from queuelog.server.store.tables import job_dependencies, jobs

b = bindparam
RUN, CANCEL = "run", "cancel"
_ENDED_BADLY = frozenset({Status.FAILED.value, Status.CANCELLED.value})
_FINISHED = frozenset(s.value for s in FINISHED)
_BLOCKED = jobs.c.status == Status.BLOCKED.value

# A parent's finish counted by its blocked dependents (``:k`` parents each); at the last,
# pending, due at its own run_at or now.
_LAST = jobs.c.waiting_for - b("k") <= 0
COUNT = (update(jobs).where(jobs.c.id.in_(b("ids", expanding=True)), _BLOCKED)
         .values(waiting_for=jobs.c.waiting_for - b("k"),
                 status=case((_LAST, Status.PENDING.value), else_=jobs.c.status),
                 run_at=case((and_(_LAST, jobs.c.run_at < b("now")), b("now")),
                             else_=jobs.c.run_at),
                 updated_at=b("now"))
         .returning(jobs.c.id, jobs.c.status))
CANCEL_BY = (update(jobs).where(jobs.c.id.in_(b("ids", expanding=True)), _BLOCKED)
             .values(status=Status.CANCELLED.value, cancelled_by_parent=b("parent"),
                     finished_at=b("now"), updated_at=b("now"))
             .returning(*jobs.c))
LINK = job_dependencies.insert()
DEPENDENTS = (select(job_dependencies.c.parent_id, job_dependencies.c.child_id)
              .where(job_dependencies.c.parent_id.in_(b("ids", expanding=True)))
              .order_by(job_dependencies.c.child_id))
HOW = select(jobs.c.id, jobs.c.on_parent_failure).where(
    jobs.c.id.in_(b("ids", expanding=True)), _BLOCKED)
PARENTS = select(jobs.c.id, jobs.c.type, jobs.c.status, jobs.c.result).where(
    jobs.c.id.in_(b("ids", expanding=True)))
# A retried job's parents, locked (PostgreSQL) as an enqueue's are: a parent finishing at
# once either sees the job blocked, or is seen finished here.
LOCK_PARENTS = (update(jobs).where(jobs.c.id.in_(b("ids", expanding=True)))
                .values(has_dependents=True).returning(jobs.c.id, jobs.c.status))
RETRIED_WITH_PARENTS = select(jobs.c.id, jobs.c.depends_on).where(
    jobs.c.id.in_(b("ids", expanding=True)), jobs.c.status == Status.PENDING.value,
    jobs.c.depends_on.is_not(None))
CANCELLED_BY = select(jobs.c.id, jobs.c.depends_on, jobs.c.on_parent_failure).where(
    jobs.c.cancelled_by_parent.in_(b("ids", expanding=True)),
    jobs.c.status == Status.CANCELLED.value)


def verdict(parents: Sequence[Any], how: str | None) -> tuple[str, int, int | None]:
    """A dependent's state from its parents' rows (id, status), in ``depends_on`` order:
    its status, how many parents it waits for, and the parent that cancels it (or None)."""
    if (how or CANCEL) == CANCEL:
        for parent in parents:
            if parent.status in _ENDED_BADLY:
                return Status.CANCELLED.value, 0, parent.id
    # Distinct parents: a parent named twice has one link row (``link``) and so counts
    # once when it finishes; counting it twice here left the job blocked for ever.
    waiting = len({p.id for p in parents if p.status not in _FINISHED})
    return (Status.BLOCKED.value if waiting else Status.PENDING.value), waiting, None


class Flows(Part):
    """The workflow verbs a finish, an enqueue and a retry call in their transactions."""

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        # Set by Finishing: what follows when rows finish (watchers, retention, and these).
        self.settled: Callable[..., None] = lambda conn, rows, **kw: None

    def link(self, conn: Connection, child_ids: Sequence[int],
             parents: Sequence[Sequence[int]]) -> None:
        """The dependency rows of new jobs (each ``child_ids[i]`` on ``parents[i]``)."""
        rows = [{"parent_id": p, "child_id": c} for c, ps in zip(child_ids, parents)
                for p in dict.fromkeys(ps)]
        if rows:
            conn.execute(LINK, rows)

    def release(self, conn: Connection, now: int, rows: Iterable[Any]) -> bool:
        """Count finished ``rows`` (with ``has_dependents``) in their dependents' waits:
        the last parent makes a dependent pending, a failure under ``cancel`` cancels it
        and its own dependents. Whether any became pending (claims are to be woken)."""
        done = {r.id: r.status for r in rows if r.has_dependents and r.status in _FINISHED}
        woke = False
        while done:
            links = conn.execute(DEPENDENTS, {"ids": list(done)}).all()
            if not links:
                return woke
            how = dict(conn.execute(HOW, {"ids": sorted({c for _, c in links})}).all())
            counts: dict[int, int] = {}
            cancels: dict[int, list[int]] = {}
            for parent, child in links:
                if child not in how:
                    continue  # not blocked (cancelled, or released already)
                if done[parent] in _ENDED_BADLY and (how[child] or CANCEL) == CANCEL:
                    cancels.setdefault(parent, []).append(child)
                    counts.pop(child, None)
                    how.pop(child)
                else:
                    counts[child] = counts.get(child, 0) + 1
            woke |= self._count(conn, now, counts)
            done = self._cancel(conn, now, cancels)
        return woke

    def _count(self, conn: Connection, now: int, counts: dict[int, int]) -> bool:
        """Count parents' finishes; whether a dependent became pending."""
        by_k: dict[int, list[int]] = {}
        for child, k in counts.items():
            by_k.setdefault(k, []).append(child)
        woke = False
        for k, ids in by_k.items():
            got = conn.execute(COUNT, {"ids": ids, "k": k, "now": now}).all()
            woke |= any(r.status == Status.PENDING.value for r in got)
        return woke

    def _cancel(self, conn: Connection, now: int,
                cancels: dict[int, list[int]]) -> dict[int, str]:
        """Cancel dependents by the parent that failed; the cancelled, finished in turn."""
        out: dict[int, str] = {}
        for parent, ids in cancels.items():
            rows = conn.execute(CANCEL_BY, {"ids": ids, "parent": parent, "now": now}).all()
            self.settled(conn, rows, ran=False, release=False)
            out.update((r.id, r.status) for r in rows if r.has_dependents)
        return out

    def restore(self, conn: Connection, now: int, ids: Sequence[int]) -> int:
        """After an admin's retry of ``ids``: their dependents cancelled because of them
        (``cancelled_by_parent``) become blocked again, and theirs; how many changed."""
        changed, frontier = 0, list(ids)
        while frontier:
            found = conn.execute(CANCELLED_BY, {"ids": frontier}).all()
            frontier = []
            for child in found:
                status, waiting, by = verdict(self._parents(conn, child.depends_on),
                                              child.on_parent_failure)
                conn.execute(update(jobs).where(jobs.c.id == child.id).values(
                    status=status, waiting_for=waiting, cancelled_by_parent=by,
                    finished_at=now if by is not None else None, updated_at=now))
                if by is None:
                    changed += 1
                    frontier.append(child.id)
        return changed

    def rewait(self, conn: Connection, now: int, ids: Sequence[int]) -> None:
        """After an admin's retry of ``ids`` (now pending): those whose parents have not all
        finished are ``blocked`` again, waiting for them (a parent that ended badly counts
        as finished: the admin asked for the job to run)."""
        for job_id, depends_on in conn.execute(RETRIED_WITH_PARENTS, {"ids": list(ids)}).all():
            order = jsontext.loads(depends_on)
            if not order:
                continue
            found = conn.execute(LOCK_PARENTS, {"ids": list(dict.fromkeys(order))}).all()
            waiting = sum(1 for r in found if r.status not in _FINISHED)
            if waiting:
                conn.execute(update(jobs).where(jobs.c.id == job_id).values(
                    status=Status.BLOCKED.value, waiting_for=waiting, updated_at=now))

    def _parents(self, conn: Connection, depends_on: str | None) -> list[Any]:
        """A dependent's parents' rows (id, type, status, result), in ``depends_on`` order."""
        order = jsontext.loads(depends_on) if depends_on else []
        found = {r.id: r for r in conn.execute(PARENTS, {"ids": order}).all()} if order else {}
        return [found[i] for i in order if i in found]

    def parents_of(self, conn: Connection, jobs_: Sequence[Any]) -> dict[int, tuple[Any, ...]]:
        """Claimed jobs' parents as the contract shows them, by job id (only jobs with)."""
        wanted = sorted({p for j in jobs_ for p in j.depends_on})
        if not wanted:
            return {}
        found = {r.id: r for r in conn.execute(PARENTS, {"ids": wanted}).all()}
        out: dict[int, tuple[Any, ...]] = {}
        for job in jobs_:
            if job.depends_on:
                out[job.id] = tuple(_parent(i, found.get(i), jsontext.loads)
                                    for i in job.depends_on)
        return out


def _parent(job_id: int, row: Any, loads: Callable[[str], Any]) -> dict[str, Any]:
    """One parent as a claimed job carries it (no result: purged since, or none)."""
    if row is None:
        return {"id": job_id, "type": None, "status": None}
    out = {"id": job_id, "type": row.type, "status": row.status}
    out["result"] = None if row.result is None else loads(row.result)
    return out


"""Reading jobs: who sees which jobs, and what of them (error text for admins only, V-10)."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from flask import current_app

from queuelog.model.jobs import FINISHED, Job, Status
from queuelog.server import metrics
from queuelog.server.longpoll import long_polls
from queuelog.server.actions.gate import PEOPLE, gate, scope_of
from queuelog.server.auth import READERS, Principal
from queuelog.server.db import get_store
from queuelog.server.store import Page, Series


def sees_errors(who: Principal) -> bool:
    """V-10, written once: only admins see a job's error text (on a job and its attempts)."""
    return who.is_admin


def sees_key(job: Job, who: Principal) -> bool:
    """A job's idempotency key is shown to the producer that set it and to admins."""
    return who.is_admin or (who.role == "producer" and job.producer == who.name)


def visible(job: Job, who: Principal) -> Job:
    """The job as ``who`` may see it: no error text at all unless ``sees_errors`` (V-10)."""
    if sees_errors(who) or (job.error is None and job.attempts is None):
        return job  # nothing to hide: no copy (a claim or complete of a batch, per job)
    attempts = None if job.attempts is None else tuple(
        dataclasses.replace(a, error=None) for a in job.attempts)
    return dataclasses.replace(job, error=None, attempts=attempts)


def now() -> int:
    """The store's clock, in epoch microseconds (no secret: the same for every caller)."""
    return get_store().clock()


def health() -> str | None:
    """Raise unless the database answers; then why a write cannot be made now, or None
    (``/healthz``, which asks no credentials)."""
    store = get_store()
    store.ping()
    return store.write_problem()


@gate(*READERS)
def get_job(who: Principal, job_id: int, *, wait: float = 0,
            connected: Callable[[], bool] = lambda: True) -> tuple[Job, int | None]:
    """One job with its history, if ``who`` may see it (404 otherwise); with ``wait``, once
    it has finished or ``wait`` seconds have passed. Also the ``Retry-After`` to send
    when no long-poll slot was free to wait in (else None)."""
    store, scope = get_store(), scope_of(who)
    first = store.get(job_id, scope)
    if wait <= 0 or first.status in FINISHED:
        return visible(first, who), None
    marked = False

    def look() -> list[Job]:
        # The first look marks the job watched (its finish then wakes this process, from
        # any process or server); a job that finished meanwhile is read at once.
        nonlocal marked
        if not marked:
            marked = True
            if store.watch(job_id):
                return []
        job = store.get(job_id, scope)
        return [job] if job.status in FINISHED else []

    got = long_polls().finish(look, wait, connected)
    metrics.long_poll_waited(got.waited)
    job = got.jobs[0] if got.jobs else first  # no slot to wait in: the job as it was
    if got.waited and not got.jobs:
        job = store.get(job_id, scope)  # the wait ran out: the job as it is now
    if got.waited and not _still_active(store, who):
        job = first  # a key revoked while it waited learns nothing it could not before
    return visible(job, who), got.retry_after


def _still_active(store: Any, who: Principal) -> bool:
    """Whether ``who``'s key is still active after a wait (people: always)."""
    return who.token is None or store.accounts.key_for_token(who.token) is not None


@gate(*READERS)
def list_jobs(who: Principal, *, status: Status | None, type: str | None,
              priority: int | None, limit: int, before: int | None,
              schedule: str | None = None, producer: str | None = None,
              worker: str | None = None) -> Page:
    """A newest-first page of the jobs ``who`` may see (error text as ``visible``).

    ``producer`` and ``worker`` narrow within that scope, never past it: a producer
    asking for another producer's jobs finds none."""
    page = get_store().list_jobs(scope=scope_of(who), status=status, type=type,
                                 priority=priority, limit=limit, before=before,
                                 schedule=schedule, producer=producer, worker=worker)
    return dataclasses.replace(page, jobs=[visible(j, who) for j in page.jobs])


# -- the dashboard's reads: for people, never a key ----------------------------------------
@gate(*PEOPLE)
def dashboard(who: Principal) -> int:
    """Viewer, admin: open a dashboard page; the time its page shows times against."""
    return now()


@gate(*PEOPLE)
def dashboard_job(who: Principal, job_id: int) -> Job:
    """Viewer, admin: one job with its history, as ``who`` may see it (404 if missing)."""
    return visible(get_store().get(job_id, scope_of(who)), who)


@dataclasses.dataclass(frozen=True)
class Relative:
    """A parent or dependent as a job page links it; no type nor status: purged since."""

    id: int
    type: str | None
    status: Status | None


@dataclasses.dataclass(frozen=True)
class Workflow:
    """A job's parents (in ``depends_on`` order) and dependents, each with its status."""

    parents: list[Relative]
    dependents: list[Relative]

    @property
    def waiting(self) -> int:
        """How many parents have not finished yet (a purged parent had)."""
        return sum(p.status is not None and p.status not in FINISHED for p in self.parents)


@gate(*PEOPLE)
def dashboard_workflow(who: Principal, job: Job) -> Workflow:
    """Viewer, admin: the type and status of ``job``'s parents and dependents, in one read
    (none for a job outside any workflow)."""
    dependents = job.dependents or ()
    found = get_store().statuses([*job.depends_on, *dependents], scope_of(who))

    def relative(job_id: int) -> Relative:
        type_, status = found.get(job_id, (None, None))
        return Relative(job_id, type_, status)
    return Workflow([relative(i) for i in job.depends_on], [relative(i) for i in dependents])


@gate(*PEOPLE)
def dashboard_jobs(who: Principal, *, q: str | None = None, **filters: Any) -> Page:
    """The dashboard's page of jobs; ``q`` finds a job by id, or by idempotency key.

    Keys are admins' alone (a viewer's pages show none), so a viewer's ``q`` matches ids
    only: a key typed by a viewer finds nothing rather than revealing which job holds it.
    """
    match_id = match_key = None
    if q is not None:
        digits = q.lstrip("#")
        # 0 matches no job (ids start at 1); a number past BIGINT would be a database error.
        # isdecimal, not isdigit: "²" and "①" are digits that int() refuses.
        match_id = int(digits) if digits.isdecimal() and int(digits) < 2 ** 63 else 0
        match_key = q if who.is_admin else None
    def listed(**cursors: Any) -> Page:
        return get_store().list_jobs(scope=scope_of(who), match_id=match_id,
                                     match_key=match_key, **{**filters, **cursors})
    page = listed()
    newer, older = filters.get("after") is not None, filters.get("before") is not None
    if not page.jobs and (newer or older):
        # The jobs a Newer or Older link paged to left the list (retried, purged): an empty
        # page would offer no link on, so show that end instead, the newest page or the
        # oldest (walked up from id 0, with no Older).
        page = listed(after=None if newer else 0, before=None)
        if not newer:
            page = dataclasses.replace(page, older=None)
    return dataclasses.replace(page, jobs=[visible(j, who) for j in page.jobs])


@dataclasses.dataclass(frozen=True)
class Overview:
    """The queue page's head: capped counts per status and the last hour's outcomes."""

    counts: dict[str, int]
    chart: Series


@gate(*PEOPLE)
def overview(who: Principal) -> Overview:
    """Viewer, admin: the counts per status (capped at COUNT_CAP) and the last hour's chart."""
    store = get_store()
    return Overview(store.count_by_status(current_app.config["COUNT_CAP"]),
                    store.outcomes_per_minute(60))


@gate("admin")
def count_matching(who: Principal, status: Status, *, type: str | None = None,
                   priority: int | None = None, cap: int | None = None) -> int:
    """Admin: how many jobs a bulk retry or cancel would select now (at most ``cap`` + 1)."""
    return get_store().count_matching(status, type=type, priority=priority, cap=cap)

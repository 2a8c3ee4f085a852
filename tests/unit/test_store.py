"""The store's verbs on SQLite and PostgreSQL: enqueue, claim, the worker guards, list, accounts."""
from __future__ import annotations

import hashlib
import pathlib
import re
import threading
from typing import Any

import pytest
from sqlalchemy import select

from helpers import add_job
from queuelog.model.problems import (ConfigError, Conflict, JobCancelled, JobNotFound,
                                     NotHolder, StaleAttempt, WrongState)
from queuelog.model.jobs import Outcome, Status
from queuelog.server.store.tables import api_keys, users
from queuelog.server.store import ALL, Scope, Store, backends
from queuelog.server.store.backends import PostgresBackend, SQLiteBackend

US = 1_000_000  # microseconds per second


def test_enqueue_stores_a_pending_job(store, clock):
    job = add_job(store, "pdf", priority=20, max_retries=5, payload='{"n":1}')
    assert (job.status, job.type, job.priority, job.max_retries) == (Status.PENDING, "pdf", 20, 5)
    assert (job.attempt, job.retry_count, job.worker_id) == (0, 0, None)
    assert job.payload == {"n": 1}
    assert job.run_at == job.created_at == job.updated_at == clock.now
    assert store.get(job.id).without_history() == job and store.get(job.id).attempts == ()


def test_a_job_built_from_its_row_is_the_one_its_fields_make(store, clock):
    """Job.from_row sets the fields without __init__: every field, and the same values."""
    import dataclasses
    from queuelog.model.jobs import Job
    job = add_job(store, "email", payload={"n": 1})
    held = store.claim("w1")
    done = store.complete(held.id, "w1", held.attempt, '{"ok": true}')
    for built in (store.get(job.id), held, done):
        remade = Job(**{f.name: getattr(built, f.name) for f in dataclasses.fields(Job)})
        assert built == remade and vars(built).keys() == vars(remade).keys()
    assert done.result == {"ok": True} and done.status is Status.COMPLETED


def test_enqueue_with_delay_or_run_at_is_not_due_before_then(store, clock):
    delayed = add_job(store, delay=10)
    scheduled = add_job(store, run_at=clock.now + 20 * US)
    assert delayed.run_at == clock.now + 10 * US
    assert store.claim("w", lease_seconds=60) is None
    clock.advance(10)
    assert store.claim("w", lease_seconds=60).id == delayed.id
    assert store.claim("w", lease_seconds=60) is None
    clock.advance(10)
    assert store.claim("w", lease_seconds=60).id == scheduled.id


def test_claim_order_is_priority_then_run_at_then_id(store, clock):
    # A run_at in the past is stored as now (no backdating), so "earlier" is a nearer future.
    low = add_job(store, priority=0)
    high_a = add_job(store, priority=20, run_at=clock.now + 20 * US)
    high_earlier = add_job(store, priority=20, run_at=clock.now + 10 * US)
    critical_later = add_job(store, priority=30, run_at=clock.now + 90 * US)
    high_b = add_job(store, priority=20, run_at=clock.now + 20 * US)
    clock.advance(30)
    got = [store.claim("w", lease_seconds=60) for _ in range(5)]
    assert [j.id if j else None for j in got] == [high_earlier.id, high_a.id, high_b.id,
                                                  low.id, None]
    clock.advance(60)
    assert store.claim("w", lease_seconds=60).id == critical_later.id


def test_claim_with_types_takes_only_those(store):
    email = add_job(store, "email", priority=30)
    pdf = add_job(store, "pdf")
    sync = add_job(store, "sync")
    assert store.claim("w", lease_seconds=60, types=["pdf", "sync"]).id == pdf.id
    assert store.claim("w", lease_seconds=60, types=["sync"]).id == sync.id
    assert store.claim("w", lease_seconds=60, types=["pdf"]) is None
    assert store.claim("w", lease_seconds=60).id == email.id


def test_a_claim_of_several_types_takes_them_in_claim_order_across_types(store, clock):
    """Each type's best jobs are merged by priority, then run_at, then id; a type named
    twice counts once; a job not yet due and another type's job are never taken."""
    ahead = [add_job(store, "email", priority=30) for _ in range(3)]  # another type, first
    sync_low = add_job(store, "sync", priority=0)
    pdf_high = add_job(store, "pdf", priority=20)
    add_job(store, "pdf", priority=30, run_at=clock.now + 60 * US)  # not due
    sync_high = add_job(store, "sync", priority=20)
    pdf_low = add_job(store, "pdf", priority=0)
    clock.advance(1)
    got = store.claim_many("w", 3, lease_seconds=60, types=["pdf", "sync", "pdf"])
    assert [j.id for j in got] == [pdf_high.id, sync_high.id, sync_low.id]
    rest = store.claim_many("w", 5, lease_seconds=60, types=["sync", "pdf"])
    assert [j.id for j in rest] == [pdf_low.id]
    assert {store.get(j.id).status for j in ahead} == {Status.PENDING}


def test_claims_of_several_types_at_once_take_each_job_once(store, db_url):
    """Four stores (as four servers) claiming two types at once: every job once, none
    left behind (on PostgreSQL each type's walk locks as it goes and skips held rows)."""
    ids = {add_job(store, "pdf" if i % 3 else "sync", priority=i % 4).id for i in range(120)}
    for i in range(40):
        add_job(store, "email", priority=30)  # another type, ahead of them all
    servers = [Store(db_url) for _ in range(4)]
    got: list[int] = []

    def drain(server: Store) -> None:
        while batch := server.claim_many("w", 3, lease_seconds=60, types=["pdf", "sync"]):
            got.extend(j.id for j in batch)
    try:
        threads = [threading.Thread(target=drain, args=(s,)) for s in servers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        for server in servers:
            server.close()
    assert sorted(got) == sorted(ids)


def test_claim_marks_the_job_running_and_opens_an_attempt(store, clock):
    job = add_job(store)
    clock.advance(1)
    got = store.claim("mailer-1", lease_seconds=30)
    assert (got.id, got.status, got.attempt, got.worker_id) == (job.id, Status.RUNNING, 1,
                                                                "mailer-1")
    assert got.claimed_at == clock.now and got.lease_expires_at == clock.now + 30 * US
    [attempt] = store.get(job.id).attempts
    assert (attempt.attempt, attempt.worker_id, attempt.outcome) == (1, "mailer-1",
                                                                     Outcome.RUNNING)
    assert attempt.started_at == clock.now and attempt.finished_at is None


def test_heartbeat_extends_the_lease(store, clock):
    job = add_job(store)
    store.claim("w", lease_seconds=30)
    clock.advance(20)
    beat = store.heartbeat(job.id, "w", 1, lease_seconds=30)
    assert beat.lease_expires_at == clock.now + 30 * US and beat.status == Status.RUNNING


def test_complete_stores_the_result_and_closes_the_attempt(store, clock):
    job = add_job(store)
    store.claim("w", lease_seconds=30)
    clock.advance(5)
    done = store.complete(job.id, "w", 1, '{"ok":true}')
    assert (done.status, done.result, done.finished_at) == (Status.COMPLETED, {"ok": True},
                                                            clock.now)
    assert done.lease_expires_at is None
    [attempt] = store.get(job.id).attempts
    assert attempt.outcome == Outcome.COMPLETED and attempt.finished_at == clock.now


@pytest.mark.parametrize("verb", ["heartbeat", "complete", "fail"])
def test_worker_verbs_refuse_with_the_right_error(store, verb):
    def call(job_id: int, worker: str, attempt: int) -> Any:
        if verb == "heartbeat":
            return store.heartbeat(job_id, worker, attempt, lease_seconds=30)
        if verb == "complete":
            return store.complete(job_id, worker, attempt)
        return store.fail(job_id, worker, attempt, "boom")

    job = add_job(store, max_retries=0)
    pending = add_job(store)
    with pytest.raises(JobNotFound):
        call(999_999, "w", 1)
    with pytest.raises(NotHolder):
        call(pending.id, "w", 1)  # pending: nobody holds it
    store.claim("w", lease_seconds=30)
    before = store.get(job.id)
    with pytest.raises(NotHolder):
        call(job.id, "intruder", 1)
    with pytest.raises(StaleAttempt):
        call(job.id, "w", 2)
    assert store.get(job.id) == before  # refused calls change nothing
    store.complete(job.id, "w", 1)
    with pytest.raises(WrongState):
        call(job.id, "w", 1)


def test_fail_retries_after_backoff_then_fails_for_good(store, clock):
    job = add_job(store, max_retries=2)
    for n, ceiling in ((1, 2), (2, 4)):  # RETRY_BACKOFF_SECONDS=2: 2 * 2^(n-1)
        claimed = store.claim("w", lease_seconds=30)
        assert claimed.attempt == n
        failed = store.fail(job.id, "w", n, f"boom {n}")
        assert (failed.status, failed.retry_count, failed.error) == (Status.PENDING, n,
                                                                     f"boom {n}")
        delay = failed.run_at - clock.now
        assert ceiling * US / 2 <= delay <= ceiling * US  # equal jitter: never immediate
        assert store.claim("w", lease_seconds=30) is None
        clock.advance(ceiling)
    store.claim("w", lease_seconds=30)
    final = store.fail(job.id, "w", 3, "boom 3")
    assert (final.status, final.retry_count, final.finished_at) == (Status.FAILED, 2, clock.now)
    history = store.get(job.id).attempts
    assert [(a.attempt, a.outcome, a.error) for a in history] == [
        (1, Outcome.FAILED, "boom 1"), (2, Outcome.FAILED, "boom 2"),
        (3, Outcome.FAILED, "boom 3")]


def test_fail_without_retry_and_with_retry_in(store, clock):
    now_failed = add_job(store)
    later = add_job(store)
    store.claim("w", lease_seconds=30)
    assert store.fail(now_failed.id, "w", 1, "fatal", retry=False).status == Status.FAILED
    store.claim("w", lease_seconds=30)
    again = store.fail(later.id, "w", 1, "busy", retry_in=120)
    assert again.status == Status.PENDING and again.run_at == clock.now + 120 * US


def test_cancel_pending_or_running_and_only_visible_jobs(store, clock):
    job = add_job(store, producer="billing")
    other = add_job(store, producer="shop")
    with pytest.raises(JobNotFound):
        store.cancel(other.id, Scope(producer="billing"))
    with pytest.raises(JobNotFound):
        store.cancel(999_999)
    cancelled = store.cancel(job.id, Scope(producer="billing"))
    assert cancelled.status == Status.CANCELLED and cancelled.finished_at is not None
    with pytest.raises(WrongState):
        store.cancel(job.id)  # finished
    store.claim("w", lease_seconds=30)  # takes ``other``
    clock.advance(2)
    running = store.cancel(other.id)
    assert (running.status, running.lease_expires_at) == (Status.CANCELLED, None)
    (attempt,) = store.get(other.id).attempts
    assert (attempt.outcome, attempt.finished_at) == (Outcome.CANCELLED, clock.now)
    # The holder is fenced off: every call of its attempt is a 409 "cancelled".
    for call in (lambda: store.heartbeat(other.id, "w", 1),
                 lambda: store.complete(other.id, "w", 1, None),
                 lambda: store.fail(other.id, "w", 1, "late")):
        with pytest.raises(JobCancelled):
            call()
    assert store.get(other.id).status == Status.CANCELLED


def test_retry_gives_fresh_retries_and_keeps_the_attempt_count(store, clock):
    job = add_job(store, max_retries=0)
    store.claim("w", lease_seconds=30)
    store.fail(job.id, "w", 1, "boom")
    with pytest.raises(WrongState):
        store.retry(add_job(store, "pdf").id)  # pending
    with pytest.raises(JobNotFound):
        store.retry(999_999)
    clock.advance(3)
    again = store.retry(job.id)
    assert (again.status, again.retry_count, again.attempt) == (Status.PENDING, 0, 1)
    assert again.run_at == clock.now and again.finished_at is None
    claimed = store.claim("w", lease_seconds=30, types=["email"])
    assert claimed.id == job.id and claimed.attempt == 2
    cancelled = add_job(store)
    store.cancel(cancelled.id)
    assert store.retry(cancelled.id).status == Status.PENDING


def _walk(store: Store, limit: int, **filters: Any) -> list[int]:
    seen: list[int] = []
    before = None
    for _ in range(1000):
        page = store.list_jobs(limit=limit, before=before, **filters)
        assert len(page.jobs) <= limit
        seen += [j.id for j in page.jobs]
        if page.older is None:
            return seen
        before = page.older
    raise AssertionError("paging did not end")


def test_list_jobs_pages_visit_every_job_once_newest_first(store):
    ids = [add_job(store, ("email", "pdf")[i % 2], priority=(i % 3) * 10,
               producer=("billing", "shop")[i % 4 == 0]).id for i in range(23)]
    for limit in (1, 5, 23, 50):
        assert _walk(store, limit) == ids[::-1]
    assert _walk(store, 4, type="pdf") == [i for n, i in enumerate(ids) if n % 2][::-1]
    assert _walk(store, 3, priority=20) == [i for n, i in enumerate(ids) if n % 3 == 2][::-1]
    assert _walk(store, 2, scope=Scope(producer="shop")) == ids[::4][::-1]
    store.cancel(ids[3])
    assert _walk(store, 2, status=Status.CANCELLED) == [ids[3]]
    assert len(_walk(store, 7, status=Status.PENDING)) == 22
    assert store.list_jobs(type="sync").jobs == []


def test_list_jobs_after_cursor_walks_back_to_newer(store):
    ids = [add_job(store).id for _ in range(7)]
    first = store.list_jobs(limit=3)
    second = store.list_jobs(limit=3, before=first.older)
    assert [j.id for j in second.jobs] == ids[3:0:-1] and second.newer == ids[3]
    back = store.list_jobs(limit=3, after=second.newer)
    assert [j.id for j in back.jobs] == [j.id for j in first.jobs]


def test_worker_scope_sees_jobs_it_holds_or_held(store):
    held = add_job(store)
    add_job(store)
    store.claim("w1", lease_seconds=30)
    store.fail(held.id, "w1", 1, "boom", retry_in=0)
    store.claim("w2", lease_seconds=30)  # the retried job goes to w2 (lower id, same due time)
    assert store.get(held.id, Scope(worker="w1")).id == held.id  # held before
    assert store.get(held.id, Scope(worker="w2")).worker_id == "w2"  # holds now
    assert [j.id for j in store.list_jobs(scope=Scope(worker="w1")).jobs] == [held.id]
    with pytest.raises(JobNotFound):
        store.get(held.id, Scope(worker="w3"))
    with pytest.raises(JobNotFound):
        store.get(held.id, Scope(producer="shop"))
    assert store.get(held.id, ALL).attempts[0].worker_id == "w1"


def test_keys_are_stored_only_as_a_hash(store):
    key, token = store.accounts.create_key("billing", "producer", types=["email"],
                                           max_priority=20)
    assert len(token) >= 43 and token.startswith("ql_")  # 32 random bytes, url-safe
    assert key.token_hash == hashlib.sha256(token.encode()).hexdigest()
    with store.engine.connect() as conn:
        rows = conn.execute(select(api_keys)).all()
    assert all(token not in str(value) for row in rows for value in row)
    found = store.accounts.key_for_token(token)
    assert (found.name, found.role, found.types, found.max_priority) == (
        "billing", "producer", ("email",), 20)
    assert store.accounts.key_for_token(token + "x") is None
    assert store.accounts.key_for_token("") is None


def test_revoked_keys_stop_working_and_free_their_name(store):
    _, old = store.accounts.create_key("mailer-1", "worker")
    with pytest.raises(Conflict):
        store.accounts.create_key("mailer-1", "worker")
    assert store.accounts.revoke_key("mailer-1") is True
    assert store.accounts.revoke_key("mailer-1") is False
    assert store.accounts.key_for_token(old) is None
    _, new = store.accounts.create_key("mailer-1", "worker")
    assert store.accounts.key_for_token(new).name == "mailer-1"
    assert store.accounts.key_for_token(old) is None
    listed = store.accounts.list_keys()
    assert [(k.name, k.revoked_at is None) for k in listed] == [("mailer-1", False),
                                                               ("mailer-1", True)]


def test_users_have_unique_names_and_only_a_password_hash(store):
    assert not store.accounts.has_users()
    assert store.accounts.create_first_user("admin", "hash-a", "admin") is True
    assert store.accounts.create_first_user("other", "hash-b", "admin") is False
    store.accounts.create_user("ann", "pbkdf2:sha256$x", "viewer")
    with pytest.raises(Conflict):
        store.accounts.create_user("ann", "hash", "admin")
    assert store.accounts.user("ann").role == "viewer"
    assert store.accounts.user("nobody") is None
    with store.engine.connect() as conn:
        assert sorted(conn.execute(select(users.c.username)).scalars()) == ["admin", "ann"]


def test_purge_deletes_only_old_finished_jobs(store, clock):
    done = add_job(store)
    add_job(store, "pdf")  # stays pending
    store.claim("w", lease_seconds=30, types=["email"])
    store.complete(done.id, "w", 1)
    assert store.purge(3600 * US) == 0
    clock.advance(3601)
    assert store.purge(3600 * US) == 1
    with pytest.raises(JobNotFound):
        store.get(done.id)
    assert len(store.list_jobs().jobs) == 1


# -- the backends ---------------------------------------------------------------------
STORE_DIR = pathlib.Path(__file__).resolve().parents[2] / "queuelog" / "server" / "store"


def test_only_the_backends_tell_the_databases_apart():
    """Issue 14: a ``dialect.name`` test or a database named outside backends/ (and the
    engine's set-up, and the backends' own SQL) is a new branch."""
    asks = re.compile(r"dialect\.name|get_backend_name|\"postgresql\"|\"sqlite\"|"
                      r"with_for_update|INDEXED BY \w|pg_advisory")
    # tables.py declares the schema, with SQLAlchemy's per-database column and index
    # variants (the migrations' picture of the tables), not a branch of the store's code.
    # notifier.py: the wake-up transport, one class per backend (NOTIFY; datagrams).
    own = {STORE_DIR / "tables.py", STORE_DIR / "engine.py", STORE_DIR / "notifier.py"}
    found = {p.name: asks.findall(p.read_text("utf-8")) for p in STORE_DIR.rglob("*.py")
             if p not in own and p.parent.name not in {"backends", "sql"}}
    assert {name: hits for name, hits in found.items() if hits} == {}


def test_the_backend_is_chosen_once_from_the_url(store, backend):
    assert isinstance(store.backend, {"sqlite": SQLiteBackend,
                                      "postgresql": PostgresBackend}[backend])
    assert backends.for_url(store.engine.url.render_as_string(hide_password=False)) \
        is store.backend is store.accounts.backend


@pytest.mark.parametrize("url, says", [("mysql://u@h/db", "not 'mysql'"),
                                       ("postgres://u@h/db", "write postgresql+psycopg://")])
def test_an_unsupported_database_is_a_config_error(url, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        backends.for_url(url)


def test_the_key_lookup_gives_its_connection_back_transactional(backend, store, monkeypatch):
    """PostgreSQL reads the key in autocommit (no BEGIN/ROLLBACK round trips): the pooled
    connection must come back transactional, even when the read fails, or a later write
    transaction on it would commit statement by statement."""
    if backend != "postgresql":
        pytest.skip("SQLite's lookup runs in a transaction of its own")
    import psycopg
    _, token = store.accounts.create_key("looked-up", "worker", types=None, max_priority=30)
    assert store.accounts.key_for_token(token).name == "looked-up"
    real = psycopg.Connection.execute

    def refuse(self, *args, **kwargs):
        if self.autocommit:
            raise psycopg.OperationalError("the read failed")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", refuse)
    assert store.accounts.key_for_token(token).name == "looked-up"  # replayed, then found
    monkeypatch.undo()
    held = [store.accounts.engine.raw_connection() for _ in range(3)]
    try:
        assert not any(c.driver_connection.autocommit for c in held)
    finally:
        for c in held:
            c.close()


def test_a_key_lookup_that_cannot_leave_autocommit_gives_its_connection_up(backend, store,
                                                                           monkeypatch):
    """If the connection refuses to leave autocommit, it is never pooled again, its place in
    the pool is given back, and the lookup is answered on another connection."""
    if backend != "postgresql":
        pytest.skip("SQLite's lookup runs in a transaction of its own")
    import psycopg
    _, token = store.accounts.create_key("stuck", "worker", types=None, max_priority=30)
    real = psycopg.Connection._set_autocommit
    refused: list[Any] = []

    def set_autocommit(self, value):
        if not value and not refused:
            refused.append(self)
            raise psycopg.OperationalError("the connection is lost")
        return real(self, value)

    monkeypatch.setattr(psycopg.Connection, "_set_autocommit", set_autocommit)
    assert store.accounts.key_for_token(token).name == "stuck"
    assert refused and store.accounts.engine.pool.checkedout() == 0
    monkeypatch.undo()
    held = [store.accounts.engine.raw_connection() for _ in range(2)]
    try:
        assert all(c.driver_connection is not refused[0] for c in held)
        assert not any(c.driver_connection.autocommit for c in held)
    finally:
        for c in held:
            c.close()


def test_a_batch_complete_answers_each_jobs_new_state_and_stores_its_result(store):
    """complete_many returns what its answer, counts and run times need (``Done``: id,
    type, status, claimed_at, finished_at), not a whole job; the job itself is stored
    completed with its result."""
    from queuelog.model.jobs import Done
    from queuelog.model.problems import QueuelogError
    first, second = add_job(store, "email"), add_job(store, "pdf")
    held = {j.id: j for j in store.claim_many("w1", 2, lease_seconds=60)}
    got = store.complete_many("w1", [(first.id, held[first.id].attempt, '{"n": 1}'),
                                     (second.id, held[second.id].attempt + 1, None)])
    assert got[0] == Done(first.id, "email", Status.COMPLETED, held[first.id].claimed_at,
                          store.clock())
    assert isinstance(got[1], QueuelogError) and got[1].status == 409
    done = store.get(first.id)
    assert done.status is Status.COMPLETED and done.result == {"n": 1}
    assert store.get(second.id).status is Status.RUNNING

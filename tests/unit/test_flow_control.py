"""Flow control in the store: concurrency and rate limits per type, on SQLite and PostgreSQL."""
from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest

from helpers import sent_statements
from queuelog import create_app
from queuelog.model.problems import ConfigError
from queuelog.server.store import NewJob, Store

LIMITS = {"pdf": {"concurrency": 3}, "email": {"rate": "5/s", "burst": 5}, "sync": {}}


@pytest.fixture
def config() -> dict[str, Any]:
    """pdf: 3 at once; email: 5 a second, burst 5; sync: no limit."""
    return {"JOB_TYPES": LIMITS}


def add(store: Store, type: str, n: int = 1, priority: int = 0) -> None:
    """Enqueue ``n`` jobs of ``type``."""
    store.enqueue_many([NewJob("billing", type, "{}", priority, 3) for _ in range(n)])


def max_overlap(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one instant (an end before a start at the same instant)."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans],
                    key=lambda x: (x[0], x[1]))
    return max(itertools.accumulate(d for _, d in events))


def test_ten_claimers_never_run_more_than_the_concurrency(store: Store) -> None:
    add(store, "pdf", 50)
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()

    def claimer(name: str) -> None:
        done = 0
        deadline = time.monotonic() + 120
        while done < 5 and time.monotonic() < deadline:
            job = store.claim(name, types=["pdf"])
            if job is None:
                time.sleep(0.002)
                continue
            start = time.monotonic()  # inside the claim's commit .. complete's commit
            time.sleep(0.05)  # long enough for ten claimers to pile up without a limit
            end = time.monotonic()
            store.complete(job.id, name, job.attempt)
            with lock:
                spans.append((start, end))
            done += 1

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(spans) == 50
    assert max_overlap(spans) <= 3


def test_rate_with_burst_holds_over_every_interval(store: Store, clock: Any) -> None:
    add(store, "email", 40)
    claimed: list[int] = []
    for _ in range(200):  # 20 s of fake time in 0.1 s steps
        claimed += [clock.now for _ in store.claim_many("w", 10, types=["email"])]
        if len(claimed) == 40:
            break
        clock.advance(0.1)
    assert len(claimed) == 40
    for i, j in itertools.combinations(range(40), 2):
        seconds = (claimed[j] - claimed[i]) / 1e6
        assert j - i + 1 <= 5 + 5 * seconds + 1e-9, (i, j, seconds)
    assert (claimed[-1] - claimed[0]) / 1e6 >= 7.0 - 1e-9  # 35 tokens after the burst


def test_a_batch_takes_what_a_type_has_left_and_the_others_go_on(store: Store) -> None:
    add(store, "pdf", 5, priority=10)   # first in claim order, but only 3 may run
    add(store, "sync", 4)
    got = store.claim_many("w", 10)
    assert [j.type for j in got] == ["pdf"] * 3 + ["sync"] * 4
    assert store.claim("w") is None   # pdf at its limit, nothing else due
    store.complete(got[0].id, "w", got[0].attempt)
    assert store.claim("w").type == "pdf"  # type: ignore[union-attr]


def test_a_limit_changed_at_run_time_applies_at_the_next_claim(store: Store) -> None:
    add(store, "sync", 4)
    store.set_limits("sync", {"concurrency": 1}, "root")
    assert store.claim("w") is not None
    assert store.claim("w") is None
    store.set_limits("sync", {"concurrency": None}, "root")
    assert len(store.claim_many("w", 10)) == 3
    store.set_limits("pdf", {"concurrency": 4}, "root")
    store.reset_limits("pdf", "root")
    assert store.flow_states(["pdf"])["pdf"].limits.concurrency == 3  # configured again


def test_an_empty_bucket_tells_when_its_next_token_is_due(store: Store, clock: Any) -> None:
    add(store, "email", 6)
    assert len(store.claim_many("w", 10)) == 5
    empty = store.claim_many("w", 10)
    assert list(empty) == [] and empty.next_due_in == pytest.approx(0.2)
    assert store.flow_states(["email"])["email"].limited == "rate"
    clock.advance(0.2)
    assert len(store.claim_many("w", 10)) == 1


def test_an_expired_lease_counts_until_it_is_taken_back(store: Store, clock: Any) -> None:
    add(store, "pdf", 4)
    held = store.claim_many("w", 10, lease_seconds=10)
    assert len(held) == 3 and store.claim("w") is None
    clock.advance(11)  # leases run out: still running until a claim takes them back
    assert store.flow_states(["pdf"])["pdf"].running == 3
    got = store.claim_many("w", 10)  # takes the three back (each retries later), frees slots
    assert [j.id for j in got] == [held[-1].id + 1]
    assert {store.get(j.id).status.value for j in held} == {"pending"}


@pytest.mark.parametrize("opts, named", [
    ({"concurrency": 0}, "concurrency"), ({"rate": "5/d"}, "rate"),
    ({"burst": 5}, "burst needs a rate"), ({"concurrency": "3"}, "concurrency")])
def test_a_bad_limit_in_the_config_stops_start_up(opts: dict[str, Any], named: str,
                                                  tmp_path: Any) -> None:
    with pytest.raises(ConfigError) as err:
        create_app({"TESTING": True, "DATABASE_URL": f"sqlite:///{tmp_path}/q.db",
                    "SECRET_KEY": "x", "JOB_TYPES": {"pdf": opts}})
    assert "JOB_TYPES['pdf']" in str(err.value) and named in str(err.value)
    assert "\n" not in str(err.value)


def locks_limiter_rows(statement: str, parameters: Any) -> bool:
    """The limiter rows locked: claim_policy.settle's first statement, and the locked way's."""
    return "FROM type_limits" in statement and "FOR UPDATE" in statement


@pytest.mark.parametrize("kind", ["pdf", "email"])
def test_a_claim_that_would_overrun_meanwhile_rolls_back_and_claims_under_the_lock(
        backend: str, store: Store, kind: str) -> None:
    """PostgreSQL claims on an unlocked reading (far from the limit: 3 left): another claim
    committing between that reading and the first one's check (claim_policy.settle) must
    not let both through. The batch of 3 rolls back and, under the lock, takes the 2 left."""
    if backend != "postgresql":
        pytest.skip("SQLite's write lock serializes the two: there is no interleaving")
    store.set_limits(kind, {"pdf": {"concurrency": 3}, "email": {"rate": "1/h", "burst": 3}
                            }[kind], "root")
    add(store, kind, 5)
    others: list[Any] = []

    def another_claim(conn: Any, statement: str) -> None:
        if not others:  # the first claim, between its reading and its check
            others.append(None)
            t = threading.Thread(target=lambda: others.append(store.claim("w2", types=[kind])))
            t.start()
            t.join(timeout=30)

    # The check's first statement locks the limiter rows (the reading's does not).
    with sent_statements(store.engine, locks_limiter_rows, another_claim, before=True):
        first = store.claim_many("w1", 3, types=[kind])
    assert others[1] is not None            # the other claim got one slot or token
    assert len(first) == 2                  # and this one, checked under the lock, the rest
    assert store.claim("w3", types=[kind]) is None


def test_the_check_trusts_a_count_only_under_a_lock_it_took() -> None:
    """PostgreSQL's check locks the limiter rows, then counts. A row the lock did not
    return (made by a claim not yet committed when the lock read) was not locked: the
    count then waited for that row and is of a snapshot from before the wait, so it may
    miss claims committed meanwhile (seen: 4 running against a concurrency of 3). The
    claim must go the locked way instead."""
    import types

    from queuelog.model.limits import Limits
    from queuelog.server.store import claim_policy

    class Unlocked:  # the lock read no row; the spend found one and counted 3
        backend = types.SimpleNamespace(writes_lock_reads=False)

        def lock_spend_count(self, *args: Any) -> tuple[dict[str, Any], dict[str, Any]]:
            return {}, {"pdf": types.SimpleNamespace(tokens=None, running=3)}

    allow = claim_policy.Allowance({"pdf": 2}, {}, None, {"pdf": Limits(concurrency=3)})
    got = [types.SimpleNamespace(type="pdf")]
    assert claim_policy.settle(None, Unlocked(), {}, allow, got, 0) is False  # type: ignore[arg-type]


def test_a_whole_token_refilled_is_claimed_on_both_sides_of_the_check(
        store: Store, clock: Any) -> None:
    """The reading refills the bucket in Python, PostgreSQL's check in SQL: at the instant
    a whole token is back, both must see it. 10/min, 6 s after the bucket emptied: in
    Python 6.0 * (1/6) is 1.0, while 6,000,000 us * (1/6 per 1e6 us) is a hair under 1."""
    add(store, "email", 3)
    store.set_limits("email", {"rate": "10/min", "burst": 1}, "root")
    assert store.claim("w", types=["email"]) is not None  # the burst: the bucket is empty
    clock.advance(6)
    assert store.claim("w", types=["email"]) is not None
    assert store.claim("w", types=["email"]) is None  # and the next token is 6 s away

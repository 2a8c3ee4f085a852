"""The batch routes: POST /jobs/batch, POST /jobs/claim with max_jobs, POST /jobs/complete and
POST /jobs/fail. All or nothing for enqueue, fenced item by item for complete and fail."""
from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from helpers import problem

SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"])  # refused before any SQL


@pytest.fixture
def config() -> dict[str, Any]:
    """A small MAX_BATCH, so its limit is cheap to reach."""
    return {"MAX_BATCH": 5}


def batch(client: Any, headers: dict[str, str], *items: dict[str, Any], **kw: Any) -> Any:
    """POST /jobs/batch with these items."""
    return client.post("/jobs/batch", json={"jobs": list(items)}, headers=headers, **kw)


def count(store: Any) -> int:
    """How many jobs exist."""
    return len(store.list_jobs(limit=200).jobs)


def test_batch_enqueue_answers_the_jobs_in_request_order(client, producer, store):
    resp = batch(client, producer, {"type": "pdf", "payload": {"n": 1}},
                 {"type": "email", "priority": "medium"}, {"type": "sync", "delay_seconds": 5})
    assert resp.status_code == 201
    jobs = resp.json["jobs"]
    assert resp.json["replayed"] == []
    assert [j["type"] for j in jobs] == ["pdf", "email", "sync"]
    assert [j["id"] for j in jobs] == sorted(j["id"] for j in jobs)  # ids ascend in order
    assert jobs[0]["payload"] == {"n": 1} and jobs[1]["priority"] == "medium"
    assert all(j["status"] == "pending" and j["producer"] == "billing" for j in jobs)
    assert count(store) == 3


def test_one_bad_item_fails_the_batch_naming_it_and_writes_nothing(client, producer, store):
    got = problem(batch(client, producer, {"type": "email"}, {"type": "email"},
                        {"type": "email"}, {"type": "email", "priority": "urgent", "x": 1},
                        {"type": "fax", "payload": None}), 422, "validation-error")
    assert {e["field"] for e in got["errors"]} == {
        "jobs[3].priority", "jobs[3].x", "jobs[4].type", "jobs[4].payload"}
    assert count(store) == 0


@SQLITE_ONLY
@pytest.mark.parametrize("item", [1, None, "email", [], True])
def test_an_item_that_is_no_object_is_named_once_for_that(client, producer, store, item):
    got = problem(batch(client, producer, {"type": "email"}, item), 422, "validation-error")
    # Only what is wrong: no run_at/delay_seconds clash is read into a value with neither.
    assert got["errors"] == [{"field": "jobs[1]", "detail": "Must be a JSON object."}]
    assert count(store) == 0


def test_a_payload_over_the_limit_names_its_item(client, producer, store, app):
    app.config["MAX_PAYLOAD_BYTES"] = 20
    got = problem(batch(client, producer, {"type": "email", "payload": {"a": "b"}},
                        {"type": "email", "payload": {"a": "b" * 30}}), 422)
    assert [e["field"] for e in got["errors"]] == ["jobs[1].payload"]
    assert count(store) == 0


def test_403_for_an_item_beyond_the_key_and_422_over_403(client, make_key, store):
    limited = make_key("shop", "producer", types=["email"])
    got = problem(batch(client, limited, {"type": "email"}, {"type": "pdf"},
                        {"type": "email", "priority": "critical"}), 403)
    assert [e["field"] for e in got["errors"]] == ["jobs[1].type", "jobs[2].priority"]
    problem(batch(client, limited, {"type": "pdf"}, {"type": "email", "max_retries": 99}), 422)
    assert count(store) == 0


@pytest.mark.parametrize("config", [{"MAX_BATCH": 150}])
def test_a_403_names_at_most_100_items_as_a_422_does(client, make_key, store):
    limited = make_key("shop", "producer", types=["email"])
    got = problem(batch(client, limited, *[{"type": "pdf"}] * 150), 403)
    assert [e["field"] for e in got["errors"]] == [f"jobs[{i}].type" for i in range(100)]
    assert got["detail"].count("jobs[") == 100 and count(store) == 0


@SQLITE_ONLY
@pytest.mark.parametrize("body", [{"jobs": []}, {"jobs": [{"type": "email"}] * 6}, {},
                                  {"jobs": {"type": "email"}}, {"jobs": [], "extra": 1}])
def test_the_batch_itself_must_hold_1_to_max_batch_items(client, producer, store, body):
    got = problem(client.post("/jobs/batch", json=body, headers=producer), 422)
    assert "jobs" in {e["field"] for e in got["errors"]} | {"extra"}
    assert count(store) == 0


def test_items_replay_by_their_own_idempotency_key(client, producer, store):
    first = client.post("/jobs", json={"type": "email", "idempotency_key": "a"}, headers=producer)
    resp = batch(client, producer, {"type": "pdf", "idempotency_key": "b"},
                 {"type": "email", "idempotency_key": "a"}, {"type": "sync"})
    assert resp.status_code == 201 and resp.json["replayed"] == [1]
    assert resp.json["jobs"][1] == first.json
    again = batch(client, producer, {"type": "pdf", "idempotency_key": "b"},
                  {"type": "email", "idempotency_key": "a"})
    assert again.status_code == 200 and again.json["replayed"] == [0, 1]
    assert again.json["jobs"] == resp.json["jobs"][:2]
    assert count(store) == 3


def test_a_mismatched_or_repeated_key_fails_the_whole_batch(client, producer, store):
    batch(client, producer, {"type": "pdf", "idempotency_key": "b"})
    got = problem(batch(client, producer, {"type": "email", "idempotency_key": "new"},
                        {"type": "email", "idempotency_key": "b"}), 422,
                  "idempotency-key-mismatch")
    assert [e["field"] for e in got["errors"]] == ["jobs[1].idempotency_key"]
    got = problem(batch(client, producer, {"type": "email", "idempotency_key": "k"},
                        {"type": "pdf", "idempotency_key": "k"}), 422)
    assert [e["field"] for e in got["errors"]] == ["jobs[1].idempotency_key"]
    got = problem(client.post("/jobs/batch", json={"jobs": [{"type": "email"}]},
                              headers={**producer, "Idempotency-Key": "h"}), 422)
    assert [e["field"] for e in got["errors"]] == ["Idempotency-Key"]
    assert count(store) == 1


def test_racing_batches_with_overlapping_keys_make_each_job_once(app, producer, store):
    keys = [f"k-{n}" for n in range(5)]
    answers: list[Any] = []
    start = threading.Barrier(4)

    def send(offset: int) -> None:
        client = app.test_client()
        items = [{"type": "email", "idempotency_key": keys[(offset + n) % 5]} for n in range(3)]
        start.wait(timeout=10)
        answers.append(client.post("/jobs/batch", json={"jobs": items}, headers=producer))

    threads = [threading.Thread(target=send, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert [a.status_code in (200, 201) for a in answers] == [True] * 4, [
        a.get_data(as_text=True) for a in answers]
    jobs = store.list_jobs(limit=200).jobs
    assert sorted(j.idempotency_key for j in jobs) == keys  # one job per key
    by_key = {j.idempotency_key: j.id for j in jobs}
    for answer in answers:
        assert all(by_key[j["idempotency_key"]] == j["id"] for j in answer.json["jobs"])


def test_claim_with_max_jobs_takes_up_to_that_many_in_claim_order(client, admin, worker, store):
    ids = [batch(client, admin, *[{"type": "email", "priority": p}
                                  for p in ("low", "critical", "high", "low")]).json["jobs"]]
    low_a, crit, high, low_b = (j["id"] for j in ids[0])
    got = client.post("/jobs/claim", json={"max_jobs": 3, "lease_seconds": 60}, headers=worker)
    assert got.status_code == 200
    jobs = got.json["jobs"]
    assert [j["id"] for j in jobs] == [crit, high, low_a]
    assert all(j["status"] == "running" and j["attempt"] == 1 and j["worker_id"] == "mailer-1"
               for j in jobs)
    assert {j["lease_expires_at"] for j in jobs} == {"2026-05-28T20:27:40.000000Z"}
    assert [a.outcome.value for a in store.get(crit).attempts] == ["running"]
    rest = client.post("/jobs/claim", json={"max_jobs": 3}, headers=worker).json["jobs"]
    assert [j["id"] for j in rest] == [low_b]
    empty = client.post("/jobs/claim", json={"max_jobs": 3}, headers=worker)
    assert empty.status_code == 200 and empty.json == {"jobs": []}


def test_claim_with_max_jobs_respects_types_and_the_keys_limits(client, admin, make_key):
    batch(client, admin, {"type": "email"}, {"type": "pdf"}, {"type": "pdf"})
    limited = make_key("pdfer", "worker", types=["pdf"])
    got = client.post("/jobs/claim", json={"max_jobs": 5}, headers=limited).json["jobs"]
    assert [j["type"] for j in got] == ["pdf", "pdf"]
    problem(client.post("/jobs/claim", json={"max_jobs": 5, "types": ["email"]},
                        headers=limited), 403)
    problem(client.post("/jobs/claim", json={"max_jobs": 101}, headers=limited), 422)
    problem(client.post("/jobs/claim", json={"max_jobs": 0}, headers=limited), 422)


def test_concurrent_batch_claims_never_share_a_job(app, client, admin, make_key):
    for _ in range(4):
        batch(client, admin, *[{"type": "email"}] * 5)
    got: dict[str, list[int]] = {}
    start = threading.Barrier(4)

    def claim(name: str, headers: dict[str, str]) -> None:
        worker = app.test_client()
        start.wait(timeout=10)
        mine: list[int] = []
        for _ in range(20):
            jobs = worker.post("/jobs/claim", json={"max_jobs": 3}, headers=headers).json["jobs"]
            if not jobs:
                break
            mine += [j["id"] for j in jobs]
        got[name] = mine

    keys = {f"w{n}": make_key(f"w{n}", "worker") for n in range(4)}
    threads = [threading.Thread(target=claim, args=kv) for kv in keys.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    every = [i for ids in got.values() for i in ids]
    assert len(every) == len(set(every)) == 20


def held(client: Any, admin: dict[str, str], worker: dict[str, str], n: int) -> list[Any]:
    """Enqueue n jobs (one retry each) and claim them all; return the claimed jobs."""
    batch(client, admin, *[{"type": "email", "max_retries": 1}] * n)
    return client.post("/jobs/claim", json={"max_jobs": n}, headers=worker).json["jobs"]


def test_batch_complete_fences_each_item_on_its_own(client, admin, worker, make_key, store):
    a, b, c = held(client, admin, worker, 3)
    other = make_key("mailer-2", "worker")
    resp = client.post("/jobs/complete", json={"jobs": [
        {"id": a["id"], "attempt": 1, "result": {"ok": 1}},
        {"id": b["id"], "attempt": 2},
        {"id": 999, "attempt": 1},
        {"id": c["id"], "attempt": 1, "worker_id": "ignored"}]}, headers=worker)
    assert resp.status_code == 200
    results = resp.json["results"]
    assert results[0] == {"id": a["id"], "status": 200, "job_status": "completed"}
    assert (results[1]["status"], results[1]["type"]) == (409, "urn:queuelog:problem:"
                                                          "stale-attempt")
    assert results[1]["detail"] and results[2]["status"] == 404
    assert results[3] == {"id": c["id"], "status": 200, "job_status": "completed"}
    assert store.get(a["id"]).result == {"ok": 1}
    assert store.get(b["id"]).status.value == "running"  # the refused item changed nothing
    # Each completed job's attempt is closed with it; the refused one's stays open.
    assert [(t.outcome.value, t.finished_at is not None) for t in store.get(a["id"]).attempts
            ] == [("completed", True)]
    assert [t.outcome.value for t in store.get(b["id"]).attempts] == ["running"]
    again = client.post("/jobs/complete", json={"jobs": [{"id": b["id"], "attempt": 1}]},
                        headers=other).json["results"]
    assert again[0]["status"] == 409 and again[0]["type"].endswith("not-holder")


def test_batch_fail_retries_or_fails_each_and_sanitizes(client, admin, worker, store, clock):
    a, b = held(client, admin, worker, 2)
    resp = client.post("/jobs/fail", json={"jobs": [
        {"id": a["id"], "attempt": 1, "error": "token=hunter2secret", "retry_in": 30},
        {"id": b["id"], "attempt": 1, "error": "bad input", "retry": False}]}, headers=worker)
    assert [r["job_status"] for r in resp.json["results"]] == ["pending", "failed"]
    retried = store.get(a["id"])
    assert retried.run_at == clock.now + 30_000_000 and "hunter2" not in retried.error
    assert store.get(b["id"]).error == "bad input"
    late = client.post("/jobs/fail", json={"jobs": [{"id": a["id"], "attempt": 1}]},
                       headers=worker).json["results"]
    assert late[0]["status"] == 409 and late[0]["type"].endswith("wrong-state")


def test_a_malformed_batch_changes_nothing(client, admin, worker, store):
    a, b = held(client, admin, worker, 2)
    for body in ({"jobs": [{"id": a["id"], "attempt": 1}, {"id": a["id"], "attempt": 1}]},
                 {"jobs": [{"id": a["id"], "attempt": 1}, {"id": b["id"]}]},
                 {"jobs": [{"id": a["id"], "attempt": 1}, {"id": b["id"], "attempt": 1,
                                                           "result": "done"}]}):
        for route in ("/jobs/complete", "/jobs/fail"):
            if route == "/jobs/fail" and "result" in body["jobs"][1]:
                continue
            got = problem(client.post(route, json=body, headers=worker), 422)
            assert all(e["field"].startswith("jobs[1].") for e in got["errors"]), got
    assert {j.status.value for j in store.list_jobs().jobs} == {"running"}


def test_max_batch_must_be_a_positive_whole_number(tmp_path):
    from queuelog import create_app
    from queuelog.model.problems import ConfigError
    with pytest.raises(ConfigError, match="MAX_BATCH"):
        create_app({"DATABASE_URL": f"sqlite:///{tmp_path}/q.sqlite3", "MAX_BATCH": 0,
                    "SECRET_KEY": "x", "BOOTSTRAP_ADMIN": False})


@SQLITE_ONLY
def test_a_batch_of_adversarial_items_answers_at_most_100_errors(client, producer, store):
    """Bug 8: 500 items of 200 unknown fields (about 750 KB) answered 100,000 errors (8.5 MB)
    after a quadratic scan of them; now at most 100 errors, a small answer, nothing stored."""
    client.application.config["MAX_BATCH"] = 500  # the default; this module's app says 5
    client.application.extensions.pop("queuelog.declared", None)  # recompile the bodies
    item = {"type": "email", **{f"x{n:03d}": 1 for n in range(200)}}
    raw = json.dumps({"jobs": [item] * 500}, separators=(",", ":"))
    assert len(raw) < 1_000_000  # under MAX_CONTENT_LENGTH: the body is read and checked
    resp = client.post("/jobs/batch", data=raw, content_type="application/json",
                       headers=producer)
    body = problem(resp, 422)
    assert len(body["errors"]) == 100
    assert body["errors"][0] == {"field": "jobs[0].x000", "detail": "Unknown field."}
    assert len(resp.data) < 20_000
    assert store.list_jobs().jobs == []

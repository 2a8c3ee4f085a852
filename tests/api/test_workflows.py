"""Workflows over HTTP: depends_on, blocked, release, cancel down the chain, on_parent_failure
"run", retry bringing the chain back, parents on a claim, dependents on a read. Both backends.
"""
from __future__ import annotations

from typing import Any

import pytest
from helpers import claim, enqueue, problem



def _job(client: Any, headers: dict[str, str], job_id: int) -> dict[str, Any]:
    return client.get(f"/jobs/{job_id}", headers=headers).json


def _finish(client: Any, worker: dict[str, str], job_id: int, ok: bool = True,
            result: dict[str, Any] | None = None) -> dict[str, Any]:
    """Claim ``job_id`` (it must be the one due) and complete or fail it for good."""
    held = claim(client, worker).json
    assert held["id"] == job_id, held
    if ok:
        return client.post(f"/jobs/{job_id}/complete",
                           json={"attempt": held["attempt"], "result": result},
                           headers=worker).json
    return client.post(f"/jobs/{job_id}/fail", json={"attempt": held["attempt"],
                                                      "error": "boom", "retry": False},
                       headers=worker).json


def test_a_child_waits_blocked_and_is_released_by_its_last_parent(client, producer, worker,
                                                                  admin):
    a, b = enqueue(client, producer), enqueue(client, producer)
    child = enqueue(client, producer, "pdf", depends_on=[a["id"], b["id"]])
    assert (child["status"], child["depends_on"], child["on_parent_failure"],
            child["cancelled_by_parent"]) == ("blocked", [a["id"], b["id"]], "cancel", None)
    assert _job(client, admin, a["id"])["dependents"] == [child["id"]]
    _finish(client, worker, a["id"], result={"w": 1})
    assert _job(client, admin, child["id"])["status"] == "blocked"  # one parent still runs
    _finish(client, worker, b["id"], result={"w": 2})
    assert _job(client, admin, child["id"])["status"] == "pending"
    held = claim(client, worker).json
    assert held["id"] == child["id"]
    assert held["parents"] == [
        {"id": a["id"], "type": "email", "status": "completed", "result": {"w": 1}},
        {"id": b["id"], "type": "email", "status": "completed", "result": {"w": 2}}]


def test_a_blocked_job_is_never_claimed(client, producer, worker):
    parent = enqueue(client, producer)
    child = enqueue(client, producer, "pdf", depends_on=[parent["id"]])
    assert claim(client, worker).json["id"] == parent["id"]
    assert claim(client, worker).status_code == 204  # the child waits for it
    assert claim(client, worker, max_jobs=10).json == {"jobs": []}
    assert child["status"] == "blocked"


def test_a_parent_failure_cancels_down_the_chain(client, producer, worker, admin):
    root = enqueue(client, producer)
    child = enqueue(client, producer, depends_on=[root["id"]])
    grandchild = enqueue(client, producer, depends_on=[child["id"]])
    finalizer = enqueue(client, producer, depends_on=[child["id"]], on_parent_failure="run")
    _finish(client, worker, root["id"], ok=False)
    got = {j: _job(client, admin, j) for j in (child["id"], grandchild["id"], finalizer["id"])}
    assert (got[child["id"]]["status"], got[child["id"]]["cancelled_by_parent"]) == (
        "cancelled", root["id"])
    assert (got[grandchild["id"]]["status"],
            got[grandchild["id"]]["cancelled_by_parent"]) == ("cancelled", child["id"])
    # "run": a finalizer runs once every parent finished, however it ended.
    assert got[finalizer["id"]]["status"] == "pending"
    held = claim(client, worker).json
    assert held["id"] == finalizer["id"] and held["parents"][0]["status"] == "cancelled"


def test_an_admin_retry_brings_the_chain_back(client, producer, worker, admin):
    root = enqueue(client, producer)
    child = enqueue(client, producer, depends_on=[root["id"]])
    grandchild = enqueue(client, producer, depends_on=[child["id"]])
    _finish(client, worker, root["id"], ok=False)
    assert client.post(f"/jobs/{root['id']}/retry", headers=admin).status_code == 200
    for job in (child, grandchild):
        got = _job(client, admin, job["id"])
        assert (got["status"], got["cancelled_by_parent"]) == ("blocked", None)
    _finish(client, worker, root["id"])
    _finish(client, worker, child["id"])
    _finish(client, worker, grandchild["id"])


def test_a_bulk_retry_brings_the_chain_back_too(client, producer, worker, admin):
    root = enqueue(client, producer)
    child = enqueue(client, producer, depends_on=[root["id"]])
    _finish(client, worker, root["id"], ok=False)
    assert client.post("/jobs/retry", json={"ids": [root["id"]]},
                       headers=admin).json == {"count": 1}
    assert _job(client, admin, child["id"])["status"] == "blocked"



def test_a_retried_dependent_waits_again_for_its_unfinished_parents(client, producer, worker,
                                                                     admin):
    parent = enqueue(client, producer)
    child = enqueue(client, producer, "pdf", depends_on=[parent["id"]])
    assert client.post(f"/jobs/{child['id']}/cancel", headers=admin).status_code == 200
    got = client.post(f"/jobs/{child['id']}/retry", headers=admin).json
    # Its parent has not run: back to pending, it was claimed before it, parents unfinished.
    assert (got["status"], got["cancelled_by_parent"]) == ("blocked", None)
    assert [j["id"] for j in claim(client, worker, max_jobs=10).json["jobs"]] == [parent["id"]]
    held = _job(client, admin, parent["id"])
    client.post(f"/jobs/{parent['id']}/complete", json={"attempt": held["attempt"]},
                headers=worker)
    assert _job(client, admin, child["id"])["status"] == "pending"


def test_a_bulk_retry_of_a_parent_and_its_dependent_runs_the_parent_first(client, producer,
                                                                          worker, admin):
    parent = enqueue(client, producer)
    child = enqueue(client, producer, "pdf", depends_on=[parent["id"]])
    client.post(f"/jobs/{parent['id']}/cancel", headers=producer)
    assert _job(client, admin, child["id"])["cancelled_by_parent"] == parent["id"]
    # Both cancelled, both picked in one batch: the child waits for its parent again.
    assert client.post("/jobs/retry", json={"ids": [parent["id"], child["id"]]},
                       headers=admin).json == {"count": 2}
    got = _job(client, admin, child["id"])
    assert (got["status"], got["cancelled_by_parent"]) == ("blocked", None)
    _finish(client, worker, parent["id"])
    _finish(client, worker, child["id"])


def test_a_direct_retry_of_a_job_its_parent_cancelled_clears_the_mark(client, producer,
                                                                      worker, admin):
    parent = enqueue(client, producer)
    child = enqueue(client, producer, "pdf", depends_on=[parent["id"]])
    _finish(client, worker, parent["id"], ok=False)
    got = client.post(f"/jobs/{child['id']}/retry", headers=admin).json
    # The admin's retry runs it though its parent failed; it is no longer cancelled at all.
    assert (got["status"], got["cancelled_by_parent"]) == ("pending", None)
    assert _job(client, admin, child["id"])["cancelled_by_parent"] is None


def test_parents_finished_at_enqueue_count_at_once(client, producer, worker):
    done = enqueue(client, producer)
    _finish(client, worker, done["id"])
    failed = enqueue(client, producer)
    _finish(client, worker, failed["id"], ok=False)
    assert enqueue(client, producer, depends_on=[done["id"]])["status"] == "pending"
    cancelled = enqueue(client, producer, depends_on=[done["id"], failed["id"]])
    assert (cancelled["status"], cancelled["cancelled_by_parent"]) == ("cancelled",
                                                                       failed["id"])
    ran = enqueue(client, producer, depends_on=[failed["id"]], on_parent_failure="run")
    assert ran["status"] == "pending"


def test_cancelling_a_blocked_job_cancels_its_dependents(client, producer, admin):
    parent = enqueue(client, producer, delay_seconds=600)
    child = enqueue(client, producer, depends_on=[parent["id"]])
    grandchild = enqueue(client, producer, depends_on=[child["id"]])
    assert client.post(f"/jobs/{child['id']}/cancel", headers=producer).json["status"] == \
        "cancelled"
    assert _job(client, admin, grandchild["id"])["cancelled_by_parent"] == child["id"]
    assert client.post("/jobs/cancel", json={"ids": [parent["id"]]},
                       headers=producer).json == {"count": 1}


def test_a_batch_names_its_earlier_items(client, producer, worker, admin):
    got = client.post("/jobs/batch", json={"jobs": [
        {"type": "pdf", "payload": {"image": "a.png"}},
        {"type": "email", "depends_on": [{"item": 0}]},
        {"type": "email", "depends_on": [{"item": 0}]},
        {"type": "email", "depends_on": [{"item": 1}, {"item": 2}],
         "on_parent_failure": "run"}]}, headers=producer)
    assert got.status_code == 201
    ids = [j["id"] for j in got.json["jobs"]]
    assert [j["status"] for j in got.json["jobs"]] == ["pending", "blocked", "blocked",
                                                        "blocked"]
    assert got.json["jobs"][3]["depends_on"] == [ids[1], ids[2]]
    assert _job(client, admin, ids[0])["dependents"] == [ids[1], ids[2]]


def test_a_parent_named_twice_is_waited_for_once(client, producer, worker, admin):
    parent = enqueue(client, producer)
    child = enqueue(client, producer, "pdf", depends_on=[parent["id"], parent["id"]])
    got = client.post("/jobs/batch", json={"jobs": [
        {"type": "pdf"}, {"type": "pdf", "depends_on": [{"item": 0}, {"item": 0}]}]},
        headers=producer).json["jobs"]
    assert child["status"] == got[1]["status"] == "blocked"
    _finish(client, worker, parent["id"])
    # One finish of the one parent releases it: it waits for jobs, not for list entries.
    assert _job(client, admin, child["id"])["status"] == "pending"
    _finish(client, worker, child["id"])
    _finish(client, worker, got[0]["id"])
    assert _job(client, admin, got[1]["id"])["status"] == "pending"
    _finish(client, worker, got[1]["id"])
    # And after an admin's retry brings it back, as it waits at enqueue.
    other = enqueue(client, producer)
    twice = enqueue(client, producer, depends_on=[other["id"], other["id"]])
    _finish(client, worker, other["id"], ok=False)
    assert _job(client, admin, twice["id"])["status"] == "cancelled"
    assert client.post(f"/jobs/{other['id']}/retry", headers=admin).status_code == 200
    _finish(client, worker, other["id"])
    assert _job(client, admin, twice["id"])["status"] == "pending"


@pytest.mark.parametrize("depends_on,field", [
    ([999], "depends_on[0]"),                     # no such job
    ([], "depends_on"),                           # at least one
    (list(range(1, 102)), "depends_on"),          # at most 100
    ([{"item": 0}], "depends_on[0]"),             # items only in a batch
    (["1"], "depends_on[0]"),
])
def test_bad_parents_are_a_422_and_write_nothing(client, producer, admin, depends_on, field):
    before = client.get("/jobs", headers=admin).json["jobs"]
    body = problem(client.post("/jobs", json={"type": "email", "depends_on": depends_on},
                               headers=producer), 422)
    assert body["errors"][0]["field"] == field
    assert client.get("/jobs", headers=admin).json["jobs"] == before


def test_another_producers_job_is_no_parent_and_reveals_nothing(client, producer, make_key):
    theirs = enqueue(client, make_key("shop", "producer"))
    missing = problem(client.post("/jobs", json={"type": "email", "depends_on": [999]},
                                  headers=producer), 422)
    hidden = problem(client.post("/jobs", json={"type": "email",
                                                "depends_on": [theirs["id"]]},
                                 headers=producer), 422)
    assert missing["errors"][0]["detail"] == hidden["errors"][0]["detail"]


@pytest.mark.parametrize("items,field", [
    ([{"type": "email", "depends_on": [{"item": 0}]}], "jobs[0].depends_on[0]"),  # itself
    ([{"type": "email"}, {"type": "email", "depends_on": [{"item": 2}]},
      {"type": "email"}], "jobs[1].depends_on[0]"),                              # later
    ([{"type": "email"}, {"type": "email", "depends_on": [12345]}],
     "jobs[1].depends_on[0]"),                                                   # missing
    ([{"type": "email", "depends_on": [12345]}], "jobs[0].depends_on[0]"),       # one item
])
def test_a_batch_with_a_bad_parent_writes_nothing(client, producer, admin, items, field):
    body = problem(client.post("/jobs/batch", json={"jobs": items}, headers=producer), 422)
    assert body["errors"][0]["field"] == field
    assert client.get("/jobs", headers=admin).json["jobs"] == []


def test_the_request_hash_includes_the_parents(client, producer):
    a, b = enqueue(client, producer), enqueue(client, producer)
    first = client.post("/jobs", json={"type": "email", "depends_on": [a["id"]],
                                       "idempotency_key": "k"}, headers=producer)
    again = client.post("/jobs", json={"type": "email", "depends_on": [a["id"]],
                                       "idempotency_key": "k"}, headers=producer)
    assert (first.status_code, again.status_code) == (201, 200)
    other = client.post("/jobs", json={"type": "email", "depends_on": [b["id"]],
                                       "idempotency_key": "k"}, headers=producer)
    assert problem(other, 422)["type"].endswith("idempotency-key-mismatch")


def test_blocked_is_a_status_everywhere(client, producer, admin):
    parent = enqueue(client, producer)
    enqueue(client, producer, "pdf", depends_on=[parent["id"]])
    listed = client.get("/jobs?status=blocked", headers=admin).json["jobs"]
    assert [j["type"] for j in listed] == ["pdf"]
    types = {t["name"]: t for t in client.get("/types", headers=admin).json["types"]}
    assert types["pdf"]["counts"]["blocked"] == 1
    assert 'queuelog_jobs{status="blocked",type="pdf"} 1.0' in client.get(
        "/metrics", headers=admin).text


def test_purge_keeps_a_parent_an_unfinished_job_needs(client, producer, worker, admin, store,
                                                      clock):
    parent = enqueue(client, producer)
    other = enqueue(client, producer)
    child = enqueue(client, producer, depends_on=[parent["id"], other["id"]])
    _finish(client, worker, parent["id"])
    clock.advance(3600)
    store.purge(60 * 1_000_000)
    assert _job(client, admin, parent["id"])["status"] == "completed"  # child still waits
    _finish(client, worker, other["id"])
    _finish(client, worker, child["id"])
    clock.advance(3600)
    store.purge(60 * 1_000_000)
    assert client.get(f"/jobs/{parent['id']}", headers=admin).status_code == 404


def test_a_claimed_job_without_parents_has_none(client, producer, worker):
    enqueue(client, producer)
    held = claim(client, worker).json
    assert "parents" not in held and held["depends_on"] == []


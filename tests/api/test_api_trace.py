"""Trace context on the API: kept per job from the enqueue's headers, shown to its readers,
handed to the worker that claims it (both backends)."""
from __future__ import annotations

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TP2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


def test_a_job_keeps_the_trace_context_it_was_enqueued_with(client, producer, worker, admin):
    one = client.post("/jobs", json={"type": "email"},
                      headers={**producer, "traceparent": TP, "tracestate": "congo=t61"})
    assert one.status_code == 201
    assert (one.json["traceparent"], one.json["tracestate"]) == (TP, "congo=t61")
    # A batch: every item keeps it, a dependent (the linked insert) too.
    batch = client.post("/jobs/batch", json={"jobs": [
        {"type": "pdf"}, {"type": "pdf", "depends_on": [{"item": 0}]}]},
        headers={**producer, "traceparent": TP2})
    assert [(j["traceparent"], j["tracestate"]) for j in batch.json["jobs"]] == [(TP2, None)] * 2
    plain = client.post("/jobs", json={"type": "sync"}, headers=producer).json
    assert (plain["traceparent"], plain["tracestate"]) == (None, None)
    # Read back from the database, by each role that may read the job.
    got = client.get(f"/jobs/{one.json['id']}", headers=admin).json
    assert (got["traceparent"], got["tracestate"]) == (TP, "congo=t61")
    claimed = client.post("/jobs/claim", json={"max_jobs": 4}, headers=worker).json["jobs"]
    assert {j["id"]: j["traceparent"] for j in claimed} == {
        one.json["id"]: TP, batch.json["jobs"][0]["id"]: TP2, plain["id"]: None}
    dependent = client.get(f"/jobs/{batch.json['jobs'][1]['id']}", headers=producer).json
    assert (dependent["status"], dependent["traceparent"]) == ("blocked", TP2)
    listed = client.get("/jobs", headers=producer).json["jobs"]
    assert [j["traceparent"] for j in listed] == [None, TP2, TP2, TP]


def test_an_invalid_traceparent_is_ignored_with_its_tracestate_not_refused(client, producer):
    for bad in (TP.upper(), TP + "-more", "00-" + "0" * 32 + "-00f067aa0ba902b7-01"):
        resp = client.post("/jobs", json={"type": "email"},
                           headers={**producer, "traceparent": bad, "tracestate": "a=1"})
        assert resp.status_code == 201
        assert (resp.json["traceparent"], resp.json["tracestate"]) == (None, None)
    bad_state = client.post("/jobs", json={"type": "email"},
                            headers={**producer, "traceparent": TP, "tracestate": "A=1"})
    assert (bad_state.json["traceparent"], bad_state.json["tracestate"]) == (TP, None)


def test_an_idempotent_replay_keeps_the_first_requests_trace_context(client, producer):
    first = client.post("/jobs", json={"type": "email", "idempotency_key": "k-1"},
                        headers={**producer, "traceparent": TP})
    again = client.post("/jobs", json={"type": "email", "idempotency_key": "k-1"},
                        headers={**producer, "traceparent": TP2})
    assert again.status_code == 200  # the same request: a new span id makes no new job
    assert again.json["id"] == first.json["id"] and again.json["traceparent"] == TP

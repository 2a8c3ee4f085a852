"""A first end-to-end pass through the API on each backend."""
from __future__ import annotations


def test_enqueue_claim_complete(client, producer, worker, admin):
    created = client.post("/jobs", json={"type": "email", "payload": {"to": "a@b.c"}},
                          headers=producer)
    assert created.status_code == 201
    assert created.headers["Location"] == f"/jobs/{created.json['id']}"
    claimed = client.post("/jobs/claim", headers=worker)
    assert claimed.status_code == 200
    assert claimed.json["worker_id"] == "mailer-1" and claimed.json["attempt"] == 1
    done = client.post(f"/jobs/{claimed.json['id']}/complete",
                       json={"attempt": 1, "result": {"ok": True}}, headers=worker)
    assert done.status_code == 200 and done.json["status"] == "completed"
    assert client.post("/jobs/claim", headers=worker).status_code == 204
    got = client.get(f"/jobs/{created.json['id']}", headers=admin).json
    assert [a["outcome"] for a in got["attempts"]] == ["completed"]

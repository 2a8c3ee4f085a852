"""``GET /workers`` and ``/ui/workers``: who is working, on what, since when; both backends."""
from __future__ import annotations

from helpers import enqueue, problem

US = 1_000_000


def claim(client, headers, **body):
    """Claim one job through the API."""
    resp = client.post("/jobs/claim", json=body, headers=headers)
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()


def test_workers_lists_held_jobs_last_claim_and_the_last_hour(client, producer, worker,
                                                             make_key, clock):
    other = make_key("pdf-1", "worker")
    viewer = make_key("eyes", "viewer")
    for _ in range(3):
        enqueue(client, producer)
    done = claim(client, worker)
    assert client.post(f"/jobs/{done['id']}/complete", json={"attempt": 1},
                       headers=worker).status_code == 200
    bad = claim(client, worker)
    assert client.post(f"/jobs/{bad['id']}/fail", json={"attempt": 1, "error": "x",
                                                        "retry": False},
                       headers=worker).status_code == 200
    clock.advance(5)
    held = claim(client, other, lease_seconds=60)
    body = client.get("/workers", headers=viewer).get_json()
    assert body == {"workers": [
        {"name": "mailer-1", "running": [], "last_claim_at": bad["claimed_at"],
         "completed_last_hour": 1, "failed_last_hour": 1},
        {"name": "pdf-1", "running": [{
            "id": held["id"], "type": "email", "attempt": 1, "claimed_at": held["claimed_at"],
            "lease_expires_at": held["lease_expires_at"]}],
         "last_claim_at": held["claimed_at"], "completed_last_hour": 0, "failed_last_hour": 0}]}
    clock.advance(3600)  # the hour has passed: its counts go, the worker stays for 24 h
    first = client.get("/workers", headers=viewer).get_json()["workers"][0]
    assert (first["completed_last_hour"], first["failed_last_hour"]) == (0, 0)
    clock.advance(86_400)  # only the worker that still holds a job is left
    assert [w["name"] for w in client.get("/workers", headers=viewer).get_json()["workers"]] \
        == ["pdf-1"]


def test_workers_is_for_viewers_admins_and_metrics_only(client, producer, worker, admin,
                                                        make_key):
    assert client.get("/workers", headers=admin).status_code == 200
    assert client.get("/workers", headers=make_key("prom", "metrics")).status_code == 200
    problem(client.get("/workers", headers=worker), 403)
    problem(client.get("/workers", headers=producer), 403)
    problem(client.get("/workers"), 401)


def test_the_workers_page_marks_a_worker_whose_lease_ran_out(client, producer, worker,
                                                             make_user, clock):
    viewer = make_user("vera", "viewer")
    enqueue(client, producer)
    held = claim(client, worker, lease_seconds=30)
    page = client.get("/ui/workers", headers=viewer)
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert "mailer-1" in html and f"#{held['id']}" in html and "lease expired" not in html
    assert 'id="autorefresh"' in html and 'href="/ui/workers"' in html
    clock.advance(31)
    html = client.get("/ui/workers", headers=viewer).get_data(as_text=True)
    assert html.count("lease expired") == 2  # the worker's mark and the job's

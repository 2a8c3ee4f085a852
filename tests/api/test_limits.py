"""PUT/DELETE /types/{type}/limits, GET /types, /ui/types and /metrics, on both backends."""
from __future__ import annotations

import re
from typing import Any, Callable

import pytest

from helpers import enqueue, problem

URL = "/types/pdf/limits"


@pytest.fixture
def config() -> dict[str, Any]:
    """pdf: 2 at once; email and sync: no limit."""
    return {"JOB_TYPES": {"email": {}, "pdf": {"concurrency": 2}, "sync": {}}}


def pdf(client: Any, headers: dict[str, str]) -> dict[str, Any]:
    """The pdf entry of GET /types."""
    return next(t for t in client.get("/types", headers=headers).get_json()["types"]
                if t["name"] == "pdf")


def test_get_types_shows_the_limits_in_force(client: Any, admin: dict[str, str],
                                             producer: dict[str, str],
                                             worker: dict[str, str]) -> None:
    for _ in range(3):
        enqueue(client, producer, "pdf")
    assert len(client.post("/jobs/claim", json={"max_jobs": 5}, headers=worker)
               .get_json()["jobs"]) == 2
    got = pdf(client, admin)
    assert {k: got[k] for k in ("concurrency", "rate", "burst", "running", "limited")} == {
        "concurrency": 2, "rate": None, "burst": None, "running": 2, "limited": "concurrency"}


def test_put_changes_some_limits_and_delete_restores_the_config(
        client: Any, admin: dict[str, str], producer: dict[str, str],
        worker: dict[str, str]) -> None:
    resp = client.put(URL, json={"rate": "10/min"}, headers=admin)
    assert resp.status_code == 200
    assert (resp.get_json()["concurrency"], resp.get_json()["rate"],
            resp.get_json()["burst"]) == (2, "10/min", 10)  # concurrency kept, burst = N
    got = client.put(URL, json={"concurrency": None, "burst": 3}, headers=admin).get_json()
    assert (got["concurrency"], got["rate"], got["burst"]) == (None, "10/min", 3)
    for _ in range(4):
        enqueue(client, producer, "pdf")
    claimed = client.post("/jobs/claim", json={"max_jobs": 10}, headers=worker).get_json()
    assert len(claimed["jobs"]) == 3  # the burst, at once: the new limit applies now
    assert pdf(client, admin)["limited"] == "rate"
    got = client.delete(URL, headers=admin).get_json()
    assert (got["concurrency"], got["rate"], got["burst"]) == (2, None, None)
    events = client.get("/audit", headers=admin).get_json()["events"]
    assert [(e["action"], e["target"], e["actor"]) for e in events[:3]] == [
        ("type.limits.reset", "pdf", "root"), ("type.limits", "pdf", "root"),
        ("type.limits", "pdf", "root")]
    assert events[1]["detail"] == {"concurrency": None, "rate": "10/min", "burst": 3}


@pytest.mark.parametrize("body, field", [
    ({"concurrency": 0}, "concurrency"), ({"concurrency": "3"}, "concurrency"),
    ({"concurrency": 2.5}, "concurrency"), ({"rate": "5/d"}, "rate"), ({"rate": "0/s"}, "rate"),
    ({"rate": 5}, "rate"), ({"burst": 0}, "burst"), ({"burst": 4}, "burst"),
    ({"rate": None, "burst": 4}, "burst"), ({"limit": 3}, "limit")])
def test_a_bad_limit_is_a_422_that_changes_nothing(client: Any, admin: dict[str, str],
                                                   body: dict[str, Any], field: str) -> None:
    before = pdf(client, admin)
    resp = client.put(URL, json=body, headers=admin)
    assert resp.status_code == 422, resp.get_json()
    assert field in {e["field"] for e in problem(resp, 422)["errors"]} or \
        field in problem(resp, 422)["detail"]
    assert pdf(client, admin) == before
    assert client.get("/audit", headers=admin).get_json()["events"] == []


def test_limits_are_admin_only_and_for_configured_types(
        client: Any, admin: dict[str, str], make_key: Callable[..., dict[str, str]]) -> None:
    viewer = make_key("eyes", "viewer")
    assert client.put(URL, json={"concurrency": 1}, headers=viewer).status_code == 403
    assert client.delete(URL, headers=viewer).status_code == 403
    problem(client.put("/types/nope/limits", json={"concurrency": 1}, headers=admin), 404)
    problem(client.delete("/types/nope/limits", headers=admin), 404)


def test_metrics_show_the_limits_and_why_a_type_is_skipped(
        client: Any, admin: dict[str, str]) -> None:
    client.put("/types/email/limits", json={"rate": "2/s"}, headers=admin)
    text = client.get("/metrics", headers=admin).get_data(as_text=True)
    assert 'queuelog_type_concurrency_limit{type="pdf"} 2.0' in text
    assert 'queuelog_type_rate_limit{type="email"} 2.0' in text
    assert 'queuelog_type_limited{reason="concurrency",type="pdf"} 0.0' in text


def test_admins_change_limits_from_the_types_page(client: Any, make_user: Any) -> None:
    admin = make_user("ada", "admin")
    page = client.get("/ui/types", headers=admin).get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)  # type: ignore
    url = "/ui/types/pdf/limits"
    assert client.post(url, data={"csrf_token": "forged", "concurrency": "5"},
                       headers=admin).status_code == 400
    resp = client.post(url, data={"csrf_token": token, "concurrency": "5", "rate": "3/s",
                                  "burst": ""}, headers=admin)
    assert resp.status_code == 303
    got = pdf(client, admin)
    assert (got["concurrency"], got["rate"], got["burst"]) == (5, "3/s", 3)
    assert client.post(url, data={"csrf_token": token, "rate": "often"},
                       headers=admin).status_code == 422
    client.post(url, data={"csrf_token": token, "reset": "1"}, headers=admin)
    assert pdf(client, admin)["concurrency"] == 2
    assert "at most 2 at once" in client.get("/ui/types", headers=admin).get_data(as_text=True)


@pytest.mark.parametrize("field", ["concurrency", "burst"])
def test_a_limit_typed_as_a_superscript_digit_is_a_422_page(client: Any, make_user: Any,
                                                          field: str) -> None:
    # "²" and "①" pass str.isdigit() but not int(): refused like any other non-number.
    admin = make_user("ada", "admin")
    page = client.get("/ui/types", headers=admin).get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)  # type: ignore
    for text in ("²", "①"):
        resp = client.post("/ui/types/pdf/limits", data={"csrf_token": token, field: text},
                           headers=admin)
        assert resp.status_code == 422 and resp.mimetype == "text/html", text
    assert pdf(client, admin)["concurrency"] == 2  # unchanged

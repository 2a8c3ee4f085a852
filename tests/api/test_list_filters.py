"""GET /jobs: the producer and worker filters for every role that lists, and unknown
query parameters refused by name (on GET /jobs and GET /audit)."""
from __future__ import annotations

from typing import Any

import pytest
from helpers import claim, enqueue, problem


def ids(client: Any, headers: dict[str, str], query: str) -> list[int]:
    """The ids of one page of ``GET /jobs?<query>``, asserting a 200."""
    resp = client.get(f"/jobs?{query}", headers=headers)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return [j["id"] for j in resp.json["jobs"]]


@pytest.fixture
def two_producers(client, producer, make_key):
    """One job of ``billing`` (the producer fixture) and one of ``shop``."""
    shop = make_key("shop", "producer")
    return enqueue(client, producer)["id"], enqueue(client, shop)["id"], shop


def test_admin_filters_by_producer(client, admin, two_producers):
    billing, shop, _ = two_producers
    assert ids(client, admin, "producer=billing") == [billing]
    assert ids(client, admin, "producer=shop") == [shop]
    assert ids(client, admin, "producer=nobody") == []


def test_a_producers_filter_never_reaches_past_its_own_jobs(client, producer, two_producers):
    billing, _, shop = two_producers
    assert ids(client, producer, "producer=billing") == [billing]
    assert ids(client, producer, "producer=shop") == []
    assert ids(client, shop, "producer=billing") == []


def test_filter_by_worker_for_admins_viewers_and_workers(client, producer, worker, admin,
                                                         make_key, make_user):
    other = make_key("mailer-2", "worker")
    first, second, _ = (enqueue(client, producer)["id"] for _ in range(3))
    assert claim(client, worker).json["id"] == first
    assert claim(client, other).json["id"] == second
    viewer = make_user("vera", "viewer")
    for who in (admin, viewer):
        assert ids(client, who, "worker=mailer-1") == [first]
        assert ids(client, who, "worker=mailer-2") == [second]
    assert ids(client, worker, "worker=mailer-1") == [first]
    assert ids(client, worker, "worker=mailer-2") == []  # never past what it holds or held


def test_filters_combine_with_the_others(client, producer, worker, admin):
    held = enqueue(client, producer)["id"]
    enqueue(client, producer)
    assert claim(client, worker).json["id"] == held
    assert ids(client, admin, "producer=billing&worker=mailer-1&status=running") == [held]
    assert ids(client, admin, "producer=billing&worker=mailer-1&status=pending") == []


@pytest.mark.parametrize("path", ["/jobs", "/audit"])
def test_an_unknown_parameter_is_a_400_naming_it(client, admin, path):
    body = problem(client.get(f"{path}?limit=5&stauts=failed", headers=admin), 400)
    assert "stauts" in body["detail"]
    assert body["errors"] == [{"field": "stauts", "detail": "Unknown parameter."}]


def test_every_unknown_parameter_is_named(client, admin):
    body = problem(client.get("/jobs?b=1&a=2", headers=admin), 400)
    assert [e["field"] for e in body["errors"]] == ["a", "b"]


@pytest.mark.parametrize("path", ["/jobs?status=failed&status=pending", "/jobs/1?wait=0&wait=5",
                                  "/audit?limit=5&limit=50"])
def test_a_parameter_given_twice_is_a_400_naming_it(client, admin, producer, path):
    enqueue(client, producer)
    name = path.split("?")[1].split("=")[0]
    body = problem(client.get(path, headers=admin), 400)
    assert name in body["detail"]
    assert body["errors"] == [{"field": name, "detail": "Given more than once."}]


@pytest.mark.parametrize("value", ["", "x" * 101])
def test_a_bad_producer_or_worker_value_is_a_422(client, admin, value):
    for name in ("producer", "worker"):
        body = problem(client.get(f"/jobs?{name}={value}", headers=admin), 422)
        assert [e["field"] for e in body["errors"]] == [name]

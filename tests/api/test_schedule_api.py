"""Recurring jobs over HTTP: GET /schedules, pause/resume/run, audit, the dashboard, the CLI."""
from __future__ import annotations

import re
from typing import Any

import pytest

from helpers import add_user, problem
from queuelog import create_app
from queuelog.model.problems import ConfigError
from queuelog.server.schedules import Ticker, from_config

FIELDS = ["name", "cron", "timezone", "type", "paused", "next_run_at", "last_run_at",
          "last_job"]


@pytest.fixture
def config() -> dict[str, Any]:
    """One schedule in Berlin, one every second."""
    return {"SCHEDULES": {
        "nightly": {"cron": "0 3 * * *", "type": "pdf", "timezone": "Europe/Berlin",
                    "payload": {"report": "daily"}, "priority": "high"},
        "tick": {"cron": "* * * * * *", "type": "email"},
    }}


@pytest.fixture
def viewer(store: Any) -> dict[str, str]:
    """A viewer signed in with HTTP Basic."""
    return add_user(store, "vera", "viewer")


@pytest.fixture
def metrics_key(make_key: Any) -> dict[str, str]:
    """A key of role metrics."""
    return make_key("prom", "metrics")


def schedules(client: Any, headers: dict[str, str]) -> dict[str, Any]:
    """GET /schedules, by name."""
    got = client.get("/schedules", headers=headers)
    assert got.status_code == 200, got.json
    return {s["name"]: s for s in got.json["schedules"]}


def test_list_has_the_contracts_fields_for_viewer_admin_and_metrics(
        client, admin, viewer, metrics_key, clock):
    clock.now = 1_780_000_000_000_000  # 2026-05-28T20:26:40Z: 03:00 CEST is 01:00 UTC
    for who in (admin, viewer, metrics_key):
        got = schedules(client, who)
        assert list(got) == ["nightly", "tick"]
        assert list(got["nightly"]) == FIELDS
        assert got["nightly"] == {
            "name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin",
            "type": "pdf", "paused": False, "next_run_at": "2026-05-29T01:00:00.000000Z",
            "last_run_at": None, "last_job": None}
        assert got["tick"]["next_run_at"] == "2026-05-28T20:26:41.000000Z"


def test_producers_and_workers_may_not_list(client, producer, worker):
    for who in (producer, worker):
        problem(client.get("/schedules", headers=who), 403)


def test_run_now_answers_201_with_the_job_and_is_audited(client, admin, store, clock):
    got = client.post("/schedules/nightly/run", headers=admin)
    assert got.status_code == 201, got.json
    job = got.json
    assert (job["schedule"], job["producer"], job["type"], job["payload"], job["priority"]) \
        == ("nightly", "schedule:nightly", "pdf", {"report": "daily"}, "high")
    assert job["scheduled_for"] == job["run_at"] == job["created_at"]
    assert got.headers["Location"].endswith(f"/jobs/{job['id']}")
    listed = schedules(client, admin)["nightly"]
    assert listed["last_job"] == {"id": job["id"], "status": "pending"}
    assert listed["last_run_at"] == job["scheduled_for"]
    (event,) = client.get("/audit", headers=admin).json["events"]
    assert (event["actor"], event["action"], event["target"], event["detail"]) == (
        "root", "schedule.run", "nightly", {"job": job["id"]})


def test_pause_and_resume_are_kept_audited_and_skip_ticks(client, admin, app, store, clock):
    ticker = Ticker(app, from_config(app.config))
    ticker.tick_once()
    paused = client.post("/schedules/tick/pause", headers=admin)
    assert paused.status_code == 200 and paused.json["paused"] is True
    assert list(paused.json) == FIELDS
    for _ in range(3):
        clock.advance(1)
        assert ticker.tick_once() == []
    assert schedules(client, admin)["tick"]["paused"] is True
    resumed = client.post("/schedules/tick/resume", headers=admin)
    assert resumed.status_code == 200 and resumed.json["paused"] is False
    clock.advance(1)
    assert len(ticker.tick_once()) == 1
    actions = [(e["action"], e["target"]) for e in client.get("/audit", headers=admin).json[
        "events"]]
    assert actions == [("schedule.resume", "tick"), ("schedule.pause", "tick")]


def test_get_jobs_filters_by_schedule(client, admin, producer):
    client.post("/jobs", json={"type": "pdf"}, headers=producer)
    run = client.post("/schedules/nightly/run", headers=admin).json
    client.post("/schedules/tick/run", headers=admin)
    got = client.get("/jobs?schedule=nightly", headers=admin).json["jobs"]
    assert [j["id"] for j in got] == [run["id"]]
    assert client.get("/jobs?schedule=none", headers=admin).json["jobs"] == []
    (plain,) = client.get("/jobs", headers=producer).json["jobs"]
    assert plain["schedule"] is None and plain["scheduled_for"] is None


@pytest.mark.parametrize("verb", ["pause", "resume", "run"])
def test_unknown_schedule_is_404_and_changes_nothing(client, admin, verb):
    problem(client.post(f"/schedules/nope/{verb}", headers=admin), 404)
    assert client.get("/audit", headers=admin).json["events"] == []
    assert client.get("/jobs", headers=admin).json["jobs"] == []


@pytest.mark.parametrize("verb", ["pause", "resume", "run"])
def test_viewers_producers_and_workers_may_not_change_schedules(client, admin, viewer, producer,
                                                                worker, verb):
    for who in (producer, worker):
        problem(client.post(f"/schedules/tick/{verb}", headers=who), 403)
    problem(client.post(f"/schedules/tick/{verb}", headers=viewer, json={}), 403)
    problem(client.post(f"/schedules/tick/{verb}"), 401)
    assert client.get("/jobs", headers=admin).json["jobs"] == []
    assert schedules(client, admin)["tick"]["paused"] is False


@pytest.mark.parametrize("verb", ["pause", "resume", "run"])
def test_a_body_with_fields_is_422_and_bad_json_400(client, admin, verb):
    problem(client.post(f"/schedules/tick/{verb}", headers=admin, json={"now": True}), 422)
    problem(client.post(f"/schedules/tick/{verb}", headers=admin, data="{",
                        content_type="application/json"), 400)
    assert client.get("/jobs", headers=admin).json["jobs"] == []
    assert client.get("/audit", headers=admin).json["events"] == []


def test_metrics_gauge_the_last_tick_of_each_schedule(client, app, metrics_key, clock):
    text = client.get("/metrics", headers=metrics_key).text
    assert 'queuelog_schedule_last_run_timestamp_seconds{schedule="tick"} 0.0' in text
    ticker = Ticker(app, from_config(app.config))
    ticker.tick_once()
    clock.advance(1)
    (job,) = ticker.tick_once()
    text = client.get("/metrics", headers=metrics_key).text
    value = re.search(r'queuelog_schedule_last_run_timestamp_seconds\{schedule="tick"\} (\S+)',
                      text).group(1)  # type: ignore[union-attr]
    assert float(value) == job.scheduled_for / 1e6


def test_dashboard_shows_next_run_and_admins_get_forms_with_csrf(client, admin, viewer):
    page = client.get("/ui/schedules", headers=viewer)
    assert page.status_code == 200
    assert "2026-05-29 01:00:00" in page.text and "CEST" in page.text  # next run, both zones
    assert "<form" not in page.text and 'href="/ui/schedules"' in page.text  # nav link
    page = client.get("/ui/schedules", headers=admin).text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)  # type: ignore
    assert client.post("/ui/schedules/tick/run", headers=admin).status_code == 400
    assert client.get("/jobs", headers=admin).json["jobs"] == []
    done = client.post("/ui/schedules/tick/run", headers=admin, data={"csrf_token": token})
    assert done.status_code == 303
    assert client.post("/ui/schedules/tick/pause", headers=admin,
                       data={"csrf_token": token}).status_code == 303
    assert schedules(client, admin)["tick"]["paused"] is True
    paused = client.get("/ui/schedules", headers=viewer).text  # no next run while paused
    assert paused.count("none while paused") == 1
    assert client.post("/ui/schedules/tick/run", headers=viewer,
                       data={"csrf_token": token}).status_code == 403
    assert len(client.get("/jobs", headers=admin).json["jobs"]) == 1


def test_cli_lists_schedules_with_their_next_run(app, clock):
    out = app.test_cli_runner().invoke(args=["schedules"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].split()[:3] == ["NAME", "CRON", "TIMEZONE"]
    assert "nightly" in lines[1] and "2026-05-29T01:00:00.000000Z" in lines[1]


@pytest.mark.parametrize("schedule, says", [
    ({"cron": "0 3 * *", "type": "pdf"}, "4 fields"),
    ({"cron": "0 3 30 2 *", "type": "pdf"}, "never fires"),
    ({"cron": "0 3 * * *", "type": "fax"}, "type: Must be one of"),
    ({"cron": "0 3 * * *", "type": "pdf", "timezone": "Berlin"}, "IANA"),
    ({"cron": "0 3 * * *", "type": "pdf", "priority": "urgent"}, "priority"),
    ({"cron": "0 3 * * *", "type": "pdf", "max_retries": 26}, "max_retries"),
    ({"cron": "0 3 * * *", "type": "pdf", "payload": "x"}, "payload"),
    ({"cron": "0 3 * * *", "type": "pdf", "payload": {"x": "y" * 70_000}}, "payload"),
    ({"cron": "0 3 * * *", "type": "pdf", "catch_up": "yes"}, "catch_up"),
    ({"cron": "0 3 * * *", "type": "pdf", "every": 3}, "may set only"),
    ({"type": "pdf"}, "must set cron"),
])
def test_a_bad_schedule_stops_the_start_with_one_line_naming_it(tmp_path, schedule, says):
    with pytest.raises(ConfigError) as caught:
        create_app({"TESTING": True, "DATABASE_URL": f"sqlite:///{tmp_path}/q.sqlite3",
                    "SECRET_KEY": "x", "BOOTSTRAP_ADMIN": False,
                    "SCHEDULES": {"weekly-report": schedule}})
    message = str(caught.value)
    assert "\n" not in message and message.startswith("SCHEDULES['weekly-report']")
    assert says in message

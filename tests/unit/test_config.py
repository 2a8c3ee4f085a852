"""Configuration: a config that cannot work stops start-up with a clear message."""
from __future__ import annotations

import os
from typing import Any

import pytest

from helpers import basic, quick_hash
from queuelog.server import bootstrap_admin
from queuelog import create_app
from queuelog.server import database_location
from queuelog.model.problems import ConfigError


def build(tmp_path: Any, **config: Any) -> Any:
    """Create an app on a temp SQLite file with extra config."""
    return create_app({"DATABASE_URL": f"sqlite:///{tmp_path}/c.sqlite3", "SECRET_KEY": "x",
                       "BOOTSTRAP_ADMIN": False, **config})


@pytest.mark.parametrize("job_types, message", [
    ({}, "non-empty"),
    ({"a": {"colour": "red"}}, "may set only"),
    ({"a": {"max_retries": "five"}}, "max_retries"),
    ({"a": {"max_retries": -3}}, "max_retries"),
    ({"a": {"max_retries": 2.5}}, "max_retries"),
    ({"a": {"max_payload_bytes": -1}}, "max_payload_bytes"),
    ({"a": {"max_payload_bytes": "big"}}, "max_payload_bytes"),
    ({"a": {"lease_seconds": 0}}, "lease_seconds"),
    ({"": {}}, "type name"),
])
def test_bad_job_types_stop_start_up(tmp_path, job_types, message):
    with pytest.raises(ConfigError, match=message):
        build(tmp_path, JOB_TYPES=job_types)


def test_good_per_type_options_are_used(tmp_path):
    app = build(tmp_path, JOB_TYPES={"a": {"max_retries": 0, "max_payload_bytes": 10,
                                           "lease_seconds": 2.5}})
    try:
        assert app.config["JOB_TYPES"]["a"]["max_retries"] == 0
    finally:
        app.extensions["queuelog.store"].close()


@pytest.mark.parametrize("setting, value, message", [
    ("JOB_TYPES", "{}", "configuration: JOB_TYPES must be a non-empty mapping"),
    ("LEASE_SECONDS", "soon", "configuration: LEASE_SECONDS must be a whole number from 1"),
    ("DEFAULT_MAX_RETRIES", "-1", "DEFAULT_MAX_RETRIES must be a whole number from 0 to 25"),
    ("DEFAULT_MAX_RETRIES", "100", "DEFAULT_MAX_RETRIES must be a whole number from 0 to 25"),
    ("COUNT_CAP", "0", "COUNT_CAP must be a whole number from 1"),
    ("AUTH_CACHE_SECONDS", "-1", "AUTH_CACHE_SECONDS must be a number from 0 to 3600"),
    ("RETENTION_COMPLETED", "7x", "RETENTION_COMPLETED: '7x' is not a duration"),
    ("RETENTION_BATCH", "0", "RETENTION_BATCH must be a whole number from 1"),
    ("RETENTION_INTERVAL_SECONDS", "-1", "RETENTION_INTERVAL_SECONDS: -1 is not a duration"),
    ("RETENTION_INTERVAL_SECONDS", "0", "RETENTION_INTERVAL_SECONDS must be at least one second"),
    ("SQLITE_SYNCHRONOUS", "fast", "configuration: SQLITE_SYNCHRONOUS must be OFF, NORMAL"),
    ("SQLITE_SYNCHRONOUS", "1", "configuration: SQLITE_SYNCHRONOUS must be OFF, NORMAL"),
    ("SQLITE_SYNCHRONOUS", "null", "configuration: SQLITE_SYNCHRONOUS must be OFF, NORMAL"),
    # "no" is a string, and true: the first admin its operator refused was made.
    ("BOOTSTRAP_ADMIN", "no", "configuration: BOOTSTRAP_ADMIN must be true or false, not 'no'"),
    ("BOOTSTRAP_ADMIN", "off", "configuration: BOOTSTRAP_ADMIN must be true or false"),
    ("DATABASE_URL", "not a url", "not an SQLAlchemy URL"),
    ("DATABASE_URL", "postgres://ops:hunter2@db/q", "write postgresql+psycopg://"),
    ("DATABASE_URL", "mysql://ops:hunter2@db/q", "runs on sqlite or postgresql"),
    ("DATABASE_URL", "sqlite:////no/such/dir/q.sqlite3", "the database does not answer"),
    ("DATABASE_URL", "postgresql+psycopg://ops:hunter2@127.0.0.1:1/q",
     "postgresql+psycopg://ops:***@127.0.0.1:1/q: the database does not answer"),
])
def test_the_command_line_names_a_bad_setting_in_one_line(setting, value, message, tmp_path):
    """A config that cannot work: one ``Error:`` line naming it, no traceback, no password."""
    from click.testing import CliRunner

    from queuelog.cli import main
    # A database of the test's own: the default is the checkout's instance/queuelog.sqlite3,
    # the one `queuelog run` serves there (a bad RETENTION_COMPLETED is found after it opens).
    env = {"QUEUELOG_DATABASE_URL": f"sqlite:///{tmp_path}/q.sqlite3",
           f"QUEUELOG_{setting}": value, "QUEUELOG_SECRET_KEY": "x"}
    result = CliRunner().invoke(main, ["keys", "list"], env=env)
    assert result.exit_code == 1
    assert result.output.startswith("Error: configuration: ") and message in result.output
    assert "Traceback" not in result.output and "hunter2" not in result.output


def test_unknown_queuelog_variables_are_warned_about_at_start(tmp_path, monkeypatch, capsys):
    for name in [n for n in os.environ if n.startswith("QUEUELOG_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("QUEUELOG_DATABASE_URL", f"sqlite:///{tmp_path}/q.sqlite3")
    monkeypatch.setenv("QUEUELOG_SECRET_KEY", "x")
    monkeypatch.setenv("QUEUELOG_BOOTSTRAP_ADMIN", "false")
    monkeypatch.setenv("QUEUELOG_LEASE_SECOND", "60")                     # a typo
    monkeypatch.setenv("QUEUELOG_FROBNICATE", "1")                        # nothing like it
    monkeypatch.setenv("QUEUELOG_JOB_TYPES__email", "{}")                 # nested: a setting
    monkeypatch.setenv("QUEUELOG_SESSION_COOKIE_SECURE", "true")          # Flask's own
    for name in ("QUEUELOG_URL", "QUEUELOG_TOKEN", "QUEUELOG_TOKEN_FILE",  # the runner's
                 "QUEUELOG_TEST_DATABASE_URL", "QUEUELOG_JOB_ID",           # tests', jobs'
                 "QUEUELOG_JOB_PARENTS_FILE", "QUEUELOG_PROGRESS_FILE"):    # a job's files
        monkeypatch.setenv(name, "x")
    create_app().extensions["queuelog.store"].close()
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warned == [
        "queuelog: warning: QUEUELOG_FROBNICATE is not a queuelog setting; it is ignored",
        "queuelog: warning: QUEUELOG_LEASE_SECOND is not a queuelog setting; it is ignored "
        "(did you mean QUEUELOG_LEASE_SECONDS?)"]


def test_the_start_says_where_the_database_is_with_the_password_masked(tmp_path, capsys):
    app = create_app({"DATABASE_URL": f"sqlite:///{tmp_path}/q.sqlite3", "SECRET_KEY": "x",
                      "BOOTSTRAP_ADMIN": False})
    app.testing = False  # (the tests' apps stay quiet)
    bootstrap_admin(app)
    assert f"queuelog: database sqlite:///{tmp_path}/q.sqlite3" in capsys.readouterr().err
    app.extensions["queuelog.store"].close()
    shown = database_location("postgresql+psycopg://ops:hunter2@db.internal:5432/queue")
    assert shown == "postgresql+psycopg://ops:***@db.internal:5432/queue"
    assert database_location("sqlite:///relative.sqlite3") == \
        f"sqlite:///{os.path.abspath('relative.sqlite3')}"


def test_a_forged_host_is_refused_when_trusted_hosts_is_set(tmp_path):
    app = build(tmp_path, TRUSTED_HOSTS=["queue.example.com"])
    app.extensions["queuelog.store"].accounts.create_user("ada", quick_hash("pw-123456"), "admin")
    client, ada = app.test_client(), basic("ada", "pw-123456")
    assert client.get("/", headers={"Host": "queue.example.com", **ada}).status_code == 302
    for path in ("/", "/ui/", "/jobs", "/healthz"):
        resp = client.get(path, headers={"Host": "evil.example", **ada})
        assert resp.status_code == 400 and "Location" not in resp.headers, path
        assert resp.mimetype == "application/problem+json"
    assert client.get("/jobs", headers={"Host": "evil.example"}).status_code == 401  # auth first
    (tmp_path / "open").mkdir()
    open_app = build(tmp_path / "open")  # without the setting any Host is served
    open_app.extensions["queuelog.store"].accounts.create_user("ada", quick_hash("pw-123456"),
                                                               "admin")
    assert open_app.test_client().get("/", headers={"Host": "evil.example", **ada}
                                      ).status_code == 302


def test_proxy_count_takes_the_client_address_from_x_forwarded_for(tmp_path):
    """Behind a proxy the throttle must key on the client, and only then trust the header."""
    for count, throttled_apart in ((0, False), (1, True)):
        (tmp_path / str(count)).mkdir()
        app = build(tmp_path / str(count), PROXY_COUNT=count)
        client = app.test_client()
        for _ in range(10):
            client.get("/jobs", headers={**basic("ada", "guess"), "X-Forwarded-For": "10.0.0.1"},
                       environ_base={"REMOTE_ADDR": "127.0.0.1"})
        other = client.get("/jobs", headers={**basic("ada", "guess"),
                                             "X-Forwarded-For": "10.0.0.2"},
                           environ_base={"REMOTE_ADDR": "127.0.0.1"})
        assert other.status_code == (401 if throttled_apart else 429), count
        app.extensions["queuelog.store"].close()


def test_a_secret_key_of_digits_from_the_environment_is_text(tmp_path, monkeypatch):
    """``QUEUELOG_SECRET_KEY=12345678901234567890``: from_prefixed_env read it as JSON, a
    number, and every Basic sign-in then answered 500."""
    for name in [n for n in os.environ if n.startswith("QUEUELOG_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("QUEUELOG_DATABASE_URL", f"sqlite:///{tmp_path}/q.sqlite3")
    monkeypatch.setenv("QUEUELOG_BOOTSTRAP_ADMIN", "false")
    monkeypatch.setenv("QUEUELOG_SECRET_KEY", "12345678901234567890")
    app = create_app(serving=False)
    try:
        assert app.config["SECRET_KEY"] == "12345678901234567890"
        app.extensions["queuelog.store"].accounts.create_user("ada", quick_hash("pw-123456"),
                                                              "admin")
        client, ada = app.test_client(), basic("ada", "pw-123456")
        assert client.get("/jobs", headers=ada).status_code == 200
        assert client.get("/ui/types", headers=ada).status_code == 200  # its CSRF forms
    finally:
        app.extensions["queuelog.store"].close()


def test_a_bytes_secret_key_signs_people_in(tmp_path):
    """instance/config.py may set ``SECRET_KEY = b"..."``, as Flask's own docs do."""
    app = build(tmp_path, SECRET_KEY=b"\x8f\x01 secret bytes")
    try:
        app.extensions["queuelog.store"].accounts.create_user("ada", quick_hash("pw-123456"),
                                                              "admin")
        client, ada = app.test_client(), basic("ada", "pw-123456")
        assert client.get("/jobs", headers=ada).status_code == 200
        assert client.get("/ui/types", headers=ada).status_code == 200
    finally:
        app.extensions["queuelog.store"].close()


def test_a_secret_key_that_is_no_text_stops_start_up(tmp_path):
    with pytest.raises(ConfigError, match="SECRET_KEY must be a string"):
        build(tmp_path, SECRET_KEY=12345)

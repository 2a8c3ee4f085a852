"""The command line: keys create/list/revoke, users create, init-db, purge, and the real script."""
from __future__ import annotations

import base64
import os
import subprocess
import sys
from typing import Any


from helpers import password_clock
from queuelog import create_app


def bearer(token: str) -> dict[str, str]:
    """The Authorization header for a token."""
    return {"Authorization": f"Bearer {token}"}


def create_key(runner: Any, *args: str) -> str:
    """Run ``keys create``; return the token from the last line of stdout."""
    result = runner.invoke(args=["keys", "create", *args])
    assert result.exit_code == 0, result.output
    return result.stdout.strip().splitlines()[-1]


def test_keys_create_prints_a_token_that_works(runner, client):
    token = create_key(runner, "--name", "billing", "--role", "producer", "--types",
                       "email,pdf", "--max-priority", "high")
    assert token.startswith("ql_") and len(token) >= 43
    resp = client.post("/jobs", json={"type": "pdf", "priority": "high"}, headers=bearer(token))
    assert resp.status_code == 201 and resp.json["producer"] == "billing"
    assert client.post("/jobs", json={"type": "sync"}, headers=bearer(token)).status_code == 403
    assert client.post("/jobs", json={"type": "email", "priority": "critical"},
                       headers=bearer(token)).status_code == 403


def test_keys_create_defaults_to_medium_priority(runner, client):
    token = create_key(runner, "--name", "billing", "--role", "producer")
    assert client.post("/jobs", json={"type": "email", "priority": "medium"},
                       headers=bearer(token)).status_code == 201
    assert client.post("/jobs", json={"type": "email", "priority": "high"},
                       headers=bearer(token)).status_code == 403


def test_keys_create_refuses_bad_input(runner, store):
    create_key(runner, "--name", "w", "--role", "worker")
    for args in (["--name", "w", "--role", "worker"],          # active name taken
                 ["--name", "x", "--role", "viewer"],          # not a key role
                 ["--name", "x", "--role", "worker", "--types", "fax"],
                 ["--name", "x", "--role", "producer", "--max-priority", "urgent"],
                 ["--name", "", "--role", "worker"]):
        result = runner.invoke(args=["keys", "create", *args])
        assert result.exit_code != 0, args
        assert "ql_" not in result.stdout
    assert [k.name for k in store.accounts.list_keys()] == ["w"]


def test_keys_list_shows_no_secrets(runner, store):
    token = create_key(runner, "--name", "mailer-1", "--role", "worker", "--types", "email")
    create_key(runner, "--name", "prom", "--role", "metrics")
    runner.invoke(args=["keys", "revoke", "prom"])
    result = runner.invoke(args=["keys", "list"])
    assert result.exit_code == 0
    assert "mailer-1" in result.output and "worker" in result.output and "email" in result.output
    assert "revoked" in result.output and "active" in result.output
    assert token not in result.output and token[3:20] not in result.output
    assert store.accounts.list_keys()[0].token_hash not in result.output


def test_keys_revoke_stops_the_token_at_once(runner, client):
    token = create_key(runner, "--name", "mailer-1", "--role", "worker")
    assert client.post("/jobs/claim", headers=bearer(token)).status_code == 204
    result = runner.invoke(args=["keys", "revoke", "mailer-1"])
    assert result.exit_code == 0
    assert client.post("/jobs/claim", headers=bearer(token)).status_code == 401
    again = runner.invoke(args=["keys", "revoke", "mailer-1"])
    assert again.exit_code != 0
    rotated = create_key(runner, "--name", "mailer-1", "--role", "worker")
    assert client.post("/jobs/claim", headers=bearer(rotated)).status_code == 204


def test_users_create_with_password_stdin(runner, client, store):
    result = runner.invoke(args=["users", "create", "vera", "--role", "viewer",
                                 "--password-stdin"], input="a long password\n")
    assert result.exit_code == 0, result.output
    assert "a long password" not in store.accounts.user("vera").password_hash
    raw = base64.b64encode(b"vera:a long password").decode()
    assert client.get("/jobs", headers={"Authorization": f"Basic {raw}"}).status_code == 200
    for args, stdin in ((["users", "create", "vera", "--role", "viewer", "--password-stdin"],
                         "another password\n"),                       # name taken
                        (["users", "create", "bob", "--role", "viewer", "--password-stdin"],
                         "\n"),                                        # empty password
                        (["users", "create", "bob", "--role", "producer", "--password-stdin"],
                         "a long password\n"),                         # not a user role
                        (["users", "create", "a:b", "--role", "admin", "--password-stdin"],
                         "a long password\n")):                        # ':' breaks Basic
        assert runner.invoke(args=args, input=stdin).exit_code != 0, args
    assert store.accounts.user("bob") is None


def test_users_create_accepts_a_short_password_with_a_warning(runner, client, store):
    result = runner.invoke(args=["users", "create", "sam", "--role", "admin",
                                 "--password-stdin"], input="hunter2\n")
    assert result.exit_code == 0, result.output
    assert "warning" in result.output  # click's runner mixes stderr in
    raw = base64.b64encode(b"sam:hunter2").decode()
    assert client.get("/jobs", headers={"Authorization": f"Basic {raw}"}).status_code == 200


def test_init_db_is_idempotent(runner, store):
    for _ in range(2):
        result = runner.invoke(args=["init-db"])
        assert result.exit_code == 0, result.output
    assert store.list_jobs().jobs == []


def test_purge_deletes_old_finished_jobs(runner, client, producer, worker, admin, clock):
    done = client.post("/jobs", json={"type": "email"}, headers=producer).json
    pending = client.post("/jobs", json={"type": "pdf"}, headers=producer).json
    client.post("/jobs/claim", json={"types": ["email"]}, headers=worker)
    client.post(f"/jobs/{done['id']}/complete", json={"attempt": 1}, headers=worker)
    clock.advance(3 * 86_400)
    result = runner.invoke(args=["purge", "--older-than", "7d"])
    assert result.exit_code == 0 and "0" in result.output
    clock.advance(5 * 86_400)
    result = runner.invoke(args=["purge", "--older-than", "7d", "--status", "completed"])
    assert result.exit_code == 0 and "1" in result.output
    assert client.get(f"/jobs/{done['id']}", headers=admin).status_code == 404
    assert client.get(f"/jobs/{pending['id']}", headers=admin).status_code == 200
    bad = runner.invoke(args=["purge", "--older-than", "soon"])
    assert bad.exit_code != 0


def test_purge_refuses_a_duration_past_ten_thousand_years_as_a_usage_error(
        runner, client, producer, worker, admin, store):
    """``--older-than 999999999w`` (19 million years) passed the parser, and its cutoff in
    microseconds overflowed the database's integer: a traceback (SQLite's OverflowError,
    PostgreSQL's bigint out of range). Now a usage error, exit 2, nothing purged; the
    longest duration taken still runs."""
    done = client.post("/jobs", json={"type": "email"}, headers=producer).json
    client.post("/jobs/claim", json={"types": ["email"]}, headers=worker)
    client.post(f"/jobs/{done['id']}/complete", json={"attempt": 1}, headers=worker)
    events = len(store.audit_events(limit=50)[0])
    for args in (["--older-than", "999999999w"], ["--older-than", "999999999d", "--dry-run"],
                 ["--audit-older-than", "999999999w"], ["--older-than", "521550w"]):
        result = runner.invoke(args=["purge", *args])
        assert result.exit_code == 2, (args, result.output)
        assert "longer than 10000 years" in result.output, args
    assert len(store.audit_events(limit=50)[0]) == events  # nothing was done
    for args in (["--older-than", "521000w"], ["--audit-older-than", "521000w"]):
        result = runner.invoke(args=["purge", *args])
        assert result.exit_code == 0, (args, result.output)
    assert client.get(f"/jobs/{done['id']}", headers=admin).status_code == 200


def test_the_console_script_creates_a_working_key(tmp_path):
    db = f"sqlite:///{tmp_path}/cli.sqlite3"
    env = {**os.environ, "QUEUELOG_DATABASE_URL": db, "QUEUELOG_SECRET_KEY": "cli-test"}
    script = os.path.join(os.path.dirname(sys.executable), "queuelog")
    command = [script] if os.path.exists(script) else ["queuelog"]
    proc = subprocess.run([*command, "keys", "create", "--name", "ops", "--role", "admin"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    token = proc.stdout.strip().splitlines()[-1]
    assert token.startswith("ql_") and token not in proc.stderr
    app = create_app({"DATABASE_URL": db, "SECRET_KEY": "x", "BOOTSTRAP_ADMIN": False})
    try:
        client = app.test_client()
        assert client.get("/metrics", headers=bearer(token)).status_code == 200
        assert client.get("/metrics", headers=bearer(token + "x")).status_code == 401
    finally:
        app.extensions["queuelog.store"].close()


def test_first_admin_is_printed_by_init_db_not_by_other_commands(tmp_path):
    env = {**os.environ, "QUEUELOG_DATABASE_URL": f"sqlite:///{tmp_path}/first.sqlite3",
           "QUEUELOG_SECRET_KEY": "cli-test"}
    script = os.path.join(os.path.dirname(sys.executable), "queuelog")
    command = [script] if os.path.exists(script) else ["queuelog"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*command, *args], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc

    assert "password" not in run("--help").stderr
    assert "password" not in run("keys", "create", "--name", "w", "--role", "worker").stderr
    first = run("init-db").stderr
    assert "created user 'admin' with password: " in first
    assert "password" not in run("init-db").stderr  # shown once only


def test_db_upgrade_of_a_new_database_creates_the_first_admin_as_init_db_does(tmp_path):
    """``init-db`` is ``db upgrade`` (CONTRACT), and a new schema gets user ``admin``, its
    password printed once: ``db upgrade`` left a new database without any user."""
    env = {**os.environ, "QUEUELOG_DATABASE_URL": f"sqlite:///{tmp_path}/up.sqlite3",
           "QUEUELOG_SECRET_KEY": "cli-test"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "queuelog", *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc

    first = run("db", "upgrade")
    assert "upgraded from no revision" in first.stdout
    assert "created user 'admin' with password: " in first.stderr
    assert "password" not in run("db", "upgrade").stderr  # shown once only
    assert "admin" in run("users", "list").stdout.split()


def test_a_password_that_is_no_utf8_is_refused_in_one_line(tmp_path):
    """``users create --password-stdin`` fed bytes that are not UTF-8: one ``Error:`` line
    and exit 1, not a UnicodeEncodeError traceback from the hash."""
    env = {**os.environ, "QUEUELOG_DATABASE_URL": f"sqlite:///{tmp_path}/pw.sqlite3",
           "QUEUELOG_SECRET_KEY": "cli-test", "QUEUELOG_BOOTSTRAP_ADMIN": "false",
           "PYTHONIOENCODING": "utf-8:surrogateescape"}  # how a C-locale shell hands them on
    for args in (["users", "create", "ada", "--role", "viewer", "--password-stdin"],
                 ["users", "set-password", "bob", "--password-stdin"]):
        if args[1] == "set-password":
            subprocess.run([sys.executable, "-m", "queuelog", "users", "create", "bob",
                            "--role", "viewer", "--password-stdin"], env=env, cwd=tmp_path,
                           input=b"a-good-password-1\n", capture_output=True, timeout=60,
                           check=True)
        proc = subprocess.run([sys.executable, "-m", "queuelog", *args], env=env,
                              cwd=tmp_path, input=b"pw\xff\xfe-long-enough-1\n",
                              capture_output=True, timeout=60)
        err = proc.stderr.decode("utf-8", "replace")
        assert proc.returncode == 1, err
        assert "Traceback" not in err and "Error: The password is not valid UTF-8" in err


def test_a_name_that_is_no_utf8_is_no_key_and_no_user(tmp_path):
    """``keys revoke``, ``users delete`` and ``users set-password`` given argv bytes that are
    not UTF-8 (lone surrogates in Python): "no such" in one line, not a driver traceback."""
    env = {**os.environ, "QUEUELOG_DATABASE_URL": f"sqlite:///{tmp_path}/n.sqlite3",
           "QUEUELOG_SECRET_KEY": "cli-test", "QUEUELOG_BOOTSTRAP_ADMIN": "false"}
    for args, said in (([b"keys", b"revoke"], "No active key named"),
                       ([b"users", b"delete"], "No user named"),
                       ([b"users", b"set-password"], "No user named")):
        proc = subprocess.run([sys.executable, "-m", "queuelog", *args, b"ada\xff"], env=env,
                              cwd=tmp_path, input=b"a-good-password-1\n", capture_output=True,
                              timeout=60)
        err = proc.stderr.decode("utf-8", "replace")
        assert proc.returncode == 1, err
        assert "Traceback" not in err and f"Error: {said} " in err


def test_run_refuses_a_port_outside_0_to_65535_in_one_line(tmp_path):
    """``queuelog run --port P``: a port no socket can have is a usage error (exit 2), not a
    traceback from bind() (-1) nor a server on another port (99999 served on 34463)."""
    env = {**os.environ, "QUEUELOG_DATABASE_URL": f"sqlite:///{tmp_path}/run.sqlite3",
           "QUEUELOG_SECRET_KEY": "cli-test"}
    for port in ("-1", "65536", "99999"):
        proc = subprocess.run([sys.executable, "-m", "queuelog", "run", "--port", port],
                              env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 2, (port, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert "Invalid value for '--port'" in proc.stderr and "0<=x<=65535" in proc.stderr
        assert "password" not in proc.stderr  # refused before anything was set up


def test_init_db_reports_what_it_did_on_a_new_database(tmp_path):
    """A new database is reported as upgraded from no revision, not as already at the head."""
    from queuelog.server.store import migrate
    env = {**os.environ, "QUEUELOG_DATABASE_URL": f"sqlite:///{tmp_path}/new.sqlite3",
           "QUEUELOG_SECRET_KEY": "cli-test"}

    def init_db() -> str:
        proc = subprocess.run([sys.executable, "-m", "queuelog", "init-db"], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    head = migrate.head()
    assert init_db() == f"The database is ready: upgraded from no revision to {head}."
    assert init_db() == f"The database is ready: already at {head} (the newest revision)."


def test_users_list_delete_and_set_password(runner, client, store):
    """People can be listed, locked out and given a new password from the command line."""
    now = password_clock(client.application)  # the password cache's clock
    ttl = client.application.config["AUTH_CACHE_SECONDS"] + 0.01
    for name, role in (("vera", "viewer"), ("olga", "admin")):
        assert runner.invoke(args=["users", "create", name, "--role", role, "--password-stdin"],
                             input="first password\n").exit_code == 0
    listed = runner.invoke(args=["users", "list"])
    assert listed.exit_code == 0
    assert [line.split() for line in listed.output.splitlines()[1:]] == [
        ["olga", "admin"], ["vera", "viewer"]]
    assert "pbkdf2" not in listed.output and "scrypt" not in listed.output  # no hashes

    def status(name: str, password: str) -> int:
        raw = base64.b64encode(f"{name}:{password}".encode()).decode()
        return client.get("/jobs", headers={"Authorization": f"Basic {raw}"}).status_code

    assert status("vera", "first password") == 200
    changed = runner.invoke(args=["users", "set-password", "vera", "--password-stdin"],
                            input="second password\n")
    assert changed.exit_code == 0, changed.output
    now[0] += ttl  # past AUTH_CACHE_SECONDS: the cached check of the old password ends
    assert status("vera", "first password") == 401
    assert status("vera", "second password") == 200

    assert status("olga", "first password") == 200
    assert runner.invoke(args=["users", "delete", "olga"]).exit_code == 0
    now[0] += ttl
    assert status("olga", "first password") == 401
    assert store.accounts.user("olga") is None
    for args in (["users", "delete", "olga"], ["users", "delete", "nobody"]):
        assert runner.invoke(args=args).exit_code != 0, args
    missing = runner.invoke(args=["users", "set-password", "nobody", "--password-stdin"],
                            input="x password\n")
    assert missing.exit_code != 0 and "No user named 'nobody'" in missing.output
    empty = runner.invoke(args=["users", "set-password", "vera", "--password-stdin"], input="\n")
    assert empty.exit_code != 0
    assert status("vera", "second password") == 200


def _files_under(root: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root)
            for d, _, files in os.walk(root) for f in files + [""]} - {"."}


def _bare_install(tmp_path: Any) -> tuple[str, dict[str, str]]:
    """A copy of the package alone (as on a worker host) and an environment that finds it."""
    import shutil
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    site = tmp_path / "site"
    shutil.copytree(os.path.join(root, "queuelog"), site / "queuelog",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUELOG_", "FLASK_"))}
    env.update(PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1")
    return str(site), env


def test_help_and_version_load_no_app_and_create_no_file(tmp_path):
    """``--help`` and ``--version`` are queuelog's own group: no app, no instance, no database."""
    site, env = _bare_install(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    before = _files_under(str(tmp_path))

    def run(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "queuelog", *args], env=env, cwd=cwd,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert "password" not in proc.stderr
        return proc.stdout

    listed = run("--help")
    for command in ("init-db", "keys", "users", "purge", "run", "work"):
        assert f"\n  {command} " in listed, command
    for flask_only in ("routes", "shell", "--env-file", "--app"):
        assert flask_only not in listed, flask_only
    assert "Usage: queuelog " in listed
    assert run("--version").strip() == f"queuelog, version {_version()}"
    assert "Create a key" in run("keys", "--help")
    assert "--token-file" in run("work", "--help")
    assert _files_under(str(tmp_path)) == before
    assert not os.path.exists(os.path.join(site, "instance"))


def _version() -> str:
    from importlib.metadata import version
    return version("queuelog")


def test_flask_app_cli_has_every_command(app):
    """``flask --app app NAME`` reaches the same commands as ``queuelog NAME``."""
    import click

    from queuelog.cli import SERVER_COMMANDS, main
    from queuelog.server.commands import server
    assert set(server.commands) == set(SERVER_COMMANDS)
    ctx = click.Context(main)
    names = set(main.list_commands(ctx)) - {"run"}
    assert names == set(app.cli.commands) & names and "work" in names
    for name in names:
        assert app.cli.commands[name] is main.get_command(ctx, name)


def test_the_help_lists_each_server_command_with_its_own_short_help():
    """``queuelog --help`` names the server commands without loading them: the same words."""
    from queuelog.cli import short_help
    from queuelog.server.commands import server
    for name, command in server.commands.items():
        for width in (30, 65, 200):  # the terminal's width decides where it is cut
            assert short_help(name, width) == command.get_short_help_str(width), (name, width)


def test_work_help_and_version_import_no_flask_and_no_sqlalchemy(tmp_path):
    """The console script loads the server's commands only when one of them is asked for."""
    site, env = _bare_install(tmp_path)
    probe = ("import sys, runpy; sys.argv = ['queuelog', *sys.argv[1:]]\n"
             "try:\n    runpy.run_module('queuelog', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('flask', "
             "'sqlalchemy') or m.startswith('queuelog.server')), file=sys.stderr)")
    for args in (["work", "--help"], ["--help"], ["--version"]):
        proc = subprocess.run([sys.executable, "-c", probe, *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip(), args  # it did print the help or the version
        assert proc.stderr.strip().splitlines()[-1] == "[]", (args, proc.stderr)

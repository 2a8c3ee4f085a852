"""The server: ``create_app`` builds config, store, auth, blueprints, dashboard and commands."""
from __future__ import annotations

import gc
import os
import secrets
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported in create_app: ``queuelog.client`` must not pull Flask in
    from flask import Flask

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # queuelog/
# The source tree keeps the pages in the top-level templates/; a wheel carries the same
# files inside the package, as queuelog/templates (pyproject.toml maps them there).
TEMPLATES = os.path.join(_HERE, "templates")
if not os.path.isdir(TEMPLATES):
    TEMPLATES = os.path.join(os.path.dirname(_HERE), "templates")


def create_app(test_config: dict[str, Any] | None = None, *, serving: bool = True) -> Flask:
    """Build the app: config, store, auth, blueprints, dashboard, CLI.

    ``serving`` False (the ``queuelog`` command line) leaves creating the first admin to
    the commands that start a server or set up the database, so ``queuelog --help`` or
    ``keys create`` never prints a password where nobody expects it.
    """
    from queuelog.server.app import QueuelogFlask
    app = QueuelogFlask(__name__, instance_relative_config=True, template_folder=TEMPLATES)
    _configure(app, test_config)
    _install(app, serving=serving)
    if serving:
        bootstrap_admin(app)
        warm_up(app)
        from queuelog.server import schedules
        schedules.start(app)  # after gunicorn's fork: create_app runs in each worker
    return app


def _configure(app: Flask, test_config: dict[str, Any] | None) -> None:
    """The instance folder, the config, and the proxy headers trusted."""
    from queuelog.server import config, instance
    # Private before anything is written into it (the secret key, the database).
    os.makedirs(app.instance_path, mode=instance.FOLDER_MODE, exist_ok=True)
    config.load(app, test_config)
    instance.protect(app.instance_path, app.config["DATABASE_URL"])
    if app.config["PROXY_COUNT"]:
        # Behind N proxies the client's address (the sign-in throttle's key) and scheme come
        # from X-Forwarded-For/-Proto; without them those headers are ignored, as anyone can
        # send them. The Host stays the one the proxy passed on (TRUSTED_HOSTS checks it).
        from werkzeug.middleware.proxy_fix import ProxyFix
        count = app.config["PROXY_COUNT"]
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=count, x_proto=count)  # type: ignore


def _install(app: Flask, *, serving: bool) -> None:
    """Errors, store, metrics, auth and long polls; then the routes, dashboard, commands.
    A server waits for a database that is restarting; a command says at once that it does
    not answer."""
    from queuelog.server import (auth, commands, errors, jsonout, longpoll, metrics,
                                 retention, schedules, tracing, ui, wakeups)
    from queuelog.server import db
    from queuelog.server.api import admin, audit, producer, read, types, worker, workers
    from queuelog.server.api import schedules as schedules_api
    from queuelog.server.requests.parse import JobIdConverter
    app.url_map.converters["job_id"] = JobIdConverter
    jsonout.init_app(app)
    errors.init_app(app)
    db.init_app(app, waiting=serving)
    for part in (metrics, auth, longpoll, wakeups, tracing):
        part.init_app(app)
    for blueprint in (producer.bp, worker.bp, admin.bp, read.bp, types.bp, audit.bp,
                      workers.bp, schedules_api.bp):
        app.register_blueprint(blueprint)
    schedules.init_app(app)
    ui.init_app(app)
    commands.init_app(app)
    retention.init_app(app)


def bootstrap_admin(app: Flask) -> str | None:
    """Say where the database is (and whether the metrics count per worker); create user
    ``admin`` if no user exists, print it once."""
    if not app.testing:
        print(f"queuelog: database {database_location(app.config['DATABASE_URL'])}",
              file=sys.stderr, flush=True)
        from queuelog.server.metrics import per_worker_warning
        warning = per_worker_warning(os.environ)
        if warning:
            print(warning, file=sys.stderr, flush=True)
    if not app.config["BOOTSTRAP_ADMIN"]:
        return None
    from queuelog.server.auth import hash_password
    from queuelog.server.db import get_store
    with app.app_context():
        accounts = get_store().accounts
        if accounts.has_users():
            return None
        password = secrets.token_urlsafe(18)
        if not accounts.create_first_user("admin", hash_password(password), "admin"):
            return None  # another process won the race and printed its own
    print(f"queuelog: created user 'admin' with password: {password}\n"
          "queuelog: it is shown only this once; sign in at /ui/ and keep it safe.",
          file=sys.stderr, flush=True)
    return password


def warm_up(app: Flask) -> None:
    """Build what the first requests would wait for, then take the start-up heap out of GC."""
    if app.testing:
        return  # a test's app compiles them when, and if, one of its requests needs them
    # A fresh server's first validation compiles every declaration with fastjsonschema,
    # most of a cold first request's time; with two app servers, the one that takes the
    # enqueues may never have validated a body when the first job comes.
    from queuelog.server.requests.check import validate
    with app.app_context():
        validate("ClaimRequest", {})  # the first validation compiles every declaration
    # ~100,000 objects live as long as the process (modules, the app, compiled statements
    # and validators): every full collection would walk them all, a pause inside whichever
    # request it lands in; frozen, they are left out of the collector's walks.
    gc.collect()
    gc.freeze()


def database_location(url: str) -> str:
    """The database URL for a log line: its password masked, a SQLite path made absolute."""
    from sqlalchemy.engine import make_url
    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - the engine reports a bad URL, with its reason
        return "(an unreadable DATABASE_URL)"
    if parsed.get_backend_name() == "sqlite" and parsed.database \
            and parsed.database != ":memory:" and not parsed.database.startswith("file:"):
        parsed = parsed.set(database=os.path.abspath(parsed.database))
    return parsed.render_as_string(hide_password=True)

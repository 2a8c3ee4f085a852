"""The app's store (flaskr's db.py): made from the config at start, found per request."""
from __future__ import annotations

import atexit
import time
import weakref
from typing import Any

from flask import Flask, current_app
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, OperationalError

from queuelog.model.limits import from_options
from queuelog.model.problems import ConfigError
from queuelog.server.store import Store
from queuelog.server.store.engine import upgrade_on_start


def init_app(app: Flask, *, waiting: bool = False) -> Store:
    """Create the app's store from its config and create the schema; ``waiting`` (a
    server starting): a database that does not answer is tried again for the backend's
    ``boot_wait_seconds`` (PostgreSQL restarting) before that stops the start."""
    url = app.config["DATABASE_URL"]
    try:
        store = Store(url, sqlite_synchronous=app.config["SQLITE_SYNCHRONOUS"],
                      backoff_base=float(app.config["RETRY_BACKOFF_SECONDS"]),
                      backoff_cap=float(app.config["RETRY_BACKOFF_MAX_SECONDS"]),
                      lease_seconds=float(app.config["LEASE_SECONDS"]),
                      write_wait=float(app.config["WRITE_LOCK_WAIT_SECONDS"]),
                      type_leases={name: float(opts["lease_seconds"])
                                   for name, opts in app.config["JOB_TYPES"].items()
                                   if "lease_seconds" in opts},
                      # checked at config load (config.type_limits): valid here
                      type_limits={name: from_options(opts)
                                   for name, opts in app.config["JOB_TYPES"].items()})
    except (ArgumentError, ImportError) as exc:  # not a URL, or a driver that is not installed
        raise ConfigError(f"DATABASE_URL {_shown(url)} cannot be used: {exc}") from exc
    _reach(app, store, url, store.backend.boot_wait_seconds if waiting else 0.0)
    app.extensions["queuelog.store"] = store
    # A clean stop (a gunicorn worker's, the dev server's) closes the store: SQLite's WAL is
    # copied back and truncated, not left to grow from at the next start.
    atexit.register(_close_at_exit, weakref.ref(store))
    return store


def _close_at_exit(ref: "weakref.ReferenceType[Store]") -> None:
    store = ref()
    if store is not None:
        store.close()


def _reach(app: Flask, store: Store, url: str, wait_seconds: float) -> None:
    """Create (or, under ``queuelog db``, ping) the schema; a database that does not answer
    is tried again, with a growing pause, until ``wait_seconds`` have passed (ConfigError)."""
    deadline = time.monotonic() + wait_seconds
    pause = 0.1
    while True:
        try:
            if upgrade_on_start():
                store.create_schema()
            else:
                store.ping()  # ``queuelog db``: the command reads or upgrades the schema
            return
        except OperationalError as exc:
            answer = str(exc.orig).strip()
            if time.monotonic() + pause > deadline:
                store.close()
                raise ConfigError(f"DATABASE_URL {_shown(url)}: the database does not "
                                  f"answer: {answer}") from exc
            # A gunicorn worker (re)booting while the database restarts: exiting would make
            # gunicorn stop every worker ("Worker failed to boot"), so wait for it instead.
            app.logger.warning("DATABASE_URL %s: the database does not answer (%s); trying "
                               "again in %.1f s", _shown(url), answer.partition("\n")[0], pause)
            time.sleep(pause)
            pause = min(2 * pause, 2.0)
        except DatabaseError as exc:
            # An answer, but no use: a file that is not SQLite ("file is not a database"),
            # a PostgreSQL role without the rights the schema needs. Waiting would not help.
            store.close()
            answer = str(exc.orig).strip().partition("\n")[0]
            raise ConfigError(f"DATABASE_URL {_shown(url)} cannot be used: {answer}") from exc


def _shown(url: Any) -> str:
    # Never print a password from the URL into a terminal or a server log.
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not parseable: nothing in it can be told apart as a password
        return "(not an SQLAlchemy URL)"


def get_store() -> Store:
    """The current app's store."""
    return current_app.extensions["queuelog.store"]  # type: ignore[no-any-return]

"""The server's commands (``init-db``, ``db``, ``purge``, ``audit``, ``schedules``, ``backup``,
``run``, and ``keys`` and ``users`` from ``access_commands.py``), on ``app.cli`` and, loaded
lazily, in the ``queuelog`` console script.

A command that needs the app (config, database) takes ``@with_appcontext`` (an ``AppGroup``
gives it to its subcommands): the app is created only when such a command runs. ``bind``
gives the console script's context the ``ScriptInfo`` that ``with_appcontext`` loads it from.
"""
from __future__ import annotations

import copy
import json
from typing import Any

import click
from flask import Flask
from flask.cli import AppGroup, ScriptInfo, run_command, with_appcontext

from queuelog.model.jobs import FINISHED, Status, isoformat
from queuelog.model.problems import ConfigError, Conflict
from queuelog.server import actions, retention
from queuelog.server.access_commands import keys, users
from queuelog.server.errors import is_unavailable, one_line


def parse_duration(text: str) -> int:
    """``30s``, ``15min``, ``12h``, ``7d``, ``2w`` (or bare seconds) as seconds."""
    try:
        return retention.parse_duration(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--older-than") from None


def _create_app() -> Flask:
    from queuelog import create_app
    try:
        return create_app(serving=False)
    except ConfigError as exc:  # one line that names the setting, not a traceback
        raise click.ClickException(f"configuration: {exc}") from None


def bind(ctx: click.Context) -> None:
    """Give the console script's context what ``with_appcontext`` loads the app from."""
    if not isinstance(ctx.obj, ScriptInfo):
        ctx.obj = ScriptInfo(create_app=_create_app, set_debug_flag=False)


def explain(exc: Exception) -> Exception:
    """A database that does not answer as one line (exit 1); any other error as it is."""
    if not is_unavailable(exc):
        return exc
    return click.ClickException(
        f"the database is unavailable ({one_line(exc)}); try again when it is "
        "back (a change may or may not have been made)")


# The commands' home: the console script resolves names here, app.cli gets copies.
server = click.Group("queuelog-server")


@server.command("init-db")
@click.pass_context
def init_db(ctx: click.Context) -> None:
    """Create or upgrade the schema (also done on every start); same as ``db upgrade``."""
    # As for `db upgrade`: loading the app must not upgrade first, or a new database
    # would be reported "already at" the head that this very command created.
    ctx.with_resource(actions.upgrade_deferred())
    _init_db_in_app()


@with_appcontext
def _init_db_in_app() -> None:
    _upgrade()
    _first_admin()


def _first_admin() -> None:
    """Create and print user ``admin`` when no user exists (CONTRACT: when the schema is
    created), as ``init-db`` and ``db upgrade`` both create it."""
    from flask import current_app

    from queuelog.server import bootstrap_admin
    bootstrap_admin(current_app._get_current_object())  # type: ignore[attr-defined]


@server.group("db", cls=AppGroup)
def db() -> None:
    """Schema revisions (Alembic): upgrade to the newest, or show the current one."""
    # Load the app (when the subcommand does) without the start-up upgrade: `db current`
    # shows the revision as found, and `db upgrade` reports what it did.
    click.get_current_context().with_resource(actions.upgrade_deferred())


@db.command("upgrade")
def db_upgrade() -> None:
    """Migrate the schema to the newest revision (servers also do it when they start)."""
    _upgrade()
    # `init-db` is `db upgrade` (CONTRACT): a new database gets its first admin here too,
    # else it had none (and no password printed) until a server started. Where people
    # exist it says nothing more than before (no "database ..." line).
    if not actions.list_users(actions.CLI):
        _first_admin()


@db.command("current")
def db_current() -> None:
    """Print the database's schema revision."""
    revision, newest = actions.schema_revision(actions.CLI)
    shown = revision or "none (an empty database, or one made before revisions)"
    click.echo(f"{shown} (head)" if revision == newest else f"{shown} (head is {newest})")


def _upgrade() -> None:
    try:
        before, after = actions.upgrade_schema(actions.CLI)
    except ConfigError as exc:  # a newer release's schema: one line, not a traceback
        raise click.ClickException(str(exc)) from None
    if before == after:
        click.echo(f"The database is ready: already at {after} (the newest revision).")
    else:
        click.echo(f"The database is ready: upgraded from {before or 'no revision'} to {after}.")


# Keys and users: their own module (access_commands.py), on the same group.
server.add_command(keys)
server.add_command(users)


@server.command("purge")
@click.option("--older-than", "older_than", default=None,
              help="Delete jobs finished longer ago than this: 30s, 15min, 12h, 7d, 2w "
                   "(m alone is refused: minutes or months?).")
@click.option("--status", "statuses", multiple=True,
              type=click.Choice([s.value for s in FINISHED]),
              help="Only these finished statuses (repeatable); default all finished.")
@click.option("--audit-older-than", "audit_older_than", default=None,
              help="Also delete audit events older than this (the only way they go).")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@with_appcontext
def purge(older_than: str | None, statuses: tuple[str, ...],
          audit_older_than: str | None, dry_run: bool) -> None:
    """Delete finished jobs past retention, with their history, in small batches."""
    if older_than is None and audit_older_than is None:
        raise click.UsageError("Give --older-than, --audit-older-than or both.")
    audit_seconds = None
    if audit_older_than is not None:
        try:
            audit_seconds = retention.parse_duration(audit_older_than)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--audit-older-than") from None
    if older_than is not None:
        seconds = parse_duration(older_than)
        chosen = [Status(s) for s in statuses] or list(FINISHED)
        if dry_run:
            count = actions.count_purgeable(actions.CLI, seconds, chosen)
            click.echo(f"Would delete {count} job(s); nothing deleted (--dry-run).")
        else:
            deleted = actions.purge(actions.CLI, seconds, chosen)
            click.echo(f"Deleted {deleted} job(s).")
    if audit_seconds is not None:
        if dry_run:
            click.echo("Audit events are not counted by --dry-run; nothing deleted.")
        else:
            click.echo(f"Deleted {actions.purge_audit(actions.CLI, audit_seconds)} "
                       "audit event(s).")


@server.command("audit")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000),
              help="How many of the newest events to show.")
@with_appcontext
def audit(limit: int) -> None:
    """Show the newest audit events: who changed what, newest first."""
    events, _ = actions.audit_events(actions.CLI, limit=limit)
    click.echo(f"{'AT':<28} {'ACTOR':<20} {'ACTION':<14} {'TARGET':<20} DETAIL")
    for e in events:
        detail = json.dumps(e.detail, separators=(",", ":"), sort_keys=True) if e.detail else ""
        click.echo(f"{isoformat(e.at):<28} {e.actor:<20} {e.action:<14} "
                   f"{e.target or '-':<20} {detail}")


@server.command("schedules")
@with_appcontext
def schedules_command() -> None:
    """List the schedules (SCHEDULES) with their next run, last run and last job."""
    from queuelog.server import schedules
    defined = schedules.defined()
    if not defined:
        click.echo("No schedules are configured (SCHEDULES).")
        return
    now = actions.now()
    click.echo(f"{'NAME':<20} {'CRON':<16} {'TIMEZONE':<16} {'TYPE':<10} {'STATE':<7} "
               f"{'NEXT RUN':<28} {'LAST RUN':<28} LAST JOB")
    for state in actions.schedule_states(actions.CLI, list(defined)):
        s = defined[state.name]
        last = "-" if state.last_job is None else \
            f"#{state.last_job[0]} {state.last_job[1].value}"
        click.echo(f"{s.name:<20} {s.cron_text:<16} {s.timezone:<16} {s.type:<10} "
                   f"{'paused' if state.paused else 'active':<7} "
                   f"{isoformat(s.cron.next_after(now)) or '-':<28} "
                   f"{isoformat(state.last_run_at) or '-':<28} {last}")


@server.command("backup")
@click.argument("path", type=click.Path(dir_okay=False))
@with_appcontext
def backup(path: str) -> None:
    """Copy the live SQLite database to PATH (consistent while the server runs; mode 0600)."""
    try:
        done = actions.backup(actions.CLI, path)
    except Conflict as exc:
        raise click.ClickException(exc.detail) from None
    click.echo(f"Backed up {done.jobs} job(s) to {done.path} ({done.bytes:,} bytes).")


def init_app(app: Flask) -> None:
    """Register the commands on ``app.cli`` (so ``flask --app app ...`` has them too)."""
    from queuelog.worker.command import work
    for name, command in server.commands.items():
        if name != "run":  # ``flask run`` stays Flask's; app.py creates the first admin
            app.cli.add_command(command)
    app.cli.add_command(work)


def _run_with_first_admin(*args: Any, **kwargs: Any) -> Any:
    # Flask's own ``run``, after creating the first admin: "printed once at first start".
    from queuelog.server import bootstrap_admin, schedules
    app = click.get_current_context().ensure_object(ScriptInfo).load_app()
    bootstrap_admin(app)
    schedules.start(app)  # the development server makes ticks too
    return run_command.callback(*args, **kwargs)  # type: ignore[misc]


def _run_params() -> list[click.Parameter]:
    """Flask's ``run`` options, ``--port`` held to a TCP port (0: any free one).

    Flask's is a plain int: 99999 was served on 99999 % 65536 without a word, and -1 ended
    in a traceback from ``bind()`` after the first admin had been printed.
    """
    params = []
    for param in run_command.params:
        if param.name == "port":
            param = copy.copy(param)
            param.type = click.IntRange(0, 65_535)
        params.append(param)
    return params


server.add_command(click.Command("run", callback=_run_with_first_admin,
                                 params=_run_params(), help=run_command.help,
                                 short_help=run_command.short_help))

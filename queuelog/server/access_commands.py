"""The ``keys`` and ``users`` commands: API keys and the people who sign in, from the
command line (``commands.py`` puts both groups on the server's commands)."""
from __future__ import annotations

import sys

import click
from flask.cli import AppGroup

from queuelog.model.jobs import Priority, isoformat
from queuelog.model.problems import Conflict
from queuelog.server import actions
from queuelog.server.auth import KEY_ROLES, USER_ROLES, hash_password
from queuelog.server.requests.parse import is_name


# AppGroup/with_appcontext: app.test_cli_runner() invokes app.cli directly, where no
# FlaskGroup pushes the app context for plain click commands.
@click.group("keys", cls=AppGroup)
def keys() -> None:
    """Create, list and revoke API keys."""


@keys.command("create")
@click.option("--name", required=True, help="The key's name; for a worker, its identity.")
@click.option("--role", required=True, type=click.Choice(KEY_ROLES))
@click.option("--types", default=None, help="Comma-separated job types this key may use.")
@click.option("--max-priority", default="medium", show_default=True,
              type=click.Choice([p.label for p in Priority]),
              help="Highest priority a producer key may enqueue at.")
def keys_create(name: str, role: str, types: str | None, max_priority: str) -> None:
    """Create a key and print its token (last line); the token is not shown again."""
    from flask import current_app
    name = name.strip()
    if not is_name(name):
        raise click.BadParameter("must be 1 to 100 printable characters", param_hint="--name")
    type_list = None
    if types is not None:
        type_list = [t.strip() for t in types.split(",") if t.strip()]
        unknown = sorted(set(type_list) - set(current_app.config["JOB_TYPES"]))
        if unknown or not type_list:
            raise click.BadParameter(f"unknown job types: {', '.join(unknown) or '(none given)'}",
                                     param_hint="--types")
    try:
        key, token = actions.create_key(actions.CLI, name, role, types=type_list,
                                        max_priority=int(Priority.from_label(max_priority)))
    except Conflict as exc:
        raise click.ClickException(exc.detail) from None
    click.echo(f"Created {key.role} key {key.name!r}. Its token, shown only now:", err=True)
    click.echo(token)


@keys.command("list")
def keys_list() -> None:
    """List keys without their secrets."""
    rows = actions.list_keys(actions.CLI)
    people = {u.username for u in actions.list_users(actions.CLI)}
    click.echo(f"{'NAME':<24} {'ROLE':<9} {'TYPES':<20} {'MAX PRIORITY':<13} "
               f"{'CREATED':<28} STATUS")
    for k in rows:
        status = "active" if k.revoked_at is None else f"revoked {isoformat(k.revoked_at)}"
        if k.revoked_at is None and k.name in people:  # one name space: the key is refused
            status = "refused: a user has this name; revoke it, create it under another"
        click.echo(f"{k.name:<24} {k.role:<9} {','.join(k.types or ['*']):<20} "
                   f"{_priority_column(k.role, k.max_priority):<13} "
                   f"{isoformat(k.created_at):<28} {status}")


def _priority_column(role: str, max_priority: int) -> str:
    # Only producer keys are held to a ceiling; for the others the stored value means nothing.
    return Priority.from_value(max_priority).label if role == "producer" else "-"


@keys.command("revoke")
@click.argument("name")
def keys_revoke(name: str) -> None:
    """Revoke the active key NAME; it stops working at once."""
    # No key has a name that is_name refuses (keys create checks it); looked up, one that is
    # not UTF-8 (lone surrogates from the shell) was a traceback from the database driver.
    if not is_name(name) or not actions.revoke_key(actions.CLI, name):
        raise click.ClickException(f"No active key named {name!r}.")
    click.echo(f"Revoked key {name!r}.")


@click.group("users", cls=AppGroup)
def users() -> None:
    """Manage the people who sign in to the dashboard."""


@users.command("create")
@click.argument("username")
@click.option("--role", required=True, type=click.Choice(USER_ROLES))
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
def users_create(username: str, role: str, password_stdin: bool) -> None:
    """Add a person who signs in with USERNAME and a password."""
    if not is_name(username) or ":" in username:
        raise click.BadParameter("must be 1 to 100 printable characters without ':'",
                                 param_hint="USERNAME")
    password = _read_password(password_stdin)
    try:
        actions.create_user(actions.CLI, username, hash_password(password), role)
    except Conflict as exc:
        raise click.ClickException(exc.detail) from None
    click.echo(f"Created {role} {username!r}.")


@users.command("list")
def users_list() -> None:
    """List the people who may sign in, without their passwords."""
    click.echo(f"{'USERNAME':<24} ROLE")
    for user in actions.list_users(actions.CLI):
        click.echo(f"{user.username:<24} {user.role}")


@users.command("delete")
@click.argument("username")
def users_delete(username: str) -> None:
    """Remove USERNAME; signed-in sessions stop within AUTH_CACHE_SECONDS."""
    if not is_name(username) or not actions.delete_user(actions.CLI, username):  # as revoke
        raise click.ClickException(f"No user named {username!r}.")
    click.echo(f"Deleted user {username!r}.")


@users.command("set-password")
@click.argument("username")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
def users_set_password(username: str, password_stdin: bool) -> None:
    """Give USERNAME a new password; the old one stops within AUTH_CACHE_SECONDS."""
    if not is_name(username) or not actions.user_exists(actions.CLI, username):  # as revoke
        raise click.ClickException(f"No user named {username!r}.")
    if not actions.set_password(actions.CLI, username,
                                hash_password(_read_password(password_stdin))):
        raise click.ClickException(f"No user named {username!r}.")  # deleted meanwhile
    click.echo(f"Changed the password of {username!r}.")


def _read_password(from_stdin: bool) -> str:
    """A new password from standard input or a confirmed prompt; never empty."""
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise click.ClickException("The password must not be empty.")
    try:
        password.encode("utf-8")
    except UnicodeEncodeError:
        # Bytes that are no UTF-8 arrive as lone surrogates (surrogateescape): hashing them
        # was a traceback, and no browser could send such a password anyway.
        raise click.ClickException("The password is not valid UTF-8 text.") from None
    if len(password) < 12:
        # Not refused: the contract sets no minimum, and scripts provision test users.
        click.echo("warning: a password shorter than 12 characters is easy to guess.", err=True)
    return password

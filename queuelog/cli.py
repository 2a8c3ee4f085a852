"""The ``queuelog`` console script: ``work``, ``--help``, ``--version``, and the server commands.

The server's commands live in ``queuelog.server.commands`` and are imported only when one of
them is asked for, so ``queuelog work``, ``--help`` and ``--version`` load no Flask and no
SQLAlchemy (a worker host may have neither) and create no file. Adding a server command:
define it there, and name it with its one-line help in ``SERVER_COMMANDS`` here (a test keeps
the two alike).
"""
from __future__ import annotations

import importlib.util
from typing import Any

import click

from queuelog import __version__
from queuelog.worker.command import work

# What a client-only install (client/pyproject.toml: queuelog-client) says of a server command.
NEEDS_SERVER = ("the full queuelog package (pip install . in the source tree); this is the "
                "client-only install (queuelog-client), without the server")

# name -> the first line of its help: ``queuelog --help`` lists them without the server.
SERVER_COMMANDS: dict[str, str] = {
    "audit": "Show the newest audit events: who changed what, newest first.",
    "backup": "Copy the live SQLite database to PATH (consistent while the server runs; "
              "mode 0600).",
    "db": "Schema revisions (Alembic): upgrade to the newest, or show the current one.",
    "init-db": "Create or upgrade the schema (also done on every start); same as "
               "``db upgrade``.",
    "keys": "Create, list and revoke API keys.",
    "purge": "Delete finished jobs past retention, with their history, in small batches.",
    "schedules": "List the schedules (SCHEDULES) with their next run, last run and last job.",
    "run": "Run a development server.",
    "users": "Manage the people who sign in to the dashboard.",
}


def short_help(name: str, limit: int) -> str:
    """A command's one-line help as ``--help`` lists it, a server command's without the server."""
    if name in SERVER_COMMANDS:  # click cuts a help text the same way for a stand-in command
        return click.Command(name, help=SERVER_COMMANDS[name]).get_short_help_str(limit)
    return main.commands[name].get_short_help_str(limit)


def server_installed() -> bool:
    """True when the server is installed beside the client (the full package, not the client's).

    ``find_spec`` finds without importing, so ``--help`` stays free of Flask either way.
    """
    return all(importlib.util.find_spec(name) is not None
               for name in ("queuelog.server", "flask", "sqlalchemy"))


class QueuelogGroup(click.Group):
    """A click group whose server commands are imported when one of them is resolved.

    Not Flask's ``FlaskGroup``: that one loads the app to list its commands (so ``--help``
    made an instance folder, a secret key and a database) and adds ``routes``, ``shell``
    and ``--env-file``, which are not queuelog's.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command's name, the server's included, without importing them."""
        return sorted({*self.commands, *SERVER_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command; a server command imports the server and binds the app loader."""
        if cmd_name in self.commands or cmd_name not in SERVER_COMMANDS:
            return self.commands.get(cmd_name)
        if not server_installed():
            raise click.ClickException(f"`queuelog {cmd_name}` needs {NEEDS_SERVER}.")
        from queuelog.server import commands
        commands.bind(ctx)
        return commands.server.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help``, the server's from ``SERVER_COMMANDS``."""
        limit = formatter.width - 6 - max(len(name) for name in self.list_commands(ctx))
        rows = [(name, short_help(name, limit)) for name in self.list_commands(ctx)]
        if server_installed():
            with formatter.section("Commands"):
                formatter.write_dl(rows)
            return
        with formatter.section("Commands"):
            formatter.write_dl([row for row in rows if row[0] not in SERVER_COMMANDS])
        with formatter.section("Server commands"):
            formatter.write_text(f"These need {NEEDS_SERVER}:")
            formatter.write_dl([row for row in rows if row[0] in SERVER_COMMANDS])

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a database that does not answer is one line and exit 1."""
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if isinstance(exc, click.ClickException) or ctx.invoked_subcommand \
                    not in SERVER_COMMANDS:
                raise
            from queuelog.server.commands import explain
            explained = explain(exc)
            if explained is exc:
                raise
            raise explained from None


@click.group("queuelog", cls=QueuelogGroup,
             help="queuelog: a persistent job queue with an HTTP API and a dashboard.")
@click.version_option(__version__, prog_name="queuelog")
def main() -> None:
    """The console script's entry point."""


main.add_command(work)

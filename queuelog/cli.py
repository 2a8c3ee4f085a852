"""The ``queuelog`` console script: ``work``, ``--help``, ``--version``, and the server commands.

The server's commands live in ``queuelog.server.commands`` and are imported only when one of
them is asked for, so ``queuelog work``, ``--help`` and ``--version`` load no Flask and no
SQLAlchemy (a worker host may have neither) and create no file. Adding a server command:
define it there, and name it with its one-line help in ``SERVER_COMMANDS`` here (a test keeps
the two alike).
"""
from __future__ import annotations

from typing import Any

import click
from click.utils import make_default_short_help

from queuelog.worker.command import work

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
        from queuelog.server import commands
        commands.bind(ctx)
        return commands.server.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help``, the server's from ``SERVER_COMMANDS``."""
        limit = formatter.width - 6 - max(len(name) for name in self.list_commands(ctx))
        rows = [(name, make_default_short_help(SERVER_COMMANDS[name], limit)
                 if name in SERVER_COMMANDS else self.commands[name].get_short_help_str(limit))
                for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

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
@click.version_option(package_name="queuelog", prog_name="queuelog")
def main() -> None:
    """The console script's entry point."""


main.add_command(work)

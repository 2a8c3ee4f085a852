"""Alembic's environment: queuelog hands it an open connection, inside its lock.

``queuelog.server.store.migrate`` runs every upgrade with the connection already in a transaction
(and, on PostgreSQL, holding an advisory lock), so Alembic joins that transaction and the
whole upgrade commits or rolls back as one. For developers, ``alembic -x url=... revision
--autogenerate`` works too (see ``migrate.alembic_config``).
"""
from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from queuelog.server.store.tables import metadata

config = context.config


def run() -> None:
    """Run the migrations on the connection queuelog passed in, or on ``-x url=``."""
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=metadata,
                          render_as_batch=connection.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()
        return
    url = context.get_x_argument(as_dictionary=True).get("url")
    if not url:
        raise SystemExit("pass the database: alembic -x url=sqlite:///path ...")
    engine = create_engine(url)
    with engine.begin() as conn:
        context.configure(connection=conn, target_metadata=metadata,
                          render_as_batch=conn.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("queuelog's migrations run online only (queuelog db upgrade)")
run()

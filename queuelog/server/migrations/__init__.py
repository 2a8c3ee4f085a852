"""Alembic migrations, shipped inside the package (``script_location = queuelog.server:migrations``).

``queuelog.server.store.migrate`` runs them; ``queuelog db upgrade`` and every start call it.
"""

# The newest revision, known without reading the revision files through Alembic, so a
# start on a database already at head never imports Alembic (Store.create_schema).
# tests/unit/test_migrations.py fails until it names Alembic's head.
HEAD = "0010"

"""Alembic migrations, shipped inside the package (``script_location = queuelog.server:migrations``).

``queuelog.server.store.migrate`` runs them; ``queuelog db upgrade`` and every start call it.
"""
from __future__ import annotations

from importlib import resources

# The newest revision, read from the revision files' names (``NNNN_what.py``, revision
# ``NNNN``) without Alembic, so a start on a database already at head never imports it
# (Store.create_schema). tests/unit/test_migrations.py checks it is Alembic's head.
HEAD: str = max(entry.name for entry in (resources.files(__name__) / "versions").iterdir()
                if entry.name[:4].isdigit() and entry.name.endswith(".py"))[:4]

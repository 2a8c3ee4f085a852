"""Alembic migrations, shipped inside the package (``script_location = queuelog.server:migrations``).

``queuelog.server.store.migrate`` runs them; ``queuelog db upgrade`` and every start call it.
"""

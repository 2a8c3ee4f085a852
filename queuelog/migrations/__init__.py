"""Alembic migrations, shipped inside the package (``script_location = queuelog:migrations``).

``queuelog.store.migrate`` runs them; ``queuelog db upgrade`` and every start call it.
"""

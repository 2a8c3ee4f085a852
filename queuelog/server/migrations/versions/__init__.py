"""Alembic revisions: 0001 is the schema of the first release, each later one a change."""

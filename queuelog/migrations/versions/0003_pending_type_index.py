"""An index for the age of each type's oldest due pending job (GET /types, /ui/types).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``ix_jobs_pending_type_run``: (type, run_at) of pending jobs, one seek per type."""
    op.create_index("ix_jobs_pending_type_run", "jobs", ["type", "run_at"],
                    sqlite_where=sa.text("status = 'pending'"),
                    postgresql_where=sa.text("status = 'pending'"))


def downgrade() -> None:
    """Drop it."""
    op.drop_index("ix_jobs_pending_type_run", table_name="jobs")

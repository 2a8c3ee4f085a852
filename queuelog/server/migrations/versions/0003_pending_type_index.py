"""An index for the oldest due pending job of each type (GET /types, queue age).

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

_PENDING = sa.text("status = 'pending'")


def upgrade() -> None:
    """Add ``ix_jobs_pending_type_run``: one seek per type instead of a scan."""
    op.create_index("ix_jobs_pending_type_run", "jobs", ["type", "run_at"],
                    sqlite_where=_PENDING, postgresql_where=_PENDING)


def downgrade() -> None:
    """Drop it."""
    op.drop_index("ix_jobs_pending_type_run", table_name="jobs")

"""Recurring jobs: the jobs' ``schedule`` and ``scheduled_for``, one row per tick, pauses.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the two job columns and their index, ``schedule_ticks`` and ``paused_schedules``."""
    # Nullable columns without a default: SQLite adds them in place, no table rebuild.
    op.add_column("jobs", sa.Column("schedule", sa.String(100)))
    op.add_column("jobs", sa.Column("scheduled_for", sa.BigInteger))
    op.create_index("ix_jobs_schedule_id", "jobs", ["schedule", "id"])
    op.create_table(
        "schedule_ticks",
        sa.Column("schedule", sa.String(100), primary_key=True),
        sa.Column("tick", sa.BigInteger, primary_key=True),
        sa.Column("job_id", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "paused_schedules",
        sa.Column("schedule", sa.String(100), primary_key=True),
        sa.Column("paused_at", sa.BigInteger, nullable=False),
        sa.Column("paused_by", sa.String(100), nullable=False),
    )


def downgrade() -> None:
    """Drop the tables, the index and the columns."""
    op.drop_table("paused_schedules")
    op.drop_table("schedule_ticks")
    op.drop_index("ix_jobs_schedule_id", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("scheduled_for")
        batch.drop_column("schedule")

"""Three of the jobs' indexes hold only the rows their queries can find.

``ix_jobs_worker_id`` (a worker's jobs) only rows with a worker, ``ix_jobs_schedule_id`` (a
schedule's jobs) only rows a schedule made, ``ix_jobs_status_finished`` (retention's
oldest finished jobs) only finished rows: every query that reads them names a worker, a
schedule, or a ``finished_at`` bound, which implies the condition. An enqueue then writes
three index entries fewer, and a claim one.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

PARTIAL = {
    "ix_jobs_worker_id": (["worker_id", "id"], "worker_id IS NOT NULL"),
    "ix_jobs_schedule_id": (["schedule", "id"], "schedule IS NOT NULL"),
    "ix_jobs_status_finished": (["status", "finished_at"], "finished_at IS NOT NULL"),
}


def upgrade() -> None:
    """Each index made again with its condition."""
    for name, (columns, where) in PARTIAL.items():
        op.drop_index(name, table_name="jobs")
        op.create_index(name, "jobs", columns, sqlite_where=sa.text(where),
                        postgresql_where=sa.text(where))


def downgrade() -> None:
    """Each index over every row again."""
    for name, (columns, _) in PARTIAL.items():
        op.drop_index(name, table_name="jobs")
        op.create_index(name, "jobs", columns)

"""GET /workers: each worker's newest claim by one seek per worker name.

``(worker_id, started_at)`` replaces 0008's ``(started_at, worker_id)``: that one answered
"who claimed in the last 24 hours" by reading a day of attempts, which is 24 times the
last hour's at a steady rate; this one is read by a loose index scan, two seeks per
worker name (``store/workers.py``). One index for another: a claim writes no more.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""
from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``ix_attempts_worker_started``; drop ``ix_attempts_started_worker``."""
    op.create_index("ix_attempts_worker_started", "job_attempts", ["worker_id", "started_at"])
    op.drop_index("ix_attempts_started_worker", table_name="job_attempts")


def downgrade() -> None:
    """Back to 0008's index."""
    op.create_index("ix_attempts_started_worker", "job_attempts", ["started_at", "worker_id"])
    op.drop_index("ix_attempts_worker_started", table_name="job_attempts")

"""Workflows: jobs that depend on jobs.

Five columns on ``jobs`` (``depends_on``, ``on_parent_failure``, ``cancelled_by_parent``,
``waiting_for``, ``has_dependents``), all with constant defaults (no table rewrite, the jobs
kept), and ``job_dependencies`` (parent, child), whose primary key finds a finished parent's
dependents. A job with no dependents (``has_dependents`` false) finishes without reading it.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    """The columns and the table."""
    op.add_column("jobs", sa.Column("depends_on", sa.Text()))
    op.add_column("jobs", sa.Column("on_parent_failure", sa.String(8)))
    op.add_column("jobs", sa.Column("cancelled_by_parent", sa.BigInteger()))
    op.add_column("jobs", sa.Column("waiting_for", sa.Integer()))
    op.add_column("jobs", sa.Column("has_dependents", sa.Boolean(), nullable=False,
                                    server_default=sa.false()))
    op.create_table(
        "job_dependencies",
        sa.Column("parent_id", _ID, sa.ForeignKey("jobs.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("child_id", _ID, sa.ForeignKey("jobs.id", ondelete="CASCADE"),
                  primary_key=True))
    op.create_index("ix_job_dependencies_child", "job_dependencies", ["child_id"])


def downgrade() -> None:
    """Without them."""
    op.drop_index("ix_job_dependencies_child", table_name="job_dependencies")
    op.drop_table("job_dependencies")
    for column in ("has_dependents", "waiting_for", "cancelled_by_parent",
                   "on_parent_failure", "depends_on"):
        op.drop_column("jobs", column)

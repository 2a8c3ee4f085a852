"""PostgreSQL: vacuum ``jobs`` early and leave room on its pages (the claim path's dead tuples).

Every job is updated two to four times (claim, complete or fail, take-back), so ``jobs`` and
its partial claim index collect dead tuples fast, and a claim walks over them until a vacuum.
Autovacuum's default waits for 20% of the table to be dead (200k rows at a million jobs):
vacuum at 1% (plus 1,000 rows) without the cost delay, and leave 20% of each page free so an
updated row can stay on its page (a HOT update). SQLite has no such settings: nothing to do.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""
from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_OPTIONS = ("fillfactor", "autovacuum_vacuum_scale_factor", "autovacuum_vacuum_threshold",
            "autovacuum_vacuum_cost_delay", "autovacuum_analyze_scale_factor")


def upgrade() -> None:
    """Set the storage parameters (takes no lock that blocks reads or writes)."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE jobs SET (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, "
                   "autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0, "
                   "autovacuum_analyze_scale_factor = 0.02)")


def downgrade() -> None:
    """Back to PostgreSQL's defaults."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE jobs RESET ({', '.join(_OPTIONS)})")

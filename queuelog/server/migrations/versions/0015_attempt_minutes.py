"""Attempts ended per minute, type and worker, kept by triggers on ``job_attempts``.

``GET /types``, ``GET /workers`` and the dashboard's chart counted the last hour's attempts
row by row, so a busy hour (269k attempts) cost 130-290 ms a page. Each attempt that ends
completed, failed or lease expired now adds one to its row of ``attempt_minutes``
(minute, type, worker), in the statement that ends it, and the pages read the hour's 60
minutes of rows: as many as the types and workers that ran, not the attempts.

Triggers, as the job counts (0008), because an attempt ends on several paths (a complete,
a fail, a batch of either, a lease taken back by a claim): no path can forget them.

- SQLite (one writer at a time): a row trigger adds to the minute's row directly.
- PostgreSQL: a statement trigger (transition tables: a batch is one upsert per row it
  touches). Its rows carry a ``shard``, the backend's pid modulo ``SHARDS``: a worker key
  shared by many processes would otherwise have every complete of a type wait on one row's
  lock until the previous complete commits. Readers add the shards up.

The table is filled from the attempts that ended in the two hours before the newest end,
so an upgraded server's pages show the hour they showed before. Purge and the retention
round delete minutes older than two hours (``store/minutes.py``).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

SHARDS = 16
ENDED = "('completed', 'failed', 'lease_expired')"  # a cancelled run counts in neither
MINUTE = "{a}.finished_at - {a}.finished_at % 60000000"  # the minute's first microsecond

_SQLITE_ADD = (
    "INSERT INTO attempt_minutes (minute_at, type, worker_id, shard, completed, failed) "
    f"SELECT {MINUTE.format(a='NEW')}, jobs.type, NEW.worker_id, 0, "
    "NEW.outcome = 'completed', NEW.outcome <> 'completed' FROM jobs WHERE jobs.id = NEW.job_id "
    "ON CONFLICT (minute_at, type, worker_id, shard) DO UPDATE SET "
    "completed = completed + excluded.completed, failed = failed + excluded.failed;")
SQLITE_TRIGGERS = [
    ("CREATE TRIGGER attempts_minute_end AFTER UPDATE OF finished_at ON job_attempts "
     f"WHEN OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL AND NEW.outcome IN {ENDED} "
     f"BEGIN {_SQLITE_ADD} END"),
]

PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION queuelog_count_attempt_minutes() RETURNS trigger LANGUAGE plpgsql
AS $$
BEGIN
  INSERT INTO attempt_minutes AS m (minute_at, type, worker_id, shard, completed, failed)
    SELECT {MINUTE.format(a='n')}, j.type, n.worker_id, pg_backend_pid() % {SHARDS},
           count(*) FILTER (WHERE n.outcome = 'completed'),
           count(*) FILTER (WHERE n.outcome <> 'completed')
    FROM new_rows AS n
    JOIN old_rows AS o ON o.job_id = n.job_id AND o.attempt = n.attempt
    JOIN jobs AS j ON j.id = n.job_id
    WHERE o.finished_at IS NULL AND n.finished_at IS NOT NULL AND n.outcome IN {ENDED}
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3  -- every statement locks the rows it adds to in one order: no deadlock
  ON CONFLICT (minute_at, type, worker_id, shard) DO UPDATE
    SET completed = m.completed + excluded.completed, failed = m.failed + excluded.failed;
  RETURN NULL;
END $$
"""
# Transition tables allow no column list: every UPDATE of job_attempts runs it, and the
# WHERE above keeps the attempts that ended in it.
PG_TRIGGERS = [
    ("CREATE TRIGGER attempts_minute_end AFTER UPDATE ON job_attempts "
     "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
     "FOR EACH STATEMENT EXECUTE FUNCTION queuelog_count_attempt_minutes()"),
]

# The attempts that ended in the two hours before the newest end, by minute.
FILL = (
    "INSERT INTO attempt_minutes (minute_at, type, worker_id, shard, completed, failed) "
    f"SELECT {MINUTE.format(a='a')}, j.type, a.worker_id, 0, "
    "sum(CASE WHEN a.outcome = 'completed' THEN 1 ELSE 0 END), "
    "sum(CASE WHEN a.outcome = 'completed' THEN 0 ELSE 1 END) "
    "FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id "
    f"WHERE a.outcome IN {ENDED} AND a.finished_at >= "
    "(SELECT max(finished_at) FROM job_attempts) - 7200000000 "
    "GROUP BY 1, 2, 3")


def upgrade() -> None:
    """The table, filled from the last two hours of attempts, then its triggers."""
    op.create_table(
        "attempt_minutes",
        sa.Column("minute_at", sa.BigInteger, primary_key=True),
        sa.Column("type", sa.String(100), primary_key=True),
        sa.Column("worker_id", sa.String(100), primary_key=True),
        sa.Column("shard", sa.Integer, primary_key=True),
        sa.Column("completed", sa.BigInteger, nullable=False),
        sa.Column("failed", sa.BigInteger, nullable=False),
    )
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:  # no attempt may end between the fill and the trigger
        op.execute("LOCK TABLE job_attempts IN SHARE ROW EXCLUSIVE MODE")
    op.execute(FILL)
    if postgres:
        op.execute(PG_FUNCTION)
    for ddl in PG_TRIGGERS if postgres else SQLITE_TRIGGERS:
        op.execute(ddl)


def downgrade() -> None:
    """Drop the trigger, its function and the table."""
    postgres = op.get_bind().dialect.name == "postgresql"
    op.execute("DROP TRIGGER IF EXISTS attempts_minute_end" + (" ON job_attempts" if postgres
                                                               else ""))
    if postgres:
        op.execute("DROP FUNCTION IF EXISTS queuelog_count_attempt_minutes()")
    op.drop_table("attempt_minutes")

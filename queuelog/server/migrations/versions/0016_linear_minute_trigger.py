"""PostgreSQL: the per-minute rollup's trigger in time linear in the statement's rows.

0015's trigger found the attempts a statement ended by joining its transition tables,
``new_rows`` to ``old_rows``. A transition table has no statistics, so the planner takes it
for one row and nests the loops: a complete of 100 jobs compared 10,000 pairs, of 2,000 jobs
four million (``bench/bench_batch_cost.py``: a complete 102 us a job at 500 jobs, 276 at
2,000; 53 and 51 with this function), and ``MAX_BATCH`` may be set up to 100,000.

The same attempts, found in linear time: those ended in ``new_rows`` whose row in
``old_rows`` (the same primary key: no statement changes it) was not ended yet, that is whose
key is NOT IN the set of rows ended before the statement, which PostgreSQL answers with one
hash of that set (usually empty). The job's type is still read by its primary key, one probe
an attempt. SQLite's row trigger compares ``OLD`` and ``NEW`` directly: nothing to change.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""
from __future__ import annotations

import importlib

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_0015 = importlib.import_module("queuelog.server.migrations.versions.0015_attempt_minutes")

PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION queuelog_count_attempt_minutes() RETURNS trigger LANGUAGE plpgsql
AS $$
BEGIN
  INSERT INTO attempt_minutes AS m (minute_at, type, worker_id, shard, completed, failed)
    SELECT {_0015.MINUTE.format(a='n')}, j.type, n.worker_id, pg_backend_pid() % {_0015.SHARDS},
           count(*) FILTER (WHERE n.outcome = 'completed'),
           count(*) FILTER (WHERE n.outcome <> 'completed')
    FROM new_rows AS n
    JOIN jobs AS j ON j.id = n.job_id
    WHERE n.finished_at IS NOT NULL AND n.outcome IN {_0015.ENDED}
      AND (n.job_id, n.attempt) NOT IN (
        SELECT o.job_id, o.attempt FROM old_rows AS o WHERE o.finished_at IS NOT NULL)
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3  -- every statement locks the rows it adds to in one order: no deadlock
  ON CONFLICT (minute_at, type, worker_id, shard) DO UPDATE
    SET completed = m.completed + excluded.completed, failed = m.failed + excluded.failed;
  RETURN NULL;
END $$
"""


def upgrade() -> None:
    """Replace the function (the trigger calls it by name: it stays as it is)."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_FUNCTION)


def downgrade() -> None:
    """0015's function again."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_0015.PG_FUNCTION)

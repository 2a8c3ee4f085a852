"""PostgreSQL's statements: JSON items read as ``jsonb``, wake-ups by ``pg_notify``."""
from __future__ import annotations

from sqlalchemy import text


# Many rows in one statement (``insert_rows``), read as ``jsonb`` in array order: parsed
# once, where each ``->>`` on a ``json`` value parsed its row again.
INSERT_ROWS = ("INSERT INTO {table} ({columns}) SELECT {picks} FROM "
               "jsonb_array_elements(CAST(:rows AS jsonb)) WITH ORDINALITY AS r(v, ord) "
               "ORDER BY ord{returning}")
# pg_notify in a RETURNING: told to every LISTEN at commit, once however many rows.
NOTIFIED = "pg_notify(:channel, '') AS notified"
# The items of a complete or an end (``{columns}``: what each adds to its id and attempt),
# and the fence on their rows. Each item must be a primary-key lookup whatever the
# statistics say: the ids as an array built in the statement (PostgreSQL cannot tell its
# length, so it reckons a few rows and takes the primary key), and the status and worker
# tested with ``IS NOT DISTINCT FROM``, the same test on these non-null values that no
# index or join can take. With the fence as ``=`` and the ids only in a join, the planner
# weighed a new or stale table's statistics and walked every running job, or every job
# the worker ever held, or the whole table, for each batch: a cost growing with the table.
# SQLite's form of the same: ``+``.
_EACH = "FROM jsonb_array_elements(CAST(:items AS jsonb)) AS e(i)"
ITEMS = ("(SELECT CAST(i ->> 0 AS BIGINT) AS id, CAST(i ->> 1 AS INTEGER) AS att, "
         "{columns} " + _EACH + ")")
FENCE = ("jobs.id = ANY(ARRAY(SELECT CAST(i ->> 0 AS BIGINT) " + _EACH + ")) "
         "AND jobs.id = v.id AND jobs.attempt = v.att "
         "AND jobs.status IS NOT DISTINCT FROM 'running'")
# The holder: a worker's own items (a complete's always, an end's as ``{own}`` says).
OWN = " AND jobs.worker_id IS NOT DISTINCT FROM :wkr"
# The one complete: the items joined to their rows, each fenced alone; their attempts
# closed and a freed slot's wake-up sent by the same statement. ``{guard}``: PLAIN, in
# autocommit, leaves a job with dependents to a transaction (their release goes with it).
PLAIN = " AND NOT jobs.has_dependents"
# A completed job's slot freed: a concurrency in force, the config's or the last claim's
# reading (:slot_types), or one set at run time by any app server since (the limiter row).
FREES_SLOT = ("(done.type = ANY(CAST(:slot_types AS VARCHAR[])) OR EXISTS (SELECT 1 FROM "
              "type_limits WHERE type_limits.type = done.type AND type_limits.overridden "
              "AND type_limits.concurrency IS NOT NULL))")
COMPLETE = (
    "WITH done AS (UPDATE jobs SET status = 'completed', result = v.res, "
    "lease_expires_at = NULL, finished_at = :now, updated_at = :now "
    "FROM " + ITEMS.format(columns="i ->> 2 AS res") + " AS v "
    "WHERE " + FENCE + OWN + "{guard} "
    "RETURNING jobs.*), "
    "ended AS (UPDATE job_attempts SET finished_at = :now, outcome = 'completed', "
    "error = NULL FROM done WHERE job_attempts.job_id = done.id "
    "AND job_attempts.attempt = done.attempt) SELECT {returning}, f.frees AS frees_slot, "
    "CASE WHEN f.frees THEN pg_notify(:channel, '') END AS notified "
    # Once a row: in the select list twice, the limiter row was read twice a job, and so
    # it was as a plain LATERAL too, which the planner pulls up into both uses; OFFSET 0
    # keeps the subquery whole (EXPLAIN: one SubPlan on type_limits, not two).
    "FROM done CROSS JOIN LATERAL (SELECT " + FREES_SLOT + " AS frees OFFSET 0) AS f")
# Attempts ended by a failure (a fail, leases taken back), as one statement: the items
# (``[[id, attempt, status, retry_count, run_at, error], ...]``, each decided by
# ``Finishing``) joined to their rows, each fenced alone, and their attempts closed with
# the same outcome and error. ``{own}``: held by ``:wkr``.
END = (
    "WITH v AS " + ITEMS.format(
        columns="i ->> 2 AS status, CAST(i ->> 3 AS INTEGER) AS n, "
                "CAST(i ->> 4 AS BIGINT) AS run_at, i ->> 5 AS error") + ", "
    "ended AS (UPDATE jobs SET status = v.status, retry_count = v.n, "
    "run_at = coalesce(v.run_at, jobs.run_at), error = v.error, lease_expires_at = NULL, "
    "updated_at = :now, finished_at = CASE WHEN v.status = 'failed' THEN :now END "
    "FROM v WHERE " + FENCE + "{own} "
    "RETURNING jobs.*), "
    "closed AS (UPDATE job_attempts SET finished_at = :now, outcome = :outcome, "
    "error = ended.error FROM ended WHERE job_attempts.job_id = ended.id "
    "AND job_attempts.attempt = ended.attempt) SELECT * FROM ended")
WRITABLE = text("SELECT NOT pg_is_in_recovery() "
                "AND current_setting('transaction_read_only') = 'off'")
ADVISORY = text("SELECT pg_advisory_xact_lock(:key)")
NOTIFY = text("SELECT pg_notify(:channel, '')")  # :channel one of listen.CHANNELS
# Two folds at once: the second's DELETE waits on the first's rows and then finds them
# gone, so no delta is added twice.
FOLD_COUNTS = text(
    "WITH moved AS (DELETE FROM job_count_deltas RETURNING status, type, n) "
    "INSERT INTO job_counts (status, type, n) "
    "SELECT status, type, sum(n) FROM moved GROUP BY status, type "
    "ON CONFLICT (status, type) DO UPDATE SET n = job_counts.n + excluded.n")
EXPIRED_BY_TYPE = text("SELECT type, count(*) FROM jobs WHERE status = 'running' "
                       "AND lease_expires_at < :now GROUP BY type")

"""SQLite's statements: indexes pinned by INDEXED BY, JSON items read by ``json_each``."""
from __future__ import annotations

from sqlalchemy import text

# The claim's walk; ``index``, ``typed`` and ``policy`` are SQL from this package (never
# a value). A new SQLite database has no ANALYZE statistics, and without them the planner
# takes a (status, ...) list index and sorts every pending job on each claim: INDEXED BY
# pins the claim-order walk.
DUE = ("SELECT cand.id FROM jobs AS cand {index} "
       "WHERE cand.status = 'pending' AND cand.run_at <= :now {typed}"
       "AND {policy} "
       "ORDER BY cand.priority DESC, cand.run_at, cand.id LIMIT :n")
# A claim of several types (``:types``, a JSON list): each type's own walk, correlated to
# ``t``, at most :n jobs each, then the best :n of those. CROSS JOIN keeps the types outside:
# a few walks of :n, whatever the other types' backlogs.
EACH_TYPE = ("SELECT x.id FROM (SELECT DISTINCT value AS type FROM json_each(:types)) "
             "AS t CROSS JOIN jobs AS x WHERE x.id IN ({walk}) "
             "ORDER BY x.priority DESC, x.run_at, x.id LIMIT :n")
EXPIRED = text("SELECT id, attempt, retry_count, max_retries FROM jobs "
               "INDEXED BY ix_jobs_lease "
               "WHERE status = 'running' AND lease_expires_at < :now "
               "ORDER BY lease_expires_at LIMIT :lim")
EXPIRED_BY_TYPE = text(
    "SELECT type, count(*) FROM jobs INDEXED BY ix_jobs_lease WHERE status = 'running' "
    "AND lease_expires_at < :now GROUP BY type")
# Many rows in one multi-row VALUES (``insert_rows``).
INSERT_ROWS = "INSERT INTO {table} ({columns}) VALUES :rows{returning}"
# The fence on each item's row, and its holder. ``+`` keeps the planner off the status and
# worker indexes (it would walk every running job for each item); the walk is the items,
# each a rowid lookup.
FENCE = ("WHERE jobs.id = i.value ->> 0 AND +jobs.status = 'running' "
         "AND jobs.attempt = i.value ->> 1")
OWN = " AND +jobs.worker_id = :wkr"
# The one complete: the items (``[[id, attempt, result], ...]``) joined to their rows, each
# fenced alone.
COMPLETE = ("UPDATE jobs SET status = 'completed', result = i.value ->> 2, "
            "lease_expires_at = NULL, finished_at = :now, updated_at = :now "
            "FROM json_each(:items) AS i " + FENCE + OWN + " RETURNING {returning}")
# The completed jobs' attempts closed (each item a primary-key lookup).
CLOSE_ATTEMPTS = text(
    "UPDATE job_attempts SET finished_at = :now, outcome = 'completed', error = NULL "
    "FROM json_each(:items) AS i "
    "WHERE job_attempts.job_id = i.value ->> 0 AND job_attempts.attempt = i.value ->> 1")
# Attempts ended by a failure (a fail, leases taken back): the items
# (``[[id, attempt, status, retry_count, run_at, error], ...]``, each decided by
# ``Finishing``) joined to their rows, each fenced alone; ``{own}``: held by ``:wkr``.
END = ("UPDATE jobs SET status = i.value ->> 2, retry_count = i.value ->> 3, "
       "run_at = coalesce(i.value ->> 4, jobs.run_at), error = i.value ->> 5, "
       "lease_expires_at = NULL, updated_at = :now, "
       "finished_at = CASE WHEN i.value ->> 2 = 'failed' THEN :now END "
       "FROM json_each(:items) AS i " + FENCE + "{own} RETURNING *")
# Their attempts closed, with the outcome and the error their jobs got.
END_ATTEMPTS = text(
    "UPDATE job_attempts SET finished_at = :now, outcome = :outcome, error = i.value ->> 5 "
    "FROM json_each(:items) AS i "
    "WHERE job_attempts.job_id = i.value ->> 0 AND job_attempts.attempt = i.value ->> 1")

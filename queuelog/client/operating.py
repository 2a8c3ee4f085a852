"""The client's repair and operating calls, one method per API call: cancel and retry (one or
in bulk), job types and their limits, schedules, workers, the audit log, and the service's
own routes (health, metrics, the OpenAPI document).

``Client`` (``api.py``) inherits them. ``OperatingCalls`` holds no state of its own: each
call is one request over the client's connection, so splitting them out of ``api.py`` is
only a matter of size, not a second object to set up.
"""
from __future__ import annotations

from typing import Any, Iterator
from urllib.parse import quote

from queuelog.client.transport import Connection


class OperatingCalls:
    """What admins, scrapers and status boards call; producers cancel their own jobs."""

    _conn: Connection  # set by Client.__init__

    # -- repair: cancel and retry (a producer cancels its own jobs; admins do both) ----------

    def cancel(self, job: int | dict[str, Any]) -> dict[str, Any]:
        """Cancel a pending, blocked or running job (an id or a job); 409 once finished."""
        return self._conn.request("POST", f"jobs/{_id(job)}/cancel")

    def retry(self, job: int | dict[str, Any]) -> dict[str, Any]:
        """Admin: send a failed or cancelled job back to pending, with fresh retries."""
        return self._conn.request("POST", f"jobs/{_id(job)}/retry")

    def run(self, job_id: int | dict[str, Any]) -> dict[str, Any]:
        """Admin: make a delayed or retrying pending job due now; 409 unless pending."""
        return self._conn.request("POST", f"jobs/{_id(job_id)}/run")

    def cancel_many(self, ids: list[int] | None = None, *,
                    filter: dict[str, Any] | None = None) -> int:
        """Cancel the pending jobs named by ``ids`` or matched by ``filter``; how many changed."""
        return int(self._conn.request("POST", "jobs/cancel", _bulk(ids, filter))["count"])

    def retry_many(self, ids: list[int] | None = None, *,
                   filter: dict[str, Any] | None = None) -> int:
        """Admin: retry the failed or cancelled jobs named or matched; how many changed."""
        return int(self._conn.request("POST", "jobs/retry", _bulk(ids, filter))["count"])

    # -- operating: job types, limits, schedules, workers, audit -----------------------------

    def types(self) -> list[dict[str, Any]]:
        """Every configured job type: paused, counts, oldest pending age, last hour."""
        return list(self._conn.request("GET", "types")["types"])

    def pause(self, type: str) -> dict[str, Any]:
        """Admin: pause a job type (no claim returns it; enqueues still succeed)."""
        return self._conn.request("POST", f"types/{_seg(type)}/pause")

    def resume(self, type: str) -> dict[str, Any]:
        """Admin: resume a paused job type."""
        return self._conn.request("POST", f"types/{_seg(type)}/resume")

    def set_limits(self, type: str, **limits: Any) -> dict[str, Any]:
        """Admin: change ``concurrency``, ``rate`` or ``burst`` (``None`` removes that limit)."""
        return self._conn.request("PUT", f"types/{_seg(type)}/limits", dict(limits))

    def clear_limits(self, type: str) -> dict[str, Any]:
        """Admin: back to the limits configured in ``JOB_TYPES``."""
        return self._conn.request("DELETE", f"types/{_seg(type)}/limits")

    def schedules(self) -> list[dict[str, Any]]:
        """Every schedule: cron, timezone, type, paused, next and last run, last job."""
        return list(self._conn.request("GET", "schedules")["schedules"])

    def pause_schedule(self, name: str) -> dict[str, Any]:
        """Admin: pause a schedule (its ticks are skipped until it is resumed)."""
        return self._conn.request("POST", f"schedules/{_seg(name)}/pause")

    def resume_schedule(self, name: str) -> dict[str, Any]:
        """Admin: resume a paused schedule."""
        return self._conn.request("POST", f"schedules/{_seg(name)}/resume")

    def run_schedule(self, name: str) -> dict[str, Any]:
        """Admin: enqueue one job of the schedule now, outside its ticks; the job."""
        return self._conn.request("POST", f"schedules/{_seg(name)}/run")

    def workers(self) -> list[dict[str, Any]]:
        """The worker keys that claimed in the last 24 hours or hold a job now."""
        return list(self._conn.request("GET", "workers")["workers"])

    def audit(self, **filters: Any) -> Iterator[dict[str, Any]]:
        """Admin: every audit event (``action``, ``actor``, ``limit`` per page), newest first."""
        return self._conn.pages("audit", "events", filters)

    # -- service -----------------------------------------------------------------------------

    def healthz(self) -> dict[str, Any]:
        """``{"status": "ok"}``; a ProblemError (503) when the database does not answer."""
        return self._conn.request("GET", "healthz")

    def metrics(self) -> str:
        """The Prometheus text exposition (admin and metrics keys)."""
        return self._conn.send("GET", "metrics").text

    def openapi(self) -> dict[str, Any]:
        """The server's OpenAPI 3.1 document."""
        return self._conn.request("GET", "openapi.json")


def _id(job: int | dict[str, Any]) -> int:
    """A job's id, from the job or the id itself."""
    return int(job["id"] if isinstance(job, dict) else job)


def _seg(name: str) -> str:
    """A name as one URL path segment (a ``/`` or ``?`` in it cannot reach another route)."""
    return quote(name, safe="")


def _bulk(ids: list[int] | None, filter: dict[str, Any] | None) -> dict[str, Any]:
    """The body of a bulk cancel or retry: exactly one of ids and filter (``{}``: every job)."""
    if (ids is None) == (filter is None):
        raise TypeError("give ids or filter (filter={} matches every job), not both")
    return {"ids": [int(i) for i in ids]} if ids is not None else {"filter": dict(filter or {})}

"""Admin endpoints: put a failed or cancelled job back in the queue."""
from __future__ import annotations

from typing import Any

from flask import Blueprint

from ..auth import require
from ..store import get_store
from ..validation import Fields, json_body
from . import job_json, notify

bp = Blueprint("admin", __name__)


@bp.post("/jobs/<job_id:job_id>/retry")
@require("admin", write=True)
def retry(job_id: int) -> Any:
    """Failed or cancelled back to pending, with fresh retries; history kept."""
    Fields(json_body(), ()).check()  # unknown fields are a 422, as everywhere
    job = get_store().retry(job_id)
    notify()
    return job_json(job)


"""A client generated from /openapi.json by openapi-python-client runs a job, parsing every answer.

openapi-python-client 0.29 once dropped Job, JobList, JobPage, JobWithHistory and Enqueued (a
schema named twice): enqueue, claim and complete still worked, but every parsed answer was
None. The generated package is imported from tmp_path and talks to the app in process.
"""
from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from typing import Any, Iterator

import httpx
import pytest

GENERATOR = shutil.which("openapi-python-client") or "openapi-python-client"
PACKAGE = "queuelog_generated"


@pytest.fixture
def generated(client: Any, admin: dict[str, str], tmp_path: Any) -> Iterator[Any]:
    """The package generated from this app's /openapi.json, importable as ``PACKAGE``."""
    pytest.importorskip("openapi_python_client")
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(client.get("/openapi.json", headers=admin).json))
    proc = subprocess.run([GENERATOR, "generate", "--path", str(spec), "--meta", "none",
                           "--output-path", str(tmp_path / PACKAGE)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Any warning means models were dropped or responses omitted from the generated client.
    assert "Warning" not in proc.stdout and "WARNING" not in proc.stdout, proc.stdout
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.split(".")[0] == PACKAGE]:
            del sys.modules[name]


def _sub(package: Any, name: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.{name}")


def test_a_generated_client_enqueues_claims_and_completes(generated, app, producer, worker):
    models = _sub(generated, "models")
    enqueue = _sub(generated, "api.producer.enqueue")
    claim = _sub(generated, "api.worker.claim")
    complete = _sub(generated, "api.worker.complete")
    get_job = _sub(generated, "api.jobs.get_job")

    def connect(headers: dict[str, str]) -> Any:
        return generated.AuthenticatedClient(
            base_url="http://queue.test", token=headers["Authorization"].split()[1],
            httpx_args={"transport": httpx.WSGITransport(app=app)})

    made = enqueue.sync(client=connect(producer), body=models.NewJob(
        type_=models.NewJobType.EMAIL,
        payload=models.NewJobPayload.from_dict({"to": "ada@example.com"})))
    assert isinstance(made, models.Job), made
    assert made.status == models.Status.PENDING and made.payload.to_dict() == {
        "to": "ada@example.com"}

    held = claim.sync(client=connect(worker))
    assert isinstance(held, models.Job), held
    assert (held.id, held.attempt, held.status) == (made.id, 1, models.Status.RUNNING)
    assert held.lease_expires_at is not None and held.worker_id == "mailer-1"

    done = complete.sync(held.id, client=connect(worker), body=models.CompleteRequest(
        attempt=held.attempt, result=models.CompleteRequestResultType0.from_dict({"ok": 1})))
    assert isinstance(done, models.Job), done
    assert done.status == models.Status.COMPLETED and done.result.to_dict() == {"ok": 1}

    seen = get_job.sync(made.id, client=connect(producer))
    assert isinstance(seen, models.JobWithHistory), seen
    assert [(a.attempt, a.outcome) for a in seen.attempts] == [(1, models.Outcome.COMPLETED)]

    problem = complete.sync(held.id, client=connect(worker),
                            body=models.CompleteRequest(attempt=held.attempt))
    assert isinstance(problem, models.Problem) and problem.status == 409

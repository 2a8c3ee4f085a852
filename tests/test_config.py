"""Configuration: a config that cannot work stops start-up with a clear message."""
from __future__ import annotations

from typing import Any

import pytest

from queuelog import create_app


def build(tmp_path: Any, **config: Any) -> Any:
    """Create an app on a temp SQLite file with extra config."""
    return create_app({"DATABASE_URL": f"sqlite:///{tmp_path}/c.sqlite3", "SECRET_KEY": "x",
                       "BOOTSTRAP_ADMIN": False, **config})


@pytest.mark.parametrize("job_types, message", [
    ({}, "non-empty"),
    ({"a": {"colour": "red"}}, "may set only"),
    ({"a": {"max_retries": "five"}}, "max_retries"),
    ({"a": {"max_retries": -3}}, "max_retries"),
    ({"a": {"max_retries": 2.5}}, "max_retries"),
    ({"a": {"max_payload_bytes": -1}}, "max_payload_bytes"),
    ({"a": {"max_payload_bytes": "big"}}, "max_payload_bytes"),
    ({"a": {"lease_seconds": 0}}, "lease_seconds"),
    ({"": {}}, "type name"),
])
def test_bad_job_types_stop_start_up(tmp_path, job_types, message):
    with pytest.raises(ValueError, match=message):
        build(tmp_path, JOB_TYPES=job_types)


def test_good_per_type_options_are_used(tmp_path):
    app = build(tmp_path, JOB_TYPES={"a": {"max_retries": 0, "max_payload_bytes": 10,
                                           "lease_seconds": 2.5}})
    try:
        assert app.config["JOB_TYPES"]["a"]["max_retries"] == 0
    finally:
        app.extensions["queuelog.store"].close()

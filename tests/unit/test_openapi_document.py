"""The OpenAPI document as third-party tools read it: Spectral's spectral:oas rules, generators'
naming, and the links a stateful tester follows.

Spectral itself is a Node tool (checked by hand: ``npx @stoplight/spectral-cli lint`` with a
ruleset ``extends: spectral:oas`` reports no problem); the rules it raised are checked here.
"""
from __future__ import annotations

import json
from typing import Any, Iterator

import pytest

from queuelog.server.config import DEFAULTS
from queuelog.server.requests.openapi import document

DOC = document(DEFAULTS)
METHODS = ("get", "put", "post", "delete", "patch")


def operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(path, method, operation) for every operation in the document."""
    for path, item in DOC["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method]


def test_every_operation_has_one_defined_tag_an_id_and_a_description():
    """Spectral: operation-tags, operation-tag-defined, operationId-unique, description."""
    defined = {t["name"] for t in DOC["tags"]}
    ids = [op["operationId"] for _, _, op in operations()]
    assert len(ids) == len(set(ids))
    for path, method, op in operations():
        assert len(op["tags"]) == 1 and op["tags"][0] in defined, (path, method)
        assert op["description"].startswith("Who: "), (path, method)


def test_servers_and_contact():
    """Spectral: oas3-api-servers, oas3-server-trailing-slash, info-contact."""
    assert DOC["servers"] and all(s["url"] == "/" or not s["url"].endswith("/")
                                  for s in DOC["servers"])
    assert DOC["info"]["contact"]["name"] and DOC["info"]["description"]


def test_every_component_schema_is_used_and_none_is_an_all_of():
    """Spectral: oas3-unused-component. openapi-python-client names the inline models of an
    ``allOf`` after its parent, so an allOf of Job made a second "JobPayload" and dropped Job."""
    text = json.dumps({k: v for k, v in DOC.items() if k != "components"}) + json.dumps(
        DOC["components"]["schemas"])
    for name, schema in DOC["components"]["schemas"].items():
        assert f'"#/components/schemas/{name}"' in text, name
        assert "allOf" not in json.dumps(schema), name


def test_links_name_real_operations_and_parameters():
    by_id = {op["operationId"]: op for _, _, op in operations()}
    seen = 0
    for _, _, op in operations():
        for response in op["responses"].values():
            for link in response.get("links", {}).values():
                target = by_id[link["operationId"]]
                names = {p["name"] for p in target.get("parameters", ())}
                assert set(link.get("parameters", {})) <= names, link
                seen += 1
    assert seen >= 10


def test_a_stateful_run_can_follow_a_job_from_enqueue_to_claim_to_complete():
    schemathesis = pytest.importorskip("schemathesis")
    machine = schemathesis.openapi.from_dict(DOC).as_state_machine()
    rules = set(dir(machine))
    assert "POST_jobs___201_ClaimJob__POST_jobs_claim" in rules
    assert "POST_jobs_claim___200_CompleteJob__POST_jobs_id_complete" in rules
    assert "POST_jobs_claim___200_HeartbeatJob__POST_jobs_id_heartbeat" in rules


def test_the_rules_a_schema_cannot_state_are_written_down():
    ops = {op["operationId"]: op["description"] for _, _, op in operations()}
    assert "idempotency-key-mismatch" in ops["enqueue"]
    assert "Idempotent-Replayed: true" in ops["enqueue"]
    assert "one key twice in a batch" in ops["enqueueBatch"]
    for batch in ("completeBatch", "failBatch"):
        assert "The same job id twice in one request is a 422" in ops[batch]
    for verb in ("heartbeat", "complete", "fail"):
        assert "stale attempt" in ops[verb]

"""Strict request parsing: 400 for bad JSON, 415 for non-JSON, 422 with an errors list."""
from __future__ import annotations

import json

import pytest

from queuelog.model.problems import MalformedRequest, ValidationFailed
from queuelog.server.requests.parse import MAX_DEPTH, compact, idempotency_header, parse_json
from helpers import SQLITE_ONLY, problem


def nested(depth: int) -> str:
    """A JSON text of ``depth`` nested arrays."""
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("raw", [b"NaN", b'{"a": NaN}', b'{"a": Infinity}', b"[-Infinity]",
                                 b"{", b"", b"{'a': 1}", b'{"a": 1,}', b"\xff\xfe",
                                 b'"\\ud800"', b'{"a": "\\udfff"}',
                                 nested(MAX_DEPTH + 1).encode(), nested(100_000).encode()])
def test_parse_json_rejects_what_rfc_8259_does_not_allow(raw):
    with pytest.raises(MalformedRequest):
        parse_json(raw)


def test_parse_json_accepts_strict_json_up_to_the_depth_limit():
    assert parse_json(nested(MAX_DEPTH).encode()) == json.loads(nested(MAX_DEPTH))
    assert parse_json('{"a": "\u00e9\\u00e9", "b": [1.5, -2e3, null, true]}'.encode()) == {
        "a": "\u00e9\u00e9", "b": [1.5, -2000.0, None, True]}


def objects(depth: int, wide: int = 0) -> str:
    """``depth`` nested objects, each beside ``wide`` shallow siblings (a batch's shape)."""
    siblings = "".join(f', "s{i}": [7]' for i in range(wide))
    return '{"a": ' * (depth - 1) + "{}" + (siblings + "}") * (depth - 1)


@pytest.mark.parametrize("wide", [0, 3])
def test_the_depth_limit_counts_objects_and_mixed_nesting(wide):
    assert parse_json(objects(MAX_DEPTH, wide).encode()) == json.loads(objects(MAX_DEPTH, wide))
    with pytest.raises(MalformedRequest):
        parse_json(objects(MAX_DEPTH + 1, wide).encode())
    mixed = '{"a": [' * (MAX_DEPTH // 2) + "1" + "]}" * (MAX_DEPTH // 2)
    assert parse_json(mixed.encode())
    with pytest.raises(MalformedRequest):
        parse_json(("[" + mixed + "]").encode())


def test_compact_is_the_measured_form():
    assert compact({"a": [1, 2], "b": "\u00e9"}) == '{"a":[1,2],"b":"\u00e9"}'


@pytest.mark.parametrize("header, key", [('"k-1"', "k-1"), ("k-1", "k-1"), (' "k 1" ', "k 1"),
                                         ('"a\\"b"', 'a"b'), ('"a\\\\b"', "a\\b"), (None, None)])
def test_idempotency_header_forms(header, key):
    assert idempotency_header(header) == key


def test_idempotency_header_bad_escape_is_422():
    with pytest.raises(ValidationFailed):
        idempotency_header('"a\\nb"')


@SQLITE_ONLY
@pytest.mark.parametrize("data", ["{bad", "[]", '"text"', "42", "null", '{"type": NaN}',
                                  nested(MAX_DEPTH + 1), '{"type": "email"} trailing'])
def test_malformed_bodies_are_400(client, producer, store, data):
    problem(client.post("/jobs", data=data, content_type="application/json",
                        headers=producer), 400)
    assert store.list_jobs().jobs == []


@SQLITE_ONLY
def test_invalid_utf8_is_400(client, producer):
    problem(client.post("/jobs", data=b'{"type": "\xff"}', content_type="application/json",
                        headers=producer), 400)


@SQLITE_ONLY
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", ""])
def test_non_json_bodies_are_415(client, producer, worker, content_type):
    problem(client.post("/jobs", data='{"type": "email"}', content_type=content_type,
                        headers=producer), 415)
    problem(client.post("/jobs/claim", data="{}", content_type=content_type, headers=worker), 415)


@SQLITE_ONLY
def test_json_with_charset_and_problem_suffix_types_are_json(client, producer):
    resp = client.post("/jobs", data='{"type": "email"}',
                       content_type="application/json; charset=utf-8", headers=producer)
    assert resp.status_code == 201


@SQLITE_ONLY
def test_bearer_requests_may_omit_the_body(client, producer, worker):
    job = client.post("/jobs", json={"type": "email"}, headers=producer).json
    assert client.post("/jobs/claim", headers=worker).status_code == 200
    assert client.post(f"/jobs/{job['id']}/cancel", headers=producer).status_code == 200
    assert client.post(f"/jobs/{job['id']}/cancel", headers=producer).status_code == 409


@SQLITE_ONLY
def test_422_carries_an_errors_list(client, producer):
    body = problem(client.post("/jobs", json={"type": "email", "max_retries": 99},
                               headers=producer), 422)
    assert body["type"].endswith("validation-error")
    assert body["errors"] == [{"field": "max_retries", "detail": body["errors"][0]["detail"]}]
    assert "max_retries" in body["detail"]


@SQLITE_ONLY
def test_a_bound_is_written_as_the_number_it_is(client, producer, worker):
    got = problem(client.post("/jobs/1/complete", json={"attempt": 2**40}, headers=worker), 422)
    assert got["errors"] == [{"field": "attempt", "detail": "Must be between 1 and 2147483647."}]
    got = problem(client.post("/jobs", json={"type": "email", "delay_seconds": -1},
                              headers=producer), 422)
    assert got["errors"][0]["detail"].startswith("Must be ")
    assert "e+" not in got["errors"][0]["detail"]


@SQLITE_ONLY
def test_a_parent_in_neither_form_is_explained_by_the_form_its_type_is(client, producer):
    def errors(parent):
        return problem(client.post("/jobs/batch", json={"jobs": [
            {"type": "email"}, {"type": "email", "depends_on": [parent]}]},
            headers=producer), 422)["errors"]
    assert errors({"item": -1}) == [{"field": "jobs[1].depends_on[0].item",
                                     "detail": "Must be between 0 and 100000."}]
    assert errors("7") == [{"field": "jobs[1].depends_on[0]",
                            "detail": "Must be an integer or a JSON object."}]


@SQLITE_ONLY
def test_huge_numbers_are_422_not_500(client, producer, worker):
    for value in (10**400, -(10**30), 1e308):
        problem(client.post("/jobs", json={"type": "email", "max_retries": value},
                            headers=producer), 422)
        problem(client.post("/jobs", json={"type": "email", "delay_seconds": value},
                            headers=producer), 422)
    problem(client.post("/jobs/1/complete", json={"attempt": 10**400}, headers=worker), 422)
    # Well-formed JSON that no double or int() holds: 422 naming the field, never stored.
    for body, field in (('{"type": "email", "delay_seconds": 1e400}', "delay_seconds"),
                        ('{"type": "email", "max_retries": -1e400}', "max_retries"),
                        ('{"type": "email", "max_retries": ' + "9" * 5000 + "}", "max_retries"),
                        ('{"type": "email", "payload": {"a": [1, {"b": 1e999}]}}', "payload")):
        got = problem(client.post("/jobs", data=body, content_type="application/json",
                                  headers=producer), 422)
        assert [e["field"] for e in got["errors"]] == [field]
    got = problem(client.post("/jobs/1/complete", data='{"attempt": 1, "result": {"r": 1e400}}',
                              content_type="application/json", headers=worker), 422)
    assert [e["field"] for e in got["errors"]] == ["result"]
    assert client.get("/jobs", headers=producer).json["jobs"] == []


@SQLITE_ONLY
def test_far_run_at_is_not_a_500(client, producer):
    # The store keeps 1970-01-01 to 9999-12-30 UTC (a 4-digit year after any offset).
    for value, status in (("9999-12-31T23:59:59+00:00", 422), ("0001-01-01T00:00:00+00:00", 422),
                          ("2030-01-01T00:00:00+14:00", 201), ("2030-13-01T00:00:00Z", 422)):
        resp = client.post("/jobs", json={"type": "email", "run_at": value}, headers=producer)
        assert resp.status_code == status, (value, resp.get_data(as_text=True))

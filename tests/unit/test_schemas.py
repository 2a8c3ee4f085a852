"""The body declarations and their checks: fastjsonschema's verdict and jsonschema's field
errors agree on generated bodies, every bad field is named by its path, and a bad request
costs work in proportion to its size, with at most MAX_ERRORS errors."""
from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuelog.server.config import DEFAULTS
from queuelog.server.requests.bodies import bodies
from queuelog.server.requests.check import Declared, declared
from queuelog.server.requests.explain import FieldErrors
from queuelog.server.requests.parse import OUT_OF_RANGE

CONFIG = {**DEFAULTS, "MAX_BATCH": 3}
BODIES = bodies(CONFIG)


DECLARED = {name: Declared(schema) for name, schema in BODIES.items()}


def errors_of(name: str, value: Any, out_of_range: bool = False) -> list[dict[str, str]]:
    """The field errors the declared body's check finds in ``value``."""
    found = FieldErrors()
    DECLARED[name].check(value, found, out_of_range)
    return list(found)


def _field_names(schema: dict[str, Any]) -> list[str]:
    names: set[str] = {"bogus"}
    stack = [schema]
    while stack:
        node = stack.pop()
        for key, sub in node.get("properties", {}).items():
            names.add(key)
            stack.append(sub)
        if "items" in node:
            stack.append(node["items"])
    return sorted(names)


# Values near every boundary the bodies declare, and of every JSON type.
SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.sampled_from([0, 1, -1, 25, 26, 30, 31, 100, 101, 43_200, 43_201, 86_400, 86_401,
                     2**31 - 1, 2**31, 2**63 - 1, 2**63, 3.0, 2.5, 0.5, 1e-300]),
    st.integers(), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["email", "pdf", "fax", "low", "critical", "urgent", "", "k-1",
                     "caf\u00e9", "tab\there", "k" * 255, "k" * 256,
                     "2030-01-02T03:04:05Z", "2030-01-02T03:04:05", "2030-01-02T03:04:05+02:00",
                     "1969-12-31T23:59:59Z", "9999-12-31T00:00:00Z", "2030-02-30T00:00:00Z",
                     "1970-01-01T00:00:00Z", "9998-12-31T23:59:59-14:00", "2030-01-02T24:00:00Z",
                     "2030-01-02t03:04:05z", "tomorrow"]),
    st.text(max_size=8))


def _valid(schema: dict[str, Any]) -> Any:
    """Values the schema calls valid, boundaries included (the subset the bodies use)."""
    kinds = schema.get("type")
    if kinds is None:
        return SCALARS  # an ignored field (worker_id): anything
    if isinstance(kinds, list):
        return st.one_of(*(_valid({**schema, "type": k}) for k in kinds))
    if kinds == "null":
        return st.none()
    if "enum" in schema:
        return st.sampled_from([o for o in schema["enum"] if o is not None])
    if kinds in ("integer", "number"):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        ends = st.sampled_from([v for v in (lo, hi) if v is not None])
        if kinds == "integer":
            return st.one_of(ends, st.integers(lo, hi), ends.map(float))
        return st.one_of(ends, st.floats(lo, hi), st.integers(int(lo), int(hi)))
    if kinds == "string":
        if schema.get("format") == "date-time":
            return st.sampled_from(["2030-01-02T03:04:05Z", "1970-01-01T00:00:00+01:00",
                                    "2030-01-02T03:04:05.5+02:00", "9998-12-31T23:59:59Z"])
        alphabet = st.characters(min_codepoint=32, max_codepoint=126) \
            if "pattern" in schema else st.characters()
        return st.text(alphabet, min_size=schema.get("minLength", 0),
                       max_size=min(schema.get("maxLength", 10), 10))
    if kinds == "boolean":
        return st.booleans()
    if kinds == "array":
        return st.lists(_valid(schema["items"]), min_size=schema.get("minItems", 0),
                        max_size=min(schema.get("maxItems", 3), 3))
    props = schema.get("properties", {})
    if not props:
        return st.dictionaries(st.text(max_size=3), SCALARS, max_size=3)
    required = schema.get("required", [])
    return st.fixed_dictionaries({k: _valid(props[k]) for k in required},
                                 optional={k: _valid(v) for k, v in props.items()
                                           if k not in required})


@st.composite
def _bodies(draw: Any, name: str) -> Any:
    """A valid body with up to two of its fields (at any depth) replaced or added."""
    body = draw(_valid(BODIES[name]))
    names = _field_names(BODIES[name])
    for _ in range(draw(st.integers(0, 2))):
        node = body
        while isinstance(node, (dict, list)) and node and draw(st.booleans()):
            inner = [v for v in (node.values() if isinstance(node, dict) else node)
                     if isinstance(v, (dict, list)) and v]
            if not inner:
                break
            node = draw(st.sampled_from(inner))
        value = draw(st.one_of(SCALARS, st.lists(SCALARS, max_size=2)))
        if isinstance(node, dict):
            node[draw(st.sampled_from(names))] = value
        elif isinstance(node, list) and node:
            node[draw(st.integers(0, len(node) - 1))] = value
    return body


@pytest.mark.parametrize("name", sorted(BODIES))
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_verdict_and_the_errors_agree(name: str, data: Any) -> None:
    """fastjsonschema accepts a body exactly when jsonschema (with the same date-time
    parser) finds no error, so no valid body gets a 422 and no invalid one passes."""
    body = data.draw(_bodies(name))
    declared = DECLARED[name]
    fast_ok = declared.passes(body)
    reference = declared.explainer.validator.is_valid(body)
    assert fast_ok == reference, body
    assert (errors_of(name, body) == []) == reference, (body, errors_of(name, body))


def test_every_bad_field_is_named_by_its_path() -> None:
    got = errors_of("NewJobBatch", {"jobs": [
        {"type": "email"}, {"type": "fax", "priority": "urgent", "bogus": 1},
        {"type": "pdf", "run_at": "2030-01-02T03:04:05", "payload": None}]})
    assert {(e["field"], e["detail"]) for e in got} == {
        ("jobs[1].type", "Must be one of email, pdf, sync."),
        ("jobs[1].priority", "Must be one of low, medium, high, critical."),
        ("jobs[1].bogus", "Unknown field."),
        ("jobs[2].run_at", "Must carry a time zone offset or Z."),
        ("jobs[2].payload", "Must be a JSON object."),
    }
    assert errors_of("NewJobBatch", {"jobs": [{"type": "email"}] * 4}) == [
        {"field": "jobs", "detail": "Must have 1 to 3 items."}]
    assert errors_of("NewJob", {"type": "email", "run_at": "2030-01-02T03:04:05Z",
                                "delay_seconds": 1}) == [
        {"field": "delay_seconds", "detail": "Give run_at or delay_seconds, not both."}]


def test_null_means_left_out_except_for_payload() -> None:
    assert errors_of("NewJob", {"type": "email", "priority": None, "max_retries": None,
                                "run_at": None, "idempotency_key": None}) == []
    assert errors_of("FailRequest", {"attempt": 1, "error": None, "retry": None,
                                     "retry_in": None}) == []
    assert [e["field"] for e in errors_of("NewJob", {"type": "email", "payload": None})] == [
        "payload"]


def test_an_integral_float_becomes_an_int() -> None:
    body = {"jobs": [{"id": 7.0, "attempt": 2.0}]}
    assert errors_of("CompleteBatch", body) == []
    assert body == {"jobs": [{"id": 7, "attempt": 2}]}
    assert all(type(v) is int for v in body["jobs"][0].values())


def test_a_number_out_of_range_is_named_where_it_is() -> None:
    got = errors_of("NewJobBatch", {"jobs": [{"type": "email"},
                                             {"type": "email", "payload": {"a": [OUT_OF_RANGE]}}]},
                    out_of_range=True)
    assert [e["field"] for e in got] == ["jobs[1].payload"]


def test_a_422_lists_at_most_100_errors_and_stops_looking() -> None:
    """Bug 8: 500 items of 200 unknown fields each. Without the cap the answer held 100,000
    errors (8.5 MB); the errors kept stop at MAX_ERRORS and so does the explaining."""
    item = {"type": "email", **{f"x{n}": 1 for n in range(200)}}
    config = {**DEFAULTS, "MAX_BATCH": 500}
    declared = Declared(bodies(config)["NewJobBatch"])
    found = FieldErrors()
    declared.check({"jobs": [dict(item) for _ in range(500)]}, found)
    assert len(found) == 100 and found.full
    assert found[0] == {"field": "jobs[0].x0", "detail": "Unknown field."}
    assert found.at("jobs[499]")  # past the cap, every item counts as bad: none is enqueued


def test_a_declaration_is_compiled_once_per_process_and_only_for_its_own_settings() -> None:
    """Apps with the same settings share a compiled declaration; other job types do not."""
    same = bodies({**DEFAULTS, "MAX_BATCH": 3})["NewJob"]
    assert declared(same) is declared(BODIES["NewJob"])
    other = bodies({**DEFAULTS, "MAX_BATCH": 3, "JOB_TYPES": {"fax": {}}})["NewJob"]
    assert declared(other) is not declared(same)
    job = {"type": "fax", "payload": {}}
    assert declared(other).passes(job) and not declared(same).passes(job)


def test_jsonschema_is_imported_on_the_first_bad_body_not_at_start() -> None:
    """A valid body is checked by fastjsonschema alone; jsonschema (47 ms of every start)
    loads when a body fails and its errors are explained, and explains it as before."""
    script = """if True:
        import sys
        from queuelog.server.config import DEFAULTS
        from queuelog.server.requests.bodies import bodies
        from queuelog.server.requests.check import declared
        from queuelog.server.requests.explain import FieldErrors
        new_job = declared(bodies(DEFAULTS)["NewJob"])
        assert new_job.passes({"type": "email", "payload": {}})
        print("jsonschema" in sys.modules)
        found = FieldErrors()
        new_job.check({"type": "email", "payload": {}, "priority": "urgent"}, found)
        print("jsonschema" in sys.modules, [e["field"] for e in found])
    """
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["False", "True ['priority']"]

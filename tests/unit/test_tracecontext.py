"""W3C Trace Context: what is kept and what is dropped; the runner hands it on; and a server
without OpenTelemetry configured imports none of it."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from queuelog.model.claimed import ClaimedJob
from queuelog.model.tracecontext import carried, from_headers, traceparent, tracestate
from queuelog.server.tracing import configured
from queuelog.worker.job import JobRun, Settings

TRACE, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{PARENT}-01"


@pytest.mark.parametrize("sent, kept", [
    ([VALID], VALID),
    ([f" {VALID}\t"], VALID),                            # optional whitespace around it
    ([f"00-{TRACE}-{PARENT}-00"], f"00-{TRACE}-{PARENT}-00"),  # not sampled: still kept
    ([f"cc-{TRACE}-{PARENT}-01-what-the-future-holds"], VALID),  # a later version, read as 00
    ([f"cc-{TRACE}-{PARENT}-01"], VALID),
    ([], None),
    ([VALID, VALID], None),                              # sent twice: which one?
    ([f"00-{TRACE.upper()}-{PARENT}-01"], None),         # upper-case hex
    ([f"00-{'0' * 32}-{PARENT}-01"], None),              # all-zero trace id
    ([f"00-{TRACE}-{'0' * 16}-01"], None),               # all-zero parent id
    ([f"ff-{TRACE}-{PARENT}-01"], None),                 # version ff is forbidden
    ([f"00-{TRACE}-{PARENT}-01-extra"], None),           # version 00 has nothing after
    ([f"cc-{TRACE}-{PARENT}-01x"], None),                # a later version: "-" after 55
    ([f"00-{TRACE[:-1]}-{PARENT}-01"], None),            # short trace id
    ([f"00-{TRACE}-{PARENT}-1"], None),                  # short flags
    ([f"00_{TRACE}_{PARENT}_01"], None),
    ([f"0g-{TRACE}-{PARENT}-01"], None),
    ([""], None),
])
def test_traceparent_is_kept_only_as_the_spec_reads_it(sent: list[str], kept: str | None):
    assert traceparent(sent) == kept


@pytest.mark.parametrize("sent, kept", [
    (["congo=t61rcWkgMzE"], "congo=t61rcWkgMzE"),
    (["rojo=00f067aa0ba902b7", "congo=t61rcWkgMzE"], "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
    ([" rojo=1 ,, congo=2 "], "rojo=1,congo=2"),         # OWS and empty members dropped
    (["tenant1@vendor=x", "a-b_c*d/e=y z"], "tenant1@vendor=x,a-b_c*d/e=y z"),
    ([""], None),
    (["Rojo=1"], None),                                  # keys are lower case
    (["rojo=1,rojo=2"], None),                           # a key twice
    (["rojo"], None),                                    # no value
    (["rojo=a,b"], None),                                # "b" is no member
    (["rojo=ends-with-space "], "rojo=ends-with-space"),  # OWS is not the value's
    (["rojo=has=equals"], None),
    (["rojo=\x7f"], None),
    ([",".join(f"k{i}=v" for i in range(32))], ",".join(f"k{i}=v" for i in range(32))),
    ([",".join(f"k{i}=v" for i in range(33))], None),    # over 32 members
])
def test_tracestate_is_kept_only_when_well_formed(sent: list[str], kept: str | None):
    assert tracestate(sent) == kept


def test_a_long_tracestate_loses_its_longest_then_its_rightmost_members():
    big = "big=" + "x" * 200                              # over 128: dropped first
    small = [f"k{i:02d}=" + "v" * 40 for i in range(14)]  # 44 characters each
    kept = tracestate([",".join([small[0], big, *small[1:]])])
    assert kept is not None and len(kept) <= 512 and "big=" not in kept
    assert kept.split(",") == small[:11]  # 11 * 45 - 1 = 494; a 12th would be 539


def test_tracestate_goes_only_with_a_valid_traceparent():
    assert from_headers([VALID], ["a=1"]) == (VALID, "a=1")
    assert from_headers(["00-nope"], ["a=1"]) == (None, None)
    assert from_headers([], ["a=1"]) == (None, None)
    assert from_headers([VALID], ["A=1"]) == (VALID, None)  # a bad state alone is dropped
    assert carried({"traceparent": VALID, "tracestate": "a=1"}) == {
        "traceparent": VALID, "tracestate": "a=1"}
    assert carried({"traceparent": "junk", "tracestate": "a=1"}) == {}
    assert carried({"traceparent": None}) == {}


def test_the_runner_hands_the_jobs_trace_context_to_the_command_and_never_its_own():
    env = {"PATH": "/bin", "TRACEPARENT": f"00-{'1' * 32}-{'2' * 16}-01", "TRACESTATE": "r=1"}

    def run_of(job: dict) -> JobRun:
        return JobRun(ClaimedJob.from_json({"id": 7, "type": "email", "attempt": 1, **job}),
                      settings=Settings(["true"], env), client=None, answers=None,  # type: ignore[arg-type]
                      must_stop=lambda: False, refused=lambda exc: None, log=print)

    traced = run_of({"traceparent": VALID, "tracestate": "congo=t61"}).child_env()
    assert (traced["TRACEPARENT"], traced["TRACESTATE"]) == (VALID, "congo=t61")
    untraced = run_of({"traceparent": None, "tracestate": None}).child_env()
    assert "TRACEPARENT" not in untraced and "TRACESTATE" not in untraced
    assert run_of({"traceparent": VALID}).child_env().get("TRACESTATE") is None


@pytest.mark.parametrize("env, on", [
    ({}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "console, otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "console"}, False),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
    ({"OTEL_SERVICE_NAME": "api"}, False),  # naming the service asks for no export
])
def test_tracing_is_configured_by_an_otlp_endpoint_or_exporter(env: dict, on: bool):
    assert configured(env) is on


def test_a_server_without_otel_configured_imports_none_of_it(tmp_path):
    """With the extra installed or not: the app is built and serves an enqueue, a claim
    and a complete, and no ``opentelemetry`` module was ever imported."""
    script = """
import sys
from queuelog import create_app
app = create_app({"TESTING": True, "DATABASE_URL": "sqlite:///%s/q.sqlite3",
                  "SECRET_KEY": "s", "BOOTSTRAP_ADMIN": False})
store = app.extensions["queuelog.store"]
_, p = store.accounts.create_key("p", "producer", types=None, max_priority=30)
_, w = store.accounts.create_key("w", "worker", types=None, max_priority=30)
c = app.test_client()
tp = {"traceparent": "%s"}
assert c.post("/jobs", json={"type": "email"}, headers={"Authorization": "Bearer " + p, **tp}).status_code == 201
job = c.post("/jobs/claim", json={}, headers={"Authorization": "Bearer " + w}).json
assert job["traceparent"] == tp["traceparent"], job
assert c.post(f"/jobs/{job['id']}/complete", json={"attempt": 1},
              headers={"Authorization": "Bearer " + w}).status_code == 200
print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
""" % (tmp_path, VALID)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

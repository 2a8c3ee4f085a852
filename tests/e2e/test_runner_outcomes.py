"""``queuelog work`` and a job's outcome (issue 36): one request per job, cancel, progress.

Against a live gunicorn server, with real commands; the fixtures are test_runner.py's.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any

from test_runner import (DropFirstAnswer, Live, alive, finished, jtype, live,  # noqa: F401
                         script, wait_for, work, workers)


def test_an_idle_runner_makes_one_request_per_job_and_stops_at_once(live, work, jtype,
                                                                     tmp_path):
    """With one slot, each job's answer claims the next (``next``, long-polling): jobs that
    come one at a time cost one request each, failures included, and a SIGTERM does not
    wait for that long poll."""
    handler = script(tmp_path, "h.sh", """case "$(cat)" in
  *fail*) echo "no such invoice" >&2; exit 3 ;;
  *) echo "{\\"done\\": $QUEUELOG_JOB_ID}" ;;
esac
""")
    proxy = DropFirstAnswer(live.server.port, drop=False)
    try:
        w = work("--types", jtype, "--lease", "60", "--", handler,
                 env={"QUEUELOG_URL": f"http://127.0.0.1:{proxy.server_address[1]}"})
        wait_for(lambda: proxy.requests, what="the first claim")
        time.sleep(0.2)
        answers = []
        for payload in ({}, {"fail": 1}, {}, {}):
            job = live.producer.enqueue(jtype, payload, max_retries=0)
            done = wait_for(lambda j=job: finished(live, j["id"]), what="the job")
            assert done["status"] == ("failed" if payload else "completed"), done
            verb = "fail" if payload else "complete"
            answers.append(f"POST /jobs/{job['id']}/{verb}")
            # Its answer long-polls for the next job now (and nothing else is sent), and
            # the job's line is written while it waits, not when it comes back.
            wait_for(lambda n=len(answers): len(proxy.requests) == n + 1, timeout=5,
                     what="the answer")
            wait_for(lambda j=job: f"job={j['id']} " in w.log(), timeout=5,
                     what="the job's line")
        assert proxy.requests == ["POST /jobs/claim", *answers]
        time.sleep(0.3)
        begun = time.monotonic()
        w.signal(signal.SIGTERM)
        assert w.wait(timeout=10) == 0
        assert time.monotonic() - begun < 3  # not the 30 s the answer's long poll may last
        assert w.log().count("outcome=completed") == 3 and "outcome=failed" in w.log()
        assert proxy.requests[len(answers) + 1:] in ([], [f"GET /jobs/{done['id']}"])
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_the_answer_a_stopped_runner_left_waiting_claims_nothing(live, work, jtype):
    job = live.producer.enqueue(jtype, {})
    w = work("--types", jtype, "--", "true")
    wait_for(lambda: finished(live, job["id"]), what="the job")
    time.sleep(0.3)  # its answer waits on the server for the next job now
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=10) == 0
    assert f"job={job['id']} type={jtype} attempt=1 outcome=completed" in w.log()
    after = live.producer.enqueue(jtype, {})
    time.sleep(1.5)  # the server saw the connection close: the job is not claimed for it
    assert live.admin.get(after["id"])["status"] == "pending"


def test_a_cancelled_command_is_killed_within_a_third_of_its_lease(live, work, jtype,
                                                                   tmp_path):
    pid_file = tmp_path / "pid"
    handler = script(tmp_path, "held.sh", f"""case "$(cat)" in
  *long*) echo $$ > {pid_file}; sleep 60 ;;
esac
""")
    job = live.producer.enqueue(jtype, {"long": 1})
    w = work("--types", jtype, "--lease", "3", "--", handler)
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(),
             what="the command to start")
    command = int(pid_file.read_text())
    begun = time.monotonic()
    assert live.producer.cancel(job)["status"] == "cancelled"
    wait_for(lambda: not alive(command), timeout=5, what="the command to be killed")
    assert time.monotonic() - begun < 2.5  # heartbeats every second with a 3 s lease
    wait_for(lambda: f"job={job['id']} type={jtype} attempt=1 outcome=cancelled" in w.log(),
             timeout=5, what="its log line")
    now = live.admin.get(job["id"])
    assert now["status"] == "cancelled" and now["result"] is None and now.get("error") is None
    assert [a["outcome"] for a in now["attempts"]] == ["cancelled"]
    nxt = live.producer.enqueue(jtype, {})  # and the runner works on
    assert wait_for(lambda: finished(live, nxt["id"]), what="the next job")["attempt"] == 1


def test_progress_written_by_a_command_shows_in_the_job(live, work, jtype, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    handler = script(tmp_path, "progress.sh", f"""echo "$QUEUELOG_PROGRESS_FILE" > {marks}/path
echo '{{"percent": 40, "step": "resizing"}}' > "$QUEUELOG_PROGRESS_FILE"
touch {marks}/40
until [ -e {marks}/next ]; do sleep 0.05; done
echo 'not JSON' > "$QUEUELOG_PROGRESS_FILE"
sleep 1.5
echo '{{"percent": 80}}' > "$QUEUELOG_PROGRESS_FILE"
touch {marks}/80
until [ -e {marks}/end ]; do sleep 0.05; done
echo '{{"pages": 12}}'
""")
    job = live.producer.enqueue(jtype, {})
    # A 60 s lease beats every 10 s: only the progress can bring a heartbeat this soon.
    w = work("--types", jtype, "--lease", "60", "--", handler)

    def shown(progress: dict[str, Any], mark: str) -> None:
        wait_for((marks / mark).exists, what=f"progress {mark} written")
        written = time.monotonic()
        wait_for(lambda: live.producer.get(job["id"])["progress"] == progress, timeout=4,
                 what=f"progress {mark} shown")
        assert time.monotonic() - written < 2.5
    shown({"percent": 40, "step": "resizing"}, "40")
    (marks / "next").touch()
    shown({"percent": 80}, "80")
    (marks / "end").touch()
    done = wait_for(lambda: finished(live, job["id"]), what="completion")
    assert done["status"] == "completed" and done["result"] == {"pages": 12}
    assert done["progress"] == {"percent": 80}
    assert w.log().count("progress skipped") == 1  # the bad write: one line, job unharmed
    folder = os.path.dirname((marks / "path").read_text().strip())
    assert folder and not os.path.exists(folder)  # removed with its job


def test_a_command_reads_its_parents_from_a_private_file_removed_after(live, work, jtype,
                                                                        tmp_path):
    """``QUEUELOG_JOB_PARENTS_FILE`` holds the claimed job's ``parents`` as JSON, in the
    job's 0700 folder, gone once the command ended; a job without parents has no such
    variable."""
    marks = tmp_path / "marks"
    marks.mkdir()
    handler = script(tmp_path, "fan-in.sh", f"""case "$(cat)" in
  *fail*) exit 3 ;;
  *child*) echo "$QUEUELOG_JOB_PARENTS_FILE" > {marks}/path
    stat -c %a "${{QUEUELOG_JOB_PARENTS_FILE%/*}}" > {marks}/mode
    printf '{{"parents": %s}}\\n' "$(cat "$QUEUELOG_JOB_PARENTS_FILE")" ;;
  *) printf '{{"size": "small", "file": "%s"}}\\n' "${{QUEUELOG_JOB_PARENTS_FILE-none}}" ;;
esac
""")
    ok = live.producer.enqueue(jtype, {})
    bad = live.producer.enqueue(jtype, {"fail": 1}, max_retries=0)
    child = live.producer.enqueue(jtype, {"child": 1}, depends_on=[bad["id"], ok["id"]],
                                  on_parent_failure="run")
    assert child["status"] == "blocked"
    work("--types", jtype, "--", handler)
    done = wait_for(lambda: finished(live, child["id"]), what="the fan-in job")
    assert live.admin.get(ok["id"])["result"] == {"size": "small", "file": "none"}
    assert done["status"] == "completed" and done["result"] == {"parents": [
        {"id": bad["id"], "type": jtype, "status": "failed", "result": None},
        {"id": ok["id"], "type": jtype, "status": "completed",
         "result": {"size": "small", "file": "none"}}]}
    assert (marks / "mode").read_text().strip() == "700"
    path = (marks / "path").read_text().strip()
    assert path and not os.path.exists(path) and not os.path.exists(os.path.dirname(path))


def test_a_job_without_parents_gets_no_parents_file_from_the_runners_environment(
        live, work, jtype, tmp_path):
    """CONTRACT: ``QUEUELOG_JOB_PARENTS_FILE`` is given "only when the job has parents". A
    runner started where the variable is set (by a job of another runner, say) must not pass
    that stale path on to a job without parents, as it does not pass on its TRACEPARENT."""
    stale = tmp_path / "stale-parents.json"
    stale.write_text('[{"id": 1, "type": "x", "status": "completed", "result": {}}]')
    handler = script(tmp_path, "h.sh", """cat > /dev/null
printf '{"file": "%s", "progress": "%s"}\\n' "${QUEUELOG_JOB_PARENTS_FILE-none}" \\
  "${QUEUELOG_PROGRESS_FILE%/*}"
""")
    job = live.producer.enqueue(jtype, {})
    work("--types", jtype, "--", handler,
         env={"QUEUELOG_JOB_PARENTS_FILE": str(stale), "QUEUELOG_PROGRESS_FILE": "/stale"})
    done = wait_for(lambda: finished(live, job["id"]), what="the job")
    assert done["status"] == "completed", done
    assert done["result"]["file"] == "none"
    assert done["result"]["progress"] not in ("", "/stale")  # the job's own folder

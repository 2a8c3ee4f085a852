#!/usr/bin/env bash
# worker.sh HANDLER [ARG...]: a queuelog worker in bash, one job at a time (curl and jq).
set -u
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# SIGTERM or SIGINT: drop the waiting long poll at once, or let the running job finish first.
stop=; poll=; trap 'stop=1; [ -z "$poll" ] || kill "$poll" 2>/dev/null' TERM INT
call=(curl -fsS -H "Authorization: Bearer $QUEUELOG_TOKEN" -H 'Content-Type: application/json')
post() { "${call[@]}" "$QUEUELOG_URL/jobs/$1" -d "$2"; }  # post PATH JSON: one worker call
while [ -z "$stop" ]; do
  # Long poll: the answer comes as soon as a job is due, or empty (204) after 30 s.
  # curl itself in the background, not post: killing a function's subshell leaves its curl.
  "${call[@]}" "$QUEUELOG_URL/jobs/claim" -d '{"wait": 30, "lease_seconds": 90}' >"$tmp/job" &
  poll=$!; [ -z "$stop" ] || kill "$poll"  # a signal taken before $poll was set
  wait "$poll"; got=$?; poll=
  [ -z "$stop" ] || break
  [ "$got" = 0 ] || { sleep 5; continue; }
  job=$(<"$tmp/job"); [ -n "$job" ] || continue
  id=$(jq .id <<<"$job"); attempt=$(jq .attempt <<<"$job")
  # The handler's environment, as `queuelog work` makes it: the job's fields, no token.
  export QUEUELOG_JOB_ID=$id QUEUELOG_JOB_ATTEMPT=$attempt \
    QUEUELOG_JOB_TYPE=$(jq -r .type <<<"$job") QUEUELOG_JOB_PRIORITY=$(jq -r .priority <<<"$job")
  # Heartbeat every 30 s, a third of the lease, while the handler runs.
  ( while sleep 30; do post "$id/heartbeat" "{\"attempt\": $attempt}" >/dev/null; done ) &
  beat=$!
  if jq -c .payload <<<"$job" | env -u QUEUELOG_TOKEN "$@" >"$tmp/out" 2>"$tmp/err"; then
    kill "$beat"
    post "$id/complete" "$(jq -n --argjson a "$attempt" --slurpfile r "$tmp/out" \
      '{attempt: $a, result: $r[0]}')" >/dev/null
  else
    status=$?; kill "$beat"
    post "$id/fail" "$(jq -n --argjson a "$attempt" --arg s "exit status $status" \
      --rawfile e "$tmp/err" '{attempt: $a, error: ($s + "\n" + $e[-4000:])}')" >/dev/null
  fi
done

#!/usr/bin/env bash
# worker.sh HANDLER [ARG...]: a queuelog worker in bash, one job at a time (curl and jq).
set -u
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# The token goes to curl in a header file (printf is a builtin), never on a command line
# that every user of the host can read with ps.
(umask 077; printf 'Authorization: Bearer %s\n' "$QUEUELOG_TOKEN" >"$tmp/auth")
post() {  # post PATH JSON: one worker call
  curl -fsS "$QUEUELOG_URL/jobs/$1" -H @"$tmp/auth" \
    -H 'Content-Type: application/json' -d "$2"
}
heartbeat() {  # heartbeat ID ATTEMPT: every 30 s, a third of the lease, until killed
  local nap=""
  trap 'kill "$nap" 2>/dev/null; exit 0' TERM  # its sleep goes with it: no orphan
  while :; do
    sleep 30 & nap=$!; wait "$nap"
    post "$1/heartbeat" "{\"attempt\": $2}" >/dev/null
  done
}
while true; do
  # Long poll: the answer comes as soon as a job is due, or empty (204) after 30 s.
  job=$(post claim '{"wait": 30, "lease_seconds": 90}') || { sleep 5; continue; }
  [ -n "$job" ] || continue
  id=$(jq .id <<<"$job"); attempt=$(jq .attempt <<<"$job")
  # The handler's environment, as `queuelog work` makes it: the job's fields, no token.
  export QUEUELOG_JOB_ID=$id QUEUELOG_JOB_ATTEMPT=$attempt \
    QUEUELOG_JOB_TYPE=$(jq -r .type <<<"$job") QUEUELOG_JOB_PRIORITY=$(jq -r .priority <<<"$job")
  heartbeat "$id" "$attempt" & beat=$!
  if jq -c .payload <<<"$job" | env -u QUEUELOG_TOKEN "$@" >"$tmp/out" 2>"$tmp/err"; then
    kill "$beat"; wait "$beat"
    post "$id/complete" "$(jq -n --argjson a "$attempt" --slurpfile r "$tmp/out" \
      '{attempt: $a, result: $r[0]}')" >/dev/null
  else
    status=$?; kill "$beat"; wait "$beat"
    post "$id/fail" "$(jq -n --argjson a "$attempt" --arg s "exit status $status" \
      --rawfile e "$tmp/err" '{attempt: $a, error: ($s + "\n" + $e[-4000:])}')" >/dev/null
  fi
done

#!/bin/sh
# A queuelog job handler that reports its progress: a JSON object written to the file named
# by QUEUELOG_PROGRESS_FILE goes to the server with the runner's next heartbeat (within 2 s).
set -eu
steps=$(jq -er .steps)                 # the payload, {"steps": N}, is on standard input
i=0
while [ "$i" -lt "$steps" ]; do
  i=$((i + 1))
  sleep 1                              # one step of the real work
  echo "{\"percent\": $((100 * i / steps)), \"step\": $i}" > "$QUEUELOG_PROGRESS_FILE"
done
echo "{\"steps\": $steps}"

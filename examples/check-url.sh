#!/bin/sh
# A queuelog job handler: fetch the URL in the payload, print how it answered (curl, jq).
set -eu
url=$(jq -er .url)                       # the payload, {"url": "..."}, is on standard input
echo "job $QUEUELOG_JOB_ID (attempt $QUEUELOG_JOB_ATTEMPT): checking $url" >&2
curl -fsS -o /dev/null --max-time 20 \
  -w '{"status": %{http_code}, "bytes": %{size_download}, "seconds": %{time_total}}\n' "$url"

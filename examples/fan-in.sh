#!/bin/sh
# A queuelog job handler for a workflow's last step: QUEUELOG_JOB_PARENTS_FILE names a JSON list
# of its parents ({"id", "type", "status", "result"}, in depends_on order); jq sorts them out.
set -eu
jq -c '{ready: [.[] | select(.status == "completed") | .result.url],
        failed: [.[] | select(.status != "completed") | .id]}' "$QUEUELOG_JOB_PARENTS_FILE"

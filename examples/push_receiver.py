"""A push target for `queuelog work --post`: verify the signature, drop repeats, do the work.

    HOOK_SECRET_FILE=hook.secret flask --app examples/push_receiver.py run --port 8125

Any Standard Webhooks library verifies what the runner signs; this one is Python's
(`pip install flask standardwebhooks`).
"""
from __future__ import annotations

import os
from typing import Any

from flask import Flask, abort, request
from standardwebhooks import Webhook, WebhookVerificationError

app = Flask(__name__)
with open(os.environ.get("HOOK_SECRET_FILE", "hook.secret"), encoding="utf-8") as fh:
    webhook = Webhook(fh.read().strip())
# Delivery is at least once: a job whose answer was lost comes again with the same
# webhook-id. A real receiver keeps these ids in its database, with the work's effect.
done: dict[str, dict[str, Any]] = {}


@app.post("/hooks/welcome")
def welcome() -> dict[str, Any]:
    """Send the welcome email of one job; the JSON answered is the job's result."""
    try:
        payload = webhook.verify(request.get_data(), request.headers)
    except WebhookVerificationError:
        abort(401)  # not signed with our secret: a 4xx fails the job without retry
    job_id = request.headers["webhook-id"]
    if job_id not in done:  # a repeat gets the first answer again
        # ... send the email here; an exception answers 500, and the job is retried ...
        done[job_id] = {"sent_to": payload["to"],
                        "attempt": int(request.headers["Queuelog-Job-Attempt"])}
    return done[job_id]


@app.post("/chat")
def chat() -> tuple[str, int]:
    """A stand-in for a team chat's incoming web hook: it prints the message's text."""
    print(f"chat: {request.get_json()['text']}", flush=True)
    return "", 204

"""gunicorn reads this file from the working directory: `gunicorn 'app:app'` needs no flag.

It makes queuelog's counters and request histogram sum over every gunicorn worker
(prometheus_client's multiprocess mode, in a fresh directory unless PROMETHEUS_MULTIPROC_DIR
is set). With a config file of your own (`-c yours.py`), put this import in it; if yours
defines `child_exit` or `on_exit` too, call ours from it.
"""
from queuelog.server.gunicorn_hooks import child_exit, on_exit, on_starting  # noqa: F401

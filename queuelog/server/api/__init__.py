"""The HTTP API: producer, worker, admin, read, types and audit blueprints."""

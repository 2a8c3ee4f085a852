"""The named locks' keys (``Backend.lock``): fixed numbers, the same in every process."""
from __future__ import annotations

MIGRATE_LOCK = 7262017
NAMES_LOCK = 7262018  # API key and user names share one name space

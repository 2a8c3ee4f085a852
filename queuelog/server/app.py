"""The Flask class the server runs: Flask, less work that every request repeated."""
from __future__ import annotations

from typing import Any, Callable

from flask import Flask


class QueuelogFlask(Flask):
    """Flask, with ``ensure_sync``'s answer kept per function."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._synced: dict[Callable[..., Any], Callable[..., Any]] = {}

    def ensure_sync(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """Flask's, asked once per view or hook rather than at every call.

        Flask asks ``inspect`` whether a function is a coroutine function each time it
        calls a view or a before/after-request hook (ten times a request here); the
        answer cannot change, and the views and hooks are a fixed set.
        """
        try:
            return self._synced[func]
        except KeyError:
            synced = self._synced[func] = super().ensure_sync(func)
            return synced
        except TypeError:  # unhashable: ask every time, as Flask does
            return super().ensure_sync(func)

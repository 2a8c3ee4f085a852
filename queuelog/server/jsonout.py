"""Answers' JSON: Flask's provider with the faster encoder of ``model/jsontext.py``."""
from __future__ import annotations

from typing import Any

from flask.json.provider import DefaultJSONProvider

from queuelog.model import jsontext


class FastJSONProvider(DefaultJSONProvider):
    """Compact UTF-8 JSON, keys in the order the code built them (a job's fields in the
    contract's order), through orjson; Flask's own for anything else it is asked."""

    sort_keys = False

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        """``obj`` as JSON text; a pretty-printed or otherwise tuned dump is Flask's."""
        if kwargs.get("separators", (",", ":")) == (",", ":") and set(kwargs) <= {"separators"}:
            return jsontext.dumps_bytes(obj, default=self.default).decode("utf-8")
        return super().dumps(obj, **kwargs)


def init_app(app: Any) -> None:
    """Answer JSON through ``FastJSONProvider``."""
    app.json = FastJSONProvider(app)

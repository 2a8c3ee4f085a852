"""Validation of request bodies and query strings against their declarations (``bodies.py``).

The request path runs a fastjsonschema validator, compiled once per app; only a value that
fails it goes through jsonschema's ``iter_errors``, which knows every error's path and keyword,
so a 422 names each field (``jobs[3].priority``) with a plain-English detail
(``explain.py``). A 422 lists at most ``MAX_ERRORS`` errors, and the work spent on a bad
request stops there too: it grows with the request's size, never with its errors squared.
"""
from __future__ import annotations

import json
import re
import threading
from typing import Any, Callable, Iterable, Mapping

import fastjsonschema
from flask import Flask, current_app, request

from queuelog.model.problems import MalformedRequest, ValidationFailed
from queuelog.server.requests.bodies import bodies, queries
from queuelog.server.requests.explain import MAX_ERRORS, Explainer, FieldErrors
from queuelog.server.requests.parse import is_timestamp, object_body

JSON = dict[str, Any]
FORMATS = {"date-time": is_timestamp}
__all__ = ["MAX_ERRORS", "FieldErrors", "body", "query", "validate", "given", "field_errors",
           "params", "unknown"]


class Declared:
    """One declaration, compiled: fastjsonschema for the verdict, jsonschema for the errors."""

    def __init__(self, schema: JSON) -> None:
        self.schema = schema
        # fastjsonschema runs a ``not`` by catching the exception its subschema raises, and
        # building that exception is costly: it would be most of a batch enqueue's checks. So the
        # verdict's schema leaves them out and ``Nots`` decides them apart.
        without, self.nots = _split_nots(schema)
        self.fast: Callable[[Any], Any] = fastjsonschema.compile(
            without, formats=FORMATS, use_default=False)  # a default is the view's to apply
        self.explainer = Explainer(schema)  # the whole declaration: its errors as before
        self.to_int = _int_fixer(schema)

    def check(self, data: Any, errors: FieldErrors, out_of_range: bool = False) -> Any:
        """``data`` with integral floats under ``integer`` made ints; its errors to ``errors``."""
        skip = self.explainer.out_of_range(data, errors) if out_of_range else set()
        if skip or not self.passes(data):
            self.explainer.explain(data, errors, skip)
        return self.to_int(data) if self.to_int else data

    def passes(self, data: Any) -> bool:
        """The verdict alone: True when ``data`` meets the whole declaration."""
        try:
            self.fast(data)
        except fastjsonschema.JsonSchemaException:
            return False
        return not any(n.broken(data) for n in self.nots)


class Not:
    """A ``not`` clause of a declaration: where it applies (a path of ``properties`` names
    and ``items`` steps) and its subschema, compiled."""

    def __init__(self, path: tuple[str | None, ...], schema: JSON) -> None:
        self.path = path  # a name: that property; None: every item of a list
        self.required = frozenset(schema.get("required", ()))
        self.matches: Callable[[Any], Any] = fastjsonschema.compile(schema, formats=FORMATS)

    def broken(self, data: Any) -> bool:
        """True when some value at the path matches the subschema the clause forbids."""
        for value in _at(data, self.path):
            # Without every required name it cannot match: no subschema run, no exception.
            if self.required and not (type(value) is dict and self.required <= value.keys()):
                continue
            try:
                self.matches(value)
            except fastjsonschema.JsonSchemaException:
                continue
            return True
        return False


def _split_nots(schema: JSON, path: tuple[str | None, ...] = ()) -> tuple[JSON, list[Not]]:
    """``schema`` without its ``not`` clauses (in properties and items, at any depth), and
    those clauses."""
    out, nots = dict(schema), []
    if "not" in out:
        nots.append(Not(path, out.pop("not")))
    if isinstance(out.get("properties"), dict):
        props = {}
        for name, sub in out["properties"].items():
            props[name], inner = _split_nots(sub, (*path, name))
            nots += inner
        out["properties"] = props
    if isinstance(out.get("items"), dict):
        out["items"], inner = _split_nots(out["items"], (*path, None))
        nots += inner
    return out, nots


def _at(data: Any, path: tuple[str | None, ...]) -> list[Any]:
    """The values at ``path`` in ``data`` (see ``Not``); none where the shape differs."""
    values = [data]
    for step in path:
        if step is None:
            values = [item for v in values if type(v) is list for item in v]
        else:
            values = [v[step] for v in values if type(v) is dict and step in v]
    return values


def _int_fixer(schema: JSON) -> Callable[[Any], Any] | None:
    """A function that turns 3.0 into 3 wherever ``schema`` says integer; None if nowhere."""
    kinds = schema.get("type")
    if kinds == "integer" or isinstance(kinds, list) and "integer" in kinds:
        return lambda v: int(v) if type(v) is float and v.is_integer() else v
    props = {k: f for k, sub in schema.get("properties", {}).items()
             for f in [_int_fixer(sub)] if f is not None}
    item = _int_fixer(schema["items"]) if "items" in schema else None
    if not props and item is None:
        return None

    def fix(value: Any) -> Any:
        if props and type(value) is dict:
            for name, f in props.items():
                if name in value:
                    value[name] = f(value[name])
        elif item is not None and type(value) is list:
            value[:] = [item(v) for v in value]
        return value
    return fix


def _declared(app: Flask) -> dict[str, Declared]:
    # Looked up once per app (its job types and MAX_BATCH are in the schemas). Two threads
    # racing here build the dict twice and keep one: harmless, and no lock on the hot path.
    found = app.extensions.get("queuelog.declared")
    if found is None:
        found = {name: declared(schema) for name, schema in
                 {**bodies(app.config), **queries(app.config)}.items()}
        app.extensions["queuelog.declared"] = found
    return found  # type: ignore[no-any-return]


# Declarations compiled in this process, by their JSON text: apps with the same settings
# share them (compiling one is most of a fresh test app's first requests).
_COMPILED: dict[str, Declared] = {}
_COMPILED_KEPT = 256
_COMPILING = threading.Lock()


def declared(schema: JSON) -> Declared:
    """``schema`` compiled, or the same declaration compiled before in this process."""
    key = json.dumps(schema, sort_keys=True)
    found = _COMPILED.get(key)
    if found is None:
        with _COMPILING:
            found = _COMPILED.get(key) or Declared(schema)
            _COMPILED[key] = found
            if len(_COMPILED) > _COMPILED_KEPT:  # the oldest first: dicts keep their order
                del _COMPILED[next(iter(_COMPILED))]
    return found


def body(name: str, errors: FieldErrors | None = None) -> dict[str, Any]:
    """The request's body checked against its declaration ``bodies.BODIES[name]``.

    400/413/415 for a body that is not a strict JSON object; 422 (ValidationFailed) listing
    the fields that break the declaration, each at its path (``jobs[3].priority``).
    Integral floats under ``integer`` come back as ints. No body at all is ``{}``.
    With ``errors`` given, field errors are added there instead of raised, so a view
    can add the rules a schema cannot state and report them all at once (``field_errors``).
    """
    data, out_of_range = object_body()
    return validate(name, data, errors, out_of_range)


def validate(name: str, data: Any, errors: FieldErrors | None = None,
             out_of_range: bool = False) -> Any:
    """Check ``data`` against the declaration ``name`` of the current app (see ``body``)."""
    found = FieldErrors() if errors is None else errors
    data = _declared(current_app)[name].check(data, found, out_of_range)
    if errors is None:
        field_errors(found)
    return data


def query(name: str, args: Mapping[str, str] | None = None,
          errors: FieldErrors | None = None) -> dict[str, Any]:
    """The query string (``request.args`` unless given) checked against ``QUERIES[name]``.

    A parameter the declaration lacks, or one given twice, is a 400 naming it: a mistyped
    filter silently ignored would answer as if every job matched it. An ``integer`` is read
    from ASCII digits (anything else stays a string, so the error says "Must be an integer.").
    """
    declared = _declared(current_app)[name]
    source = request.args if args is None else args
    strangers = unknown(name, source)
    if strangers:
        raise MalformedRequest(
            f"Unknown query parameter{'s' if len(strangers) > 1 else ''}: "
            f"{', '.join(strangers)[:200]}. This endpoint takes {', '.join(params(name))}.",
            errors=[{"field": p[:100], "detail": "Unknown parameter."}
                    for p in strangers[:MAX_ERRORS]])
    # A second value would be dropped unsaid: which one the caller meant is unknown.
    twice = [p for p in params(name) if len(getattr(source, "getlist", lambda _: ())(p)) > 1]
    if twice:
        raise MalformedRequest(
            f"Query parameter{'s' if len(twice) > 1 else ''} given more than once: "
            f"{', '.join(twice)}. Give each one value.",
            errors=[{"field": p, "detail": "Given more than once."} for p in twice])
    data: dict[str, Any] = {}
    found = FieldErrors() if errors is None else errors
    for param, schema in declared.schema["properties"].items():
        raw = source.get(param)
        if raw is not None:
            data[param] = _from_text(raw, schema)
    declared.check(data, found)
    if errors is None:
        field_errors(found)
    return data


# A query's number: decimal digits, as a person types seconds ("2", "0.5"), or as a
# program prints a float ("2.995445246226299", "1e-05"); bounded, so never slow or infinite.
_DECIMAL = re.compile(r"[0-9]{1,20}(?:\.[0-9]{1,40})?(?:[eE][-+]?[0-9]{1,3})?")


def _from_text(raw: str, schema: JSON) -> Any:
    """A query value as the JSON value its schema expects, where it reads as one."""
    if schema.get("type") == "integer" and raw.isascii() and raw.isdigit() and len(raw) <= 19:
        return int(raw)
    if schema.get("type") == "number" and _DECIMAL.fullmatch(raw):
        return float(raw)
    return raw


def given(data: dict[str, Any], name: str, default: Any = None) -> Any:
    """A checked body's field; ``default`` when left out or ``null`` (the contract's rule)."""
    value = data.get(name)
    return default if value is None else value


def field_errors(errors: Iterable[dict[str, str]]) -> None:
    """Raise ValidationFailed (422) for the errors found, if any: at most MAX_ERRORS of them."""
    shown = list(errors)[:MAX_ERRORS]
    if shown:
        raise ValidationFailed("; ".join(f"{e['field']}: {e['detail']}" for e in shown),
                               errors=shown)



def params(name: str) -> list[str]:
    """The parameter names of the declared query string ``name``."""
    return list(_declared(current_app)[name].schema["properties"])


def unknown(name: str, args: Iterable[str], also: Iterable[str] = ()) -> list[str]:
    """The parameters in ``args`` that the query string ``name`` does not declare (nor
    ``also``, e.g. a form's ``csrf_token``), sorted."""
    return sorted(set(args) - set(params(name)) - set(also))

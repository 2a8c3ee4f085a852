"""Compile a JSON Schema (the subset request bodies use) into one checking function.

Why not a general validator: the bodies need every error at once, each with a contract-style
field path (``jobs[3].priority``) and a plain-English detail, and the check runs on every
request. A general validator stops at the first error (fastjsonschema) or is several times
slower and words its errors for schema authors (jsonschema). This compiler walks the schema
once, at start-up, into nested closures; checking a body then does no dictionary lookups on
the schema. It refuses any keyword it does not implement, so a declaration can never carry a
rule that is published in the OpenAPI document but silently not enforced.
``tests/test_schemas.py`` checks it against the ``jsonschema`` package on generated bodies.

Semantics follow JSON Schema 2020-12 for the supported keywords, with two conveniences:
an integral float (``3.0``) that passes an ``integer`` schema is replaced by the int in the
body, and ``format`` names a parser from ``FORMATS`` (its ``pattern``, if any, is the same
rule written for the document, so only the parser runs: it words the errors better).
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable

Errors = list[dict[str, str]]
# check(value, path, errors) -> the value, normalized (3.0 -> 3 under "integer").
Check = Callable[[Any, str, Errors], Any]
Format = Callable[[str], "str | None"]  # a string -> an error detail, or None when good

ANNOTATIONS = frozenset({"description", "default", "title", "examples", "$comment",
                         "deprecated", "readOnly", "writeOnly"})
SUPPORTED = ANNOTATIONS | {
    "type", "properties", "required", "additionalProperties", "items", "minItems",
    "maxItems", "minimum", "maximum", "minLength", "maxLength", "enum", "pattern", "format",
    "not"}
_TYPE_DETAIL = {"integer": "Must be an integer.", "number": "Must be a number.",
                "string": "Must be a string.", "boolean": "Must be true or false.",
                "object": "Must be a JSON object.", "array": "Must be a list.",
                "null": "Must be null."}


# The types a parsed JSON value of each schema type has (json.loads makes no subclasses).
_PLAIN = {"string": str, "boolean": bool, "object": dict, "array": list, "null": type(None)}


class SchemaError(ValueError):
    """A declaration uses a keyword or shape this compiler does not implement."""


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and (
            not isinstance(value, float) or math.isfinite(value))
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "null":
        return value is None
    raise SchemaError(f"unknown type {name!r}")


def compile_schema(schema: dict[str, Any], formats: dict[str, Format],
                   out_of_range: Any = None, pattern_details: dict[str, str] | None = None,
                   ) -> Check:
    """The checking function for ``schema``; SchemaError for anything unsupported.

    ``out_of_range`` is the parser's stand-in for a number no double holds: found anywhere
    in a value, it is an error at that value's path. ``pattern_details`` words a pattern's
    error (else "Must match <pattern>.").
    """
    return _Compiler(formats, out_of_range, pattern_details or {}).compile(schema)


def path_of(base: str, key: str | int) -> str:
    """A field path: ``name``, ``jobs[3]``, ``jobs[3].priority``."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key


class _Compiler:
    def __init__(self, formats: dict[str, Format], out_of_range: Any,
                 pattern_details: dict[str, str]) -> None:
        self.formats = formats
        self.oor = out_of_range
        self.pattern_details = pattern_details

    def compile(self, schema: dict[str, Any]) -> Check:
        unknown = set(schema) - SUPPORTED
        if unknown:
            raise SchemaError(f"unsupported keywords {sorted(unknown)}")
        # Rules on the value itself: a field gets one error, for the first rule it breaks.
        rules: list[Check] = []
        types = schema.get("type")
        if types is not None:
            rules.append(self._types([types] if isinstance(types, str) else list(types)))
        for build in (self._enum, self._range, self._length, self._string_rule):
            step = build(schema)
            if step is not None:
                rules.append(step)
        # Rules on its parts: every part reports, so a client learns every error at once.
        parts = [step for step in (self._object(schema), self._array(schema), self._not(schema))
                 if step is not None]
        leaf = "properties" not in schema and "items" not in schema
        oor = self.oor

        def check(value: Any, path: str, errors: Errors) -> Any:
            # A number no double holds is well-formed JSON, so a 422 at its field.
            if oor is not None and (value is oor or leaf and isinstance(value, (dict, list))
                                    and holds(value, oor)):
                errors.append({"field": path, "detail": "Holds a number out of range "
                                                        "(no double or integer can hold it)."})
                return value
            before = len(errors)
            for rule in rules:
                value = rule(value, path, errors)
                if len(errors) > before:
                    return value
            for part in parts:
                value = part(value, path, errors)
            return value
        return check

    def _types(self, names: list[str]) -> Check:
        detail = _TYPE_DETAIL[next((n for n in names if n != "null"), "null")]
        for name in names:
            _is_type(None, name)  # SchemaError for a type name JSON Schema does not have
        plain = tuple(_PLAIN[n] for n in names if n in _PLAIN)
        integer, number = "integer" in names, "number" in names

        def check(value: Any, path: str, errors: Errors) -> Any:
            kind = type(value)  # exact: a bool is no integer, though a subclass of int
            if kind in plain or (number and (kind is int or kind is float
                                             and math.isfinite(value))):
                return value
            if integer and (kind is int or kind is float and value.is_integer()):
                return int(value)  # JSON has one number type: 3.0 is the integer 3
            errors.append({"field": path, "detail": detail})
            return value
        return check

    def _enum(self, schema: dict[str, Any]) -> Check | None:
        if "enum" not in schema:
            return None
        options = list(schema["enum"])
        shown = ", ".join(str(o) for o in options if o is not None)

        def check(value: Any, path: str, errors: Errors) -> Any:
            # Compared with the type too: 1 == True and 0 == 0.0 in Python, not in JSON.
            if not any(value == o and type(value) is type(o) for o in options):
                errors.append({"field": path, "detail": f"Must be one of {shown}."})
            return value
        return check

    def _range(self, schema: dict[str, Any]) -> Check | None:
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if lo is None and hi is None:
            return None
        low = -math.inf if lo is None else lo
        high = math.inf if hi is None else hi
        detail = (f"Must be at least {lo:g}." if hi is None else f"Must be at most {hi:g}."
                  if lo is None else f"Must be between {lo:g} and {hi:g}.")

        def check(value: Any, path: str, errors: Errors) -> Any:
            if isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and not low <= value <= high:
                errors.append({"field": path, "detail": detail})
            return value
        return check

    def _length(self, schema: dict[str, Any]) -> Check | None:
        lo, hi = schema.get("minLength", 0), schema.get("maxLength")
        if not lo and hi is None:
            return None
        high = math.inf if hi is None else hi
        detail = (f"Must be at least {lo} characters." if hi is None
                  else f"Must be {lo} to {hi} characters.")

        def check(value: Any, path: str, errors: Errors) -> Any:
            # JSON Schema counts code points, as len() does.
            if isinstance(value, str) and not lo <= len(value) <= high:
                errors.append({"field": path, "detail": detail})
            return value
        return check

    def _string_rule(self, schema: dict[str, Any]) -> Check | None:
        if "format" in schema:
            parse = self.formats.get(schema["format"])
            if parse is None:
                raise SchemaError(f"no parser for format {schema['format']!r}")

            def by_format(value: Any, path: str, errors: Errors) -> Any:
                detail = parse(value) if isinstance(value, str) else None
                if detail is not None:
                    errors.append({"field": path, "detail": detail})
                return value
            return by_format
        if "pattern" not in schema:
            return None
        regex = re.compile(schema["pattern"])
        detail = self.pattern_details.get(schema["pattern"], f"Must match {schema['pattern']}.")

        def by_pattern(value: Any, path: str, errors: Errors) -> Any:
            if isinstance(value, str) and regex.search(value) is None:
                errors.append({"field": path, "detail": detail})
            return value
        return by_pattern

    def _object(self, schema: dict[str, Any]) -> Check | None:
        props = {name: self.compile(sub) for name, sub in schema.get("properties", {}).items()}
        required = tuple(schema.get("required", ()))
        closed = schema.get("additionalProperties", True)
        if closed not in (True, False):
            raise SchemaError("additionalProperties must be true or false")
        if not props and not required and closed:
            return None

        def check(value: Any, path: str, errors: Errors) -> Any:
            if not isinstance(value, dict):
                return value
            if not closed:
                for name in value:
                    if name not in props:
                        errors.append({"field": path_of(path, name), "detail": "Unknown field."})
            for name in required:
                if name not in value:
                    errors.append({"field": path_of(path, name), "detail": "Required."})
            for name, sub in props.items():
                if name in value:
                    value[name] = sub(value[name], path_of(path, name), errors)
            return value
        return check

    def _array(self, schema: dict[str, Any]) -> Check | None:
        item = self.compile(schema["items"]) if "items" in schema else None
        lo, hi = schema.get("minItems", 0), schema.get("maxItems")
        if item is None and not lo and hi is None:
            return None
        high = math.inf if hi is None else hi
        detail = (f"Must have at least {lo} items." if hi is None
                  else f"Must have {lo} to {hi} items.")

        def check(value: Any, path: str, errors: Errors) -> Any:
            if not isinstance(value, list):
                return value
            if not lo <= len(value) <= high:
                errors.append({"field": path, "detail": detail})
                return value  # a list over its cap is not walked item by item
            if item is not None:
                for i, element in enumerate(value):
                    value[i] = item(element, path_of(path, i), errors)
            return value
        return check

    def _not(self, schema: dict[str, Any]) -> Check | None:
        if "not" not in schema:
            return None
        inner = schema["not"]
        kinds = {name: [t] if isinstance(t, str) else list(t)
                 for name, sub in inner.get("properties", {}).items()
                 for t in [sub.get("type")]}
        if "required" not in inner or set(inner) - {"required", "properties"} or any(
                set(sub) != {"type"} for sub in inner.get("properties", {}).values()):
            raise SchemaError("'not' is supported only as {'required': [...]} with optional "
                              "'properties' of a 'type' each (fields not given together)")
        together = tuple(inner["required"])
        detail = f"Give {' or '.join(together)}, not both." if len(together) == 2 else \
            f"Give at most one of {', '.join(together)}."

        def check(value: Any, path: str, errors: Errors) -> Any:
            def present(name: str) -> bool:
                return name in value and any(_is_type(value[name], t)
                                             for t in kinds.get(name, _ANY))
            if isinstance(value, dict) and all(present(name) for name in together):
                errors.append({"field": path_of(path, together[-1]), "detail": detail})
            return value
        return check


_ANY = ("integer", "number", "string", "boolean", "object", "array", "null")


def holds(value: Any, marker: Any) -> bool:
    """Whether ``marker`` (by identity) is anywhere inside ``value``'s dicts and lists."""
    stack = [value]
    while stack:
        node = stack.pop()
        if node is marker:
            return True
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False

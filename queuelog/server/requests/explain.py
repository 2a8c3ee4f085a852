"""Why a value breaks its declaration: jsonschema's errors as the contract's field errors.

Each error becomes ``{"field": "jobs[3].priority", "detail": "Must be one of ..."}``. A field
gets one error, for the first rule it breaks in the order of ``RANK`` (its type before its
range, a date's parser before its pattern), so a client reads the cause, not its echoes.
"""
from __future__ import annotations

import functools
import itertools
import math
from typing import Any, Iterable, Iterator

from queuelog.server.requests.bodies import PATTERN_DETAILS
from queuelog.server.requests.parse import OUT_OF_RANGE, is_timestamp, timestamp_detail

JSON = dict[str, Any]
MAX_ERRORS = 100  # the contract: a 422 lists at most 100 errors
RANK = {"type": 0, "enum": 1, "minimum": 2, "maximum": 2, "minLength": 3, "maxLength": 3,
        "format": 4, "pattern": 5}
TYPE_DETAIL = {"integer": "Must be an integer.", "number": "Must be a number.",
               "string": "Must be a string.", "boolean": "Must be true or false.",
               "object": "Must be a JSON object.", "array": "Must be a list.",
               "null": "Must be null."}
OUT_OF_RANGE_DETAIL = "Holds a number out of range (no double or integer can hold it)."
Found = tuple[str, int, str]  # field, rank, detail


class FieldErrors(list):  # type: ignore[type-arg]
    """Field errors, at most MAX_ERRORS kept, indexed so "anything at jobs[3]?" costs O(1)."""

    def __init__(self, errors: Iterable[dict[str, str]] = ()) -> None:
        super().__init__()
        self.full = False        # more errors were found than are kept
        self._inside: set[str] = set()  # every field with an error, and each of its parents
        self.extend(errors)

    def add(self, field: str, detail: str) -> None:
        """Record one field error."""
        self.append({"field": field, "detail": detail})

    def append(self, error: dict[str, str]) -> None:
        """Record one error (dropped, and ``full`` set, past MAX_ERRORS)."""
        if len(self) >= MAX_ERRORS:
            self.full = True
            return
        super().append(error)
        field = error["field"]
        self._inside.update(field[:i] for i, c in enumerate(field) if c in ".[")
        self._inside.add(field)

    def extend(self, errors: Iterable[dict[str, str]]) -> None:
        """Record each error."""
        for error in errors:
            self.append(error)

    def at(self, path: str) -> bool:
        """Whether ``path`` or a field inside it has an error ("" is the body: any error).

        Once full, every path may hold an error that was not kept: True.
        """
        return self.full or (bool(self) if not path else path in self._inside)

    def exactly(self, *paths: str) -> bool:
        """Whether one of ``paths`` itself has an error (or the list is full)."""
        return self.full or any(e["field"] in paths for e in self)


def path_of(base: str, key: str | int) -> str:
    """A field path: ``name``, ``jobs[3]``, ``jobs[3].priority``."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key


@functools.cache
def _checker() -> tuple[Any, Any]:
    """jsonschema's validator class (with our ``items``) and format checker, made once.

    jsonschema is imported here, on the first body that fails its declaration, not when the
    process starts: with its dependencies it would slow every server and command start.
    """
    import jsonschema
    from jsonschema._keywords import items as items_keyword

    def items_unless_too_many(validator: Any, items: Any, instance: Any,
                              schema: JSON) -> Iterator[Any]:
        # A list over its maxItems is not walked item by item: that error is enough, and a
        # long list of bad items would cost its length in validation and errors.
        if isinstance(instance, list) and len(instance) > schema.get("maxItems", math.inf):
            return
        yield from items_keyword(validator, items, instance, schema)

    formats = jsonschema.FormatChecker(formats=())
    formats.checks("date-time")(is_timestamp)
    return jsonschema.validators.extend(jsonschema.Draft202012Validator,
                                        {"items": items_unless_too_many}), formats


class Explainer:
    """Turns one declaration's jsonschema errors into field errors."""

    def __init__(self, schema: JSON) -> None:
        self.schema = schema
        self._validator: Any = None  # made on the first value that fails (see _checker)

    @property
    def validator(self) -> Any:
        """jsonschema's validator for the declaration (two threads may each make one)."""
        if self._validator is None:
            cls, formats = _checker()
            self._validator = cls(self.schema, format_checker=formats)
        return self._validator

    def explain(self, data: Any, errors: FieldErrors, skip: set[str]) -> None:
        """Add ``data``'s errors to ``errors``, one per field; none at or inside ``skip``."""
        best: dict[str, tuple[int, str]] = {}
        for error in self.validator.iter_errors(data):
            for field, rank, detail in itertools.islice(_explain(error), MAX_ERRORS + 1):
                if skip and _within(field, skip):
                    continue
                if field not in best or rank < best[field][0]:
                    best[field] = (rank, detail)
            if len(best) > MAX_ERRORS:
                break  # enough to fill the answer: stop the work here too
        for field, (_, detail) in best.items():
            errors.add(field, detail)

    def out_of_range(self, data: Any, errors: FieldErrors) -> set[str]:
        """Add an error where ``data`` holds OUT_OF_RANGE (at a declared leaf); their paths."""
        found: list[str] = []
        _out_of_range(self.schema, data, "", found)
        for field in found:
            errors.add(field, OUT_OF_RANGE_DETAIL)
        return set(found)


def _within(field: str, paths: set[str]) -> bool:
    return any(field == p or field.startswith((p + ".", p + "[")) for p in paths)


def _out_of_range(schema: JSON, value: Any, path: str, found: list[str]) -> None:
    props, item = schema.get("properties"), schema.get("items")
    if value is OUT_OF_RANGE:
        found.append(path)
    elif props is None and item is None:
        if isinstance(value, (dict, list)) and holds(value, OUT_OF_RANGE):
            found.append(path)  # inside a payload or a result: named at that field
    elif isinstance(value, dict):
        for key, sub in value.items():
            _out_of_range((props or {}).get(key, {}), sub, path_of(path, key), found)
    elif isinstance(value, list) and item is not None:
        for i, sub in enumerate(value):
            _out_of_range(item, sub, path_of(path, i), found)


def _explain(error: Any) -> Iterator[Found]:
    """The field errors one jsonschema error stands for."""
    path = ""
    for key in error.absolute_path:
        path = path_of(path, key)
    keyword, value, schema, instance = (error.validator, error.validator_value, error.schema,
                                        error.instance)
    if keyword == "required":
        yield from ((path_of(path, n), 6, "Required.") for n in value if n not in instance)
    elif keyword == "additionalProperties":
        known = schema.get("properties", {})
        yield from ((path_of(path, k), 6, "Unknown field.") for k in instance if k not in known)
    elif keyword == "not":
        together = list(value.get("required", ()))
        yield path_of(path, together[-1]), 6, f"Give {' or '.join(together)}, not both."
    elif keyword == "anyOf":
        yield from _explain_any_of(error, path)
    elif keyword == "minProperties":
        names = list(schema.get("properties", {}))
        yield path_of(path, names[0]), 6, f"Give {' or '.join(names)}."
    else:
        yield path, RANK.get(keyword, 6), _detail(keyword, value, schema, instance, error)


def _explain_any_of(error: Any, path: str) -> Iterator[Found]:
    """A value that none of its forms took: the errors of the form its type is (a parent
    ``{"item": -1}``: its ``item``'s range), else the types it may be."""
    fitting = [sub for sub in error.context if sub.validator != "type"]
    for sub in fitting:
        yield from _explain(sub)
    if not fitting:
        names = [TYPE_DETAIL[alt["type"]][8:-1] for alt in error.validator_value
                 if alt.get("type") in TYPE_DETAIL]
        yield path, 6, f"Must be {' or '.join(names)}."

def _detail(keyword: str, value: Any, schema: JSON, instance: Any, error: Any) -> str:
    """The wording of an error about the value itself."""
    if keyword == "type":
        names = value if isinstance(value, list) else [value]
        return TYPE_DETAIL[next((n for n in names if n != "null"), "null")]
    if keyword == "enum":
        return f"Must be one of {', '.join(str(o) for o in value if o is not None)}."
    if keyword in ("minimum", "maximum"):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        return (f"Must be at least {_number(lo)}." if hi is None else
                f"Must be at most {_number(hi)}." if lo is None else
                f"Must be between {_number(lo)} and {_number(hi)}.")
    if keyword in ("minLength", "maxLength"):
        lo, hi = schema.get("minLength", 0), schema.get("maxLength")
        return f"Must be at least {lo} characters." if hi is None else \
            f"Must be {lo} to {hi} characters."
    if keyword in ("minItems", "maxItems"):
        lo, hi = schema.get("minItems", 0), schema.get("maxItems")
        return f"Must have at least {lo} items." if hi is None else \
            f"Must have {lo} to {hi} items."
    if keyword == "pattern":
        return PATTERN_DETAILS.get(value, f"Must match {value}.")
    if keyword == "format" and value == "date-time":
        return timestamp_detail(instance) or "Must be an RFC 3339 timestamp."
    return str(error.message)


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


def _number(bound: float) -> str:
    """A schema's bound as written: every digit of a whole number (``:g`` made 2147483647
    read 2.14748e+09), a fraction as short as it goes."""
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"

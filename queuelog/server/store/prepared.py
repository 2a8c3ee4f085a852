"""The hot statements, compiled once and run on the transaction's own driver cursor.

SQLAlchemy's per-call execution path (the compiled-cache lookup, parameter processing, an
execution context and a ``Result``) costs several times the driver's own ``execute``, and a
single call runs several statements, so it would be a large share of a call's time. The job
verbs' statements stay declared once, as Core or named text
(statements.py, backends/, sql/, enqueue.py); ``Prepared`` compiles each once for the
store's dialect and runs the SQL text
on the DBAPI cursor of the SQLAlchemy transaction it is given, so BEGIN, COMMIT, the pool
and the wake-up hooks are SQLAlchemy's as before. A driver error is raised through
SQLAlchemy's own translation: callers see ``IntegrityError`` and the rest, and a
disconnect renews the pool, as for any statement.

Bound values go through the types' bind processors as SQLAlchemy's would; rows come
back as the driver gives them (integers, text, floats and NULL: all these tables hold),
with no result processing: a statement whose columns need it (a JSON or DateTime type)
does not belong here.

This reads SQLAlchemy's private parts (a compiled statement's ``_bind_processors``, the
connection's ``_handle_dbapi_exception`` and ``_has_events``, ``_generate_cache_key``,
the ``__[POSTCOMPILE_x]`` markers), so pyproject.toml pins SQLAlchemy below its next minor
(2.2); tests/unit/test_prepared.py fails where one of them changed. What it saves is
measured by bench/bench_prepared.py.
"""
from __future__ import annotations

import collections
import dataclasses
import re
import threading
from typing import Any, Mapping, Sequence

from cachetools import LRUCache
from sqlalchemy import Connection
from sqlalchemy.engine import Dialect as SADialect

_EXPANDING = re.compile(r"\(?__\[POSTCOMPILE_(\w+)\]\)?")
# ``VALUES :rows`` (an expanding parameter after VALUES): a list of rows, each a tuple,
# rendered as ``(?, ?), (?, ?)``: a multi-row INSERT.
_VALUES_ROWS = re.compile(r"VALUES \(__\[POSTCOMPILE_(\w+)\]\)")
_ROW_TEXTS_KEPT = 16


# Compiled statements shared by every store of the process, by ``_compile_key``: a process
# that makes several stores (the test suite, an embedding app) compiles each statement once.
_COMPILED: LRUCache[Any, "_Compiled"] = LRUCache(maxsize=2048)
_COMPILED_LOCK = threading.Lock()


def _compile_key(statement: Any, dialect: SADialect) -> Any | None:
    """What the compiled form depends on: the statement's structure (SQLAlchemy's own cache
    key), the values bound into it (a store's lease literals are in its SQL) and the
    dialect's compile-relevant settings; None where a statement cannot be keyed."""
    cache_key = statement._generate_cache_key()
    if cache_key is None:
        return None
    key = (type(dialect), dialect.paramstyle, dialect.server_version_info,
           dialect.max_identifier_length, id(getattr(dialect, "_json_serializer", None)),
           cache_key.key, tuple(b.effective_value for b in cache_key.bindparams))
    try:
        hash(key)
    except TypeError:  # a bound value that is a list or dict
        return None
    return key


@dataclasses.dataclass(frozen=True)
class _Compiled:
    """A statement compiled for one dialect: what every ``Prepared`` of it reads."""

    processors: dict[str, Any]     # bind processors, as SQLAlchemy would apply them
    sql: str
    positional: bool
    names: tuple[str, ...]         # the positional parameters' names, in order
    defaults: dict[str, Any]       # values bound when the statement was built
    expanding: frozenset[str]
    lists: tuple[str, ...]
    row_lists: frozenset[str]
    mark: str


def _compile(statement: Any, dialect: SADialect) -> _Compiled:
    """Compile ``statement`` for ``dialect``: its SQL text, parameters and defaults."""
    compiled = statement.compile(dialect=dialect)
    sql = compiled.string
    positional = bool(compiled.positional)
    expanding = frozenset(_EXPANDING.findall(sql))
    row_lists = frozenset(_VALUES_ROWS.findall(sql))
    if row_lists and not positional:  # SQLite's alone (qmark) needs them
        raise NotImplementedError("VALUES row lists take positional parameters")
    # Bound values as SQLAlchemy would send them (e.g. Float's); rows come back as the
    # driver gives them, which for these tables' types is what SQLAlchemy gives too.
    return _Compiled(
        processors=dict(compiled._bind_processors), sql=sql, positional=positional,
        names=tuple(compiled.positiontup or ()),
        defaults={name: bind.effective_value for name, bind in compiled.binds.items()
                  if not bind.required},
        expanding=expanding, lists=tuple(sorted(expanding)), row_lists=row_lists,
        mark={"qmark": "?", "format": "%s"}.get(dialect.paramstyle, ""))


class Prepared:
    """One Core statement compiled for one dialect; ``rows``, ``run`` and ``many`` run it."""

    def __init__(self, statement: Any, dialect: SADialect) -> None:
        key = _compile_key(statement, dialect)
        with _COMPILED_LOCK:  # stores may be made in several threads; the LRU order is state
            made = _COMPILED.get(key) if key is not None else None
        if made is None:
            made = _compile(statement, dialect)
            if key is not None:
                with _COMPILED_LOCK:
                    _COMPILED[key] = made
        # Shared with the other stores (only read). Set one by one, in the same order in
        # every instance: the hot path reads them as plain instance attributes.
        self.processors = made.processors
        self.sql = made.sql
        self.positional = made.positional
        self.names = made.names
        self.defaults = made.defaults
        self.expanding = made.expanding
        self._lists = made.lists
        self.row_lists = made.row_lists
        self.mark = made.mark
        self._texts: dict[tuple[int, ...], str] = {}

    def rows(self, conn: Connection, params: Mapping[str, Any]) -> list[Any]:
        """Run with ``params``; every row, as a named tuple (``row.id``, ``row._mapping``)."""
        cursor = self._execute(conn, params)
        try:
            return _rows(cursor)
        finally:
            cursor.close()

    def first(self, conn: Connection, params: Mapping[str, Any]) -> Any:
        """The first row, or None."""
        got = self.rows(conn, params)
        return got[0] if got else None

    def run(self, conn: Connection, params: Mapping[str, Any]) -> int:
        """Run a statement that returns no rows; the rows it changed."""
        cursor = self._execute(conn, params)
        count = cursor.rowcount
        cursor.close()
        return int(count)

    def many(self, conn: Connection, seq: Sequence[Mapping[str, Any]]) -> None:
        """Run once per parameter set, as one ``executemany`` (no rows returned)."""
        if not seq:
            return
        sql, _ = self._bound(seq[0])
        self._send(conn, sql, [self._bound(p)[1] for p in seq], many=True).close()

    @staticmethod
    def together(conn: Connection, reads: Sequence[tuple["Prepared", Mapping[str, Any]]],
                 *, pipelined: bool) -> list[list[Any]]:
        """Several reads' rows; ``pipelined`` (psycopg's pipeline mode): sent at once and
        answered at once, the transaction's BEGIN with them, one round trip for all."""
        if not pipelined:
            return [p.rows(conn, params) for p, params in reads]
        driver = conn.connection.dbapi_connection
        cursors: list[Any] = []
        sql, args = "", None
        try:
            with driver.pipeline():  # type: ignore[union-attr]
                for p, params in reads:
                    sql, args = p._bound(params)
                    cursor = driver.cursor()  # type: ignore[union-attr]
                    cursors.append(cursor)
                    _before(conn, cursor, sql, args, False)
                    cursor.execute(sql, args)
                    _after(conn, cursor, sql, args, False)
            return [_rows(c) for c in cursors]
        except Exception as e:  # noqa: BLE001 - translated and re-raised by SQLAlchemy
            conn._handle_dbapi_exception(e, sql, args, None, None)
            raise  # not reached: the handler raises
        finally:
            for cursor in cursors:
                cursor.close()

    def _execute(self, conn: Connection, params: Mapping[str, Any]) -> Any:
        sql, args = self._bound(params)
        return self._send(conn, sql, args, many=False)

    @staticmethod
    def _send(conn: Connection, sql: str, args: Any, *, many: bool) -> Any:
        """Run on the transaction's driver cursor, listeners told; the open cursor."""
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            _before(conn, cursor, sql, args, many)
            (cursor.executemany if many else cursor.execute)(sql, args)
            _after(conn, cursor, sql, args, many)
        except Exception as e:  # noqa: BLE001 - translated and re-raised by SQLAlchemy
            cursor.close()
            # SQLAlchemy's own handler: wraps the driver's error in sqlalchemy.exc, tells
            # a disconnect apart and invalidates the pool, as Connection.execute does.
            conn._handle_dbapi_exception(e, sql, args, None, None)
        return cursor

    def bound(self, params: Mapping[str, Any]) -> tuple[str, Any]:
        """The SQL text and the driver's parameters, to run it on a driver connection."""
        return self._bound(params)

    def _bound(self, params: Mapping[str, Any]) -> tuple[str, Any]:
        """The SQL text for these list lengths, and the driver's parameters."""
        values = {**self.defaults, **params} if self.defaults else params
        if self.processors:
            values = {**values, **{k: f(values[k]) for k, f in self.processors.items()
                                   if values.get(k) is not None}}
        if not self.expanding:  # the common case: one text, values in order
            if self.positional:
                return self.sql, tuple([values[name] for name in self.names])
            return self.sql, values
        lengths = tuple(len(values[n]) for n in self._lists)
        sql = self._texts.get(lengths)
        if sql is None:
            sql = self._expand({n: values[n] for n in self._lists})
            # A rows text is as long as its rows: kept for the first few counts seen
            # (a single claim's one attempt, a batch's hundred), not for every count.
            if not self.row_lists or len(self._texts) < _ROW_TEXTS_KEPT:
                self._texts[lengths] = sql
        if self.positional:
            args: list[Any] = []
            for name in self.names:
                if name in self.row_lists:
                    for row in values[name]:
                        args.extend(row)
                elif name in self.expanding:
                    args.extend(values[name])
                else:
                    args.append(values[name])
            return sql, tuple(args)
        named = {k: v for k, v in values.items() if k not in self.expanding}
        for name in self.expanding:
            named.update({f"{name}_{i}": v for i, v in enumerate(values[name])})
        return sql, named

    def _expand(self, lists: Mapping[str, Sequence[Any]]) -> str:
        """``IN (__[POSTCOMPILE_x])`` as one placeholder per item; an empty list as an
        empty set (``IN`` false, ``NOT IN`` true), as SQLAlchemy renders it. ``VALUES
        (__[POSTCOMPILE_x])`` as one parenthesized group per row (never empty)."""
        def one(m: re.Match[str]) -> str:
            name, items = m.group(1), lists[m.group(1)]
            if name in self.row_lists:  # positional (__init__): every row's group alike
                if not items:
                    raise ValueError(f"no rows to insert ({name})")
                group = "(" + ", ".join([self.mark] * len(items[0])) + ")"
                return ", ".join([group] * len(items))
            if not items:
                return "(SELECT NULL WHERE 1 = 0)"
            marks = ([self.mark] * len(items) if self.positional
                     else [f"%({name}_{i})s" for i in range(len(items))])
            return "(" + ", ".join(marks) + ")"
        return _EXPANDING.sub(one, self.sql)


def _before(conn: Connection, cursor: Any, sql: str, args: Any, many: bool) -> None:
    """SQLAlchemy's ``before_cursor_execute`` listeners, if any (echo-style logging and
    tracing see these statements as any other; no execution context is made for them)."""
    # The check SQLAlchemy's own execute makes before it looks at any listener list.
    if (conn._has_events or conn.engine._has_events) and conn.dispatch.before_cursor_execute:
        conn.dispatch.before_cursor_execute(conn, cursor, sql, args, None, many)


def _after(conn: Connection, cursor: Any, sql: str, args: Any, many: bool) -> None:
    """SQLAlchemy's ``after_cursor_execute`` listeners, if any."""
    if (conn._has_events or conn.engine._has_events) and conn.dispatch.after_cursor_execute:
        conn.dispatch.after_cursor_execute(conn, cursor, sql, args, None, many)


def _rows(cursor: Any) -> list[Any]:
    rows = cursor.fetchall()
    if not rows:
        return []
    make = row_class(tuple(d[0] for d in cursor.description))
    return [make(*r) for r in rows]


_ROW_CLASSES: dict[tuple[str, ...], Any] = {}


def row_class(names: tuple[str, ...]) -> Any:
    """A named tuple per column list, with SQLAlchemy Row's ``_mapping`` as a dict."""
    cls = _ROW_CLASSES.get(names)
    if cls is None:
        base = collections.namedtuple("Row", names)  # type: ignore[misc]
        cls = _ROW_CLASSES[names] = type("Row", (base,), {
            "__slots__": (), "_mapping": property(lambda self: self._asdict())})
    return cls

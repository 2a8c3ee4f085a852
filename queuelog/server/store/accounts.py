"""API keys and users: every statement that touches credentials."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import secrets
from typing import Any

from sqlalchemy import (Connection, Engine, bindparam, delete, exists, func, insert, select,
                        update)
from sqlalchemy.exc import IntegrityError

from queuelog.model.problems import Conflict
from queuelog.server.store.tables import api_keys, users
from queuelog.server.store.audit import record
from queuelog.server.store.locks import NAMES_LOCK
from queuelog.server.store.engine import Clock, system_clock
from queuelog.server.store.prepared import Prepared

TOKEN_BYTES = 32


def hash_token(token: str) -> str:
    """SHA-256 of a token: keys are random, so no salt or slow hash is needed."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


# The active key of a token (``th``: its hash). A key whose name is also a username (an
# older database; the commands refuse to make one now) is refused, so that it can never act
# as that person (one name space). Every Bearer request runs it (``key_for_token``), and a
# claim that waited runs it again with its first reads (``Jobs.claim_many``).
ACTIVE_KEY = (select(api_keys.c.name, api_keys.c.role, api_keys.c.token_hash, api_keys.c.types,
                     api_keys.c.max_priority, api_keys.c.created_at)
              .where(api_keys.c.token_hash == bindparam("th"), api_keys.c.revoked_at.is_(None),
                     ~exists().where(users.c.username == api_keys.c.name)))


def is_key(row: Any, digest: str) -> bool:
    """True when ``row`` (of ACTIVE_KEY) is the key of ``digest``. The lookup is by hash of
    a high-entropy secret; compared once more in constant time, so that no code path
    compares the secret-derived value byte by byte."""
    return row is not None and secrets.compare_digest(row[2], digest)


@dataclasses.dataclass(frozen=True)
class ApiKey:
    """An API key as stored, without its secret."""

    name: str
    role: str
    token_hash: str
    types: tuple[str, ...] | None
    max_priority: int
    created_at: int
    revoked_at: int | None

    @classmethod
    def from_row(cls, row: Any) -> "ApiKey":
        """Build from an ``api_keys`` row."""
        types = None if row.types is None else tuple(json.loads(row.types))
        return cls(row.name, row.role, row.token_hash, types, row.max_priority,
                   row.created_at, row.revoked_at)


@dataclasses.dataclass(frozen=True)
class User:
    """A person who signs in with a password."""

    username: str
    role: str
    password_hash: str


@functools.lru_cache(maxsize=256)
def _active_key(name: str, role: str, token_hash: str, types: str | None, max_priority: int,
                created_at: int) -> ApiKey:
    """An active key's row as an ApiKey. The row is read on every request; only this
    conversion (its JSON types) is remembered, keyed by the whole row."""
    return ApiKey(name, role, token_hash, None if types is None else tuple(json.loads(types)),
                  max_priority, created_at, None)


class Accounts:
    """Create, find and revoke API keys; create, find, change and remove users."""

    def __init__(self, engine: Engine, backend: Any, clock: Clock = system_clock) -> None:
        self.engine = engine
        self.backend = backend
        self._write = backend.writer(engine)
        self._read = backend.reader(engine)
        self.clock = clock
        # Every Bearer request runs this lookup (key_for_token), as driver SQL: the text
        # compiled once, the digest bound.
        self._key = Prepared(ACTIVE_KEY, engine.dialect)
        self._cache = backend.key_cache(engine)
        self._user_named = select(users.c.id).where(users.c.username == bindparam("name"))
        self._active_key_named = select(api_keys.c.id).where(
            api_keys.c.name == bindparam("name"), api_keys.c.revoked_at.is_(None))

    def create_key(self, name: str, role: str, *, types: list[str] | None = None,
                   max_priority: int = 10, actor: str | None = None) -> tuple[ApiKey, str]:
        """Store a new key; return it and its token (shown once, never stored or audited)."""
        token = "ql_" + secrets.token_urlsafe(TOKEN_BYTES)
        try:
            with self._write.begin() as conn:
                self._lock_names(conn)
                if conn.execute(self._user_named, {"name": name}).first() is not None:
                    raise Conflict(f"A user is named {name!r}: keys and users share one "
                                   "name space; choose another name.")
                row = conn.execute(insert(api_keys).values(
                    name=name, role=role, token_hash=hash_token(token),
                    types=None if types is None else json.dumps(types),
                    max_priority=max_priority, created_at=self.clock())
                    .returning(*api_keys.c)).one()
                if actor is not None:
                    record(conn, row.created_at, actor, "key.create", name,
                           {"role": role, "types": types, "max_priority": max_priority})
        except IntegrityError:
            raise Conflict(f"An active key named {name!r} exists; revoke it first.") from None
        return ApiKey.from_row(row), token

    def key_for_token(self, token: str) -> ApiKey | None:
        """The active key whose token this is, or None.

        A revoked key stops at once in every process and on every server (contract): on
        PostgreSQL every call reads the database; on SQLite a process trusts a key it
        found until any revocation on the machine (store/keycache.py). The read goes
        straight to the pooled driver connection, as static SQL text with one bound
        parameter: it runs on every Bearer request.
        """
        digest = hash_token(token)
        generation = None
        if self._cache is not None:
            generation = self._cache.generation()  # before the read: a revocation since
            found = self._cache.get(digest, generation)  # it drops what the read finds
            if found is not None:
                return found  # type: ignore[no-any-return]
        key = self._look_up(digest)
        if key is not None and self._cache is not None:
            self._cache.put(digest, generation, key)
        return key

    def _look_up(self, digest: str) -> ApiKey | None:
        """The active key of this token digest, read from the database."""
        conn = self.engine.raw_connection()  # a refused connect raises SQLAlchemy's error
        try:
            sql, params = self._key.bound({"th": digest})
            row = self.backend.read_one(conn, sql, params)
        except Exception:  # the driver's own error, e.g. a connection the server dropped
            try:
                conn.rollback()  # PostgreSQL: a failed statement aborted the transaction
            except Exception:  # a dead connection: the replay below finds out properly
                pass
            # Replayed on the same connection through SQLAlchemy, which tells a disconnect
            # apart: it then renews the whole pool (every connection of the process saw the
            # same cut) and raises its own error, answered 503 (errors.py). A connection
            # the lookup had to give up (Backend.read_one) is replaced by the pool's next.
            if not conn.is_valid:
                conn.close()  # its place in the pool back; the connection itself is gone
            with (Connection(self.engine, connection=conn) if conn.is_valid
                  else self.engine.connect()) as sa_conn:
                row = sa_conn.exec_driver_sql(sql, params).first()
        else:
            conn.close()  # back to the pool
        # The lookup is by hash of a high-entropy secret; compare once more in constant
        # time so that no code path compares the secret-derived value byte by byte.
        if not is_key(row, digest):
            return None
        return _active_key(*row)

    def list_keys(self) -> list[ApiKey]:
        """Every key, active and revoked, oldest first."""
        with self._read.connect() as conn:
            rows = conn.execute(select(api_keys).order_by(api_keys.c.id)).all()
        return [ApiKey.from_row(r) for r in rows]

    def revoke_key(self, name: str, actor: str | None = None) -> bool:
        """Revoke the active key of this name; False if there is none."""
        with self._write.begin() as conn:
            now = self.clock()
            done = conn.execute(update(api_keys).where(
                api_keys.c.name == name, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=now)).rowcount > 0
            if done and actor is not None:
                record(conn, now, actor, "key.revoke", name)
        if done and self._cache is not None:
            self._cache.bump()  # committed: every process on the machine drops its keys
        return done

    def create_user(self, username: str, password_hash: str, role: str,
                    actor: str | None = None) -> User:
        """Add a person; Conflict if the name is taken."""
        try:
            with self._write.begin() as conn:
                self._lock_names(conn)
                if conn.execute(self._active_key_named, {"name": username}).first() is not None:
                    raise Conflict(f"An active key is named {username!r}: keys and users share "
                                   "one name space; choose another name.")
                now = self.clock()
                conn.execute(insert(users).values(username=username, password_hash=password_hash,
                                                  role=role, created_at=now))
                if actor is not None:
                    record(conn, now, actor, "user.create", username, {"role": role})
        except IntegrityError:
            raise Conflict(f"User {username!r} exists.") from None
        return User(username, role, password_hash)

    def _lock_names(self, conn: Connection) -> None:
        # Check-then-insert across two tables: a key and a user of one name created at once
        # must not both pass the check. SQLite's IMMEDIATE write transaction already
        # serializes writers; PostgreSQL gets a transaction-scoped advisory lock.
        self.backend.lock(conn, NAMES_LOCK)

    def has_users(self) -> bool:
        """Whether any user exists."""
        with self._read.connect() as conn:
            return conn.execute(select(users.c.id).limit(1)).first() is not None

    def create_first_user(self, username: str, password_hash: str, role: str) -> bool:
        """Create this user only if there are no users at all; True if it was created.

        Safe when several processes start at once: SQLite serializes the IMMEDIATE
        transactions, and on PostgreSQL the unique username makes all but one insert fail.
        """
        try:
            with self._write.begin() as conn:
                self._lock_names(conn)
                if conn.execute(select(func.count()).select_from(users)).scalar_one():
                    return False
                if conn.execute(self._active_key_named, {"name": username}).first() is not None:
                    return False  # one name space: a key already is this identity
                conn.execute(insert(users).values(username=username, password_hash=password_hash,
                                                  role=role, created_at=self.clock()))
        except IntegrityError:
            return False
        return True

    def list_users(self) -> list[User]:
        """Every user, by name (with password hashes: for the command line, never the web)."""
        with self._read.connect() as conn:
            rows = conn.execute(select(users).order_by(users.c.username)).all()
        return [User(r.username, r.role, r.password_hash) for r in rows]

    def delete_user(self, username: str, actor: str | None = None) -> bool:
        """Remove a person; False if there is none of that name."""
        with self._write.begin() as conn:
            done = conn.execute(delete(users).where(users.c.username == username)).rowcount > 0
            if done and actor is not None:
                record(conn, self.clock(), actor, "user.delete", username)
            return done

    def set_password(self, username: str, password_hash: str, actor: str | None = None) -> bool:
        """Replace a person's password; False if there is none of that name."""
        with self._write.begin() as conn:
            done = conn.execute(update(users).where(users.c.username == username)
                                .values(password_hash=password_hash)).rowcount > 0
            if done and actor is not None:
                record(conn, self.clock(), actor, "user.password", username)
            return done

    def user(self, username: str) -> User | None:
        """The user of this name, or None."""
        if "\x00" in username:
            return None  # no name holds NUL, and PostgreSQL refuses it in a query (a 500)
        with self._read.connect() as conn:
            row = conn.execute(select(users).where(users.c.username == username)).first()
        return None if row is None else User(row.username, row.role, row.password_hash)

"""Keys and users: the command line's (``CLI``), every change audited; system names refused."""
from __future__ import annotations

from queuelog.model.problems import Conflict
from queuelog.server.actions.gate import SYSTEM, gate
from queuelog.server.auth import Principal, is_system_name
from queuelog.server.db import get_store
from queuelog.server.store import ApiKey, User


@gate(SYSTEM)
def create_key(who: Principal, name: str, role: str, *, types: list[str] | None,
               max_priority: int) -> tuple[ApiKey, str]:
    """Create an API key; return it and its token (never recorded). A system name is
    refused (409), so no key can act in the audit log as the system."""
    _not_a_system_name(name)
    return get_store().accounts.create_key(name, role, types=types, max_priority=max_priority,
                                           actor=who.name)


@gate(SYSTEM)
def revoke_key(who: Principal, name: str) -> bool:
    """Revoke the active key ``name``; False if there is none."""
    return get_store().accounts.revoke_key(name, actor=who.name)


@gate(SYSTEM)
def list_keys(who: Principal) -> list[ApiKey]:
    """Every key, active and revoked, without its secret."""
    return get_store().accounts.list_keys()


@gate(SYSTEM)
def create_user(who: Principal, username: str, password_hash: str, role: str) -> None:
    """Add a person (the password hash is stored, never recorded); a system name is
    refused (409), as for keys."""
    _not_a_system_name(username)
    get_store().accounts.create_user(username, password_hash, role, actor=who.name)


@gate(SYSTEM)
def list_users(who: Principal) -> list[User]:
    """Every person who may sign in, with their role."""
    return get_store().accounts.list_users()


@gate(SYSTEM)
def user_exists(who: Principal, username: str) -> bool:
    """Whether a person of that name may sign in."""
    return get_store().accounts.user(username) is not None


@gate(SYSTEM)
def delete_user(who: Principal, username: str) -> bool:
    """Remove a person; False if there is none of that name."""
    return get_store().accounts.delete_user(username, actor=who.name)


@gate(SYSTEM)
def set_password(who: Principal, username: str, password_hash: str) -> bool:
    """Replace a person's password; False if there is none of that name."""
    return get_store().accounts.set_password(username, password_hash, actor=who.name)


def _not_a_system_name(name: str) -> None:
    """Refuse a key or user name the system acts under (``cli``, ``retention``, ...)."""
    if is_system_name(name):
        raise Conflict(f"The name {name!r} is reserved: the system acts under it in the "
                       "audit log (cli, retention, schedule:...). Choose another name.")

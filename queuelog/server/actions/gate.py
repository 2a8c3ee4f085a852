"""Who may call an action: each action declares its roles here and refuses every other caller.

The declaration is the rule. ``auth.require`` reads it (``roles_of``) only to refuse a caller
before the request's body is read, as the HTTP contract orders its answers; the action
checks it again itself, so a caller that skips the view (a command, a test, a new route)
meets the same rule.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from queuelog.model.problems import Forbidden
from queuelog.server.auth import Principal
from queuelog.server.store import ALL, Scope

F = TypeVar("F", bound=Callable[..., Any])

# The role of the system's own callers: the command line and the schedules' ticker. No key
# or user has it (auth.ROLES), and their names are reserved (auth.is_system_name).
SYSTEM = "system"
PEOPLE = ("viewer", "admin")       # the dashboard's: never a key's
BOARD = ("viewer", "admin", "metrics")  # the counts a status board may read too
REFUSED = "Your role may not do this."


def system(name: str) -> Principal:
    """A principal the system acts as, under ``name`` in the audit log."""
    return Principal(name, SYSTEM, SYSTEM)


CLI = system("cli")  # every change made from the command line


def gate(*roles: str) -> Callable[[F], F]:
    """Declare the roles that may call an action; any other caller gets Forbidden (403)."""
    allowed = frozenset(roles)

    def decorate(action: F) -> F:
        @functools.wraps(action)
        def checked(who: Principal, *args: Any, **kwargs: Any) -> Any:
            if who.role not in allowed:
                raise Forbidden(REFUSED)
            return action(who, *args, **kwargs)
        checked.roles = allowed  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]
    return decorate


def roles_of(action: Callable[..., Any]) -> frozenset[str]:
    """The roles ``action`` was declared for (``gate``); empty for a function without one."""
    return getattr(action, "roles", frozenset())


def scope_of(who: Principal) -> Scope:
    """Which jobs a principal may read: a producer its own, a worker those it held."""
    if who.role == "producer":
        return Scope(producer=who.name)
    if who.role == "worker":
        return Scope(worker=who.name)
    return ALL

"""Who is calling: Bearer API keys for programs, HTTP Basic for people (V-01, V-04)."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import hmac
import threading
import time
from functools import wraps
from typing import Any, Callable, TypeVar

from flask import Flask, current_app, request
from flask_httpauth import HTTPBasicAuth, HTTPTokenAuth, MultiAuth
from werkzeug.security import check_password_hash, generate_password_hash

from queuelog.model.problems import Forbidden, TooManyRequests, UnsupportedMediaType

from queuelog.server.errors import problem
from queuelog.server.store import get_store
from queuelog.server.throttle import HashSlots, SignInThrottle

ROLES = ("producer", "worker", "viewer", "admin", "metrics")
KEY_ROLES = ("producer", "worker", "admin", "metrics")
USER_ROLES = ("viewer", "admin")
READERS = ("producer", "worker", "viewer", "admin")
REALM = "queuelog"

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class Principal:
    """The authenticated caller: a key (program) or a user (person)."""

    name: str
    role: str
    kind: str                       # "key" or "user"
    types: tuple[str, ...] | None = None
    max_priority: int = 10

    @property
    def is_admin(self) -> bool:
        """Admins see error text and may do everything but worker calls."""
        return self.role == "admin"


class _CaseInsensitiveToken(HTTPTokenAuth):
    # flask-httpauth's MultiAuth matches the scheme case-sensitively; RFC 9110 says not.
    def is_compatible_auth(self, headers: Any) -> bool:
        """Whether the Authorization header names this scheme, in any case."""
        scheme = headers.get("Authorization", "").split(None, 1)[:1]
        return bool(scheme) and scheme[0].lower() == self.scheme.lower()


class _StrictBasic(HTTPBasicAuth):
    # flask-httpauth's Basic parser accepts any scheme word; only "Basic" may pass.
    def get_auth(self) -> Any:
        """The Basic credentials, or None when the header names another scheme."""
        scheme = request.headers.get("Authorization", "").split(None, 1)[:1]
        if not scheme or scheme[0].lower() != "basic":
            return None
        return super().get_auth()


basic_auth = _StrictBasic(realm=REALM)
token_auth = _CaseInsensitiveToken("Bearer", realm=REALM)
auth = MultiAuth(basic_auth, token_auth)


class _PasswordCache:
    """Successful password checks, briefly: keyed by an HMAC of the credentials, never them."""

    def __init__(self, ttl: float, max_entries: int = 1024) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: dict[bytes, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    def key(self, secret: str, username: str, password: str) -> bytes:
        """The cache key for one pair of credentials."""
        msg = username.encode("utf-8", "surrogatepass") + b"\0" + password.encode(
            "utf-8", "surrogatepass")
        return hmac.new(secret.encode(), msg, hashlib.sha256).digest()

    def get(self, key: bytes) -> Principal | None:
        """The principal for these credentials if checked within the TTL."""
        hit = self._entries.get(key)
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1]

    def put(self, key: bytes, principal: Principal) -> None:
        """Remember a successful check."""
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[key] = (time.monotonic() + self.ttl, principal)


@basic_auth.verify_password
def _verify_password(username: str, password: str) -> Principal | None:
    if not username or not password:
        return None
    # Throttled first: a pair over its limit gets no password check at all (contract).
    # Read from the database even for a cached password, since the failures may have come
    # in through another worker since it was cached (the pair must get 429 all the same).
    throttle: SignInThrottle = current_app.extensions["queuelog.sign_in_throttle"]
    store = get_store()
    address = request.remote_addr or ""
    now = store.clock()
    recent = throttle.recent(store.sign_ins, username, address, now)
    wait = throttle.retry_after(recent, now)
    if wait:
        raise TooManyRequests(f"Too many failed sign-ins for {username!r} from this address; "
                              f"try again in {wait} s.", headers={"Retry-After": str(wait)})
    cache: _PasswordCache = current_app.extensions["queuelog.password_cache"]
    key = cache.key(current_app.config["SECRET_KEY"], username, password)
    hit = cache.get(key)
    if hit is not None:
        return hit
    user = store.accounts.user(username)
    # An unknown user costs as long as a wrong password (the dummy hash), so names cannot
    # be probed.
    matches = _check_password(user.password_hash if user else _dummy_hash(), password)
    if user is None or not matches:
        throttle.failed(store.sign_ins, username, address, store.clock())
        return None
    throttle.succeeded(store.sign_ins, username, address, recent)
    principal = Principal(user.username, user.role, "user", None, 30)
    cache.put(key, principal)
    return principal


def _check_password(password_hash: str, password: str) -> bool:
    # The slow hash, in one of this process's few slots, so guessing cannot take every
    # thread and core (throttle.HashSlots).
    slots: HashSlots = current_app.extensions["queuelog.hash_slots"]
    if not slots.acquire():
        raise TooManyRequests("Too many sign-ins are being checked at once; try again in a "
                              "second.", headers={"Retry-After": "1"})
    try:
        return check_password_hash(password_hash, password)
    finally:
        slots.release()


@functools.lru_cache(maxsize=1)
def _dummy_hash() -> str:
    return generate_password_hash("queuelog-timing-equalizer")


@token_auth.verify_token
def _verify_token(token: str) -> Principal | None:
    if not token or not token.strip():
        return None
    key = get_store().accounts.key_for_token(token.strip())
    if key is None:
        return None
    return Principal(key.name, key.role, "key", key.types, key.max_priority)


@basic_auth.get_user_roles
@token_auth.get_user_roles
def _roles(principal: Principal) -> str:
    return principal.role


@basic_auth.error_handler
@token_auth.error_handler
def _auth_error(status: int) -> Any:
    if status == 401:
        return problem(401, "unauthorized", "Unauthorized", _why_unauthorized(),
                       headers={"WWW-Authenticate": f'Basic realm="{REALM}", '
                                                    f'Bearer realm="{REALM}"'})
    return problem(403, "forbidden", "Forbidden", "Your role may not do this.")


def _why_unauthorized() -> str:
    # A newcomer with a mistyped token should not be told to send credentials they sent.
    scheme = request.headers.get("Authorization", "").split(None, 1)[:1]
    if not scheme:
        return "Send an API key (Authorization: Bearer ...) or a user's password (HTTP Basic)."
    if scheme[0].lower() == "bearer":
        return ("This API key is not valid: it is mistyped, revoked, or its name is also a "
                "user's (see 'queuelog keys list').")
    if scheme[0].lower() == "basic":
        return "Wrong username or password."
    return "Unknown authorization scheme: use Bearer (API keys) or Basic (passwords)."


def current_user() -> Principal:
    """The principal of the current request."""
    return auth.current_user()  # type: ignore[no-any-return]


def hash_password(password: str) -> str:
    """A slow salted hash for a person's password."""
    return generate_password_hash(password)


def refuse_cross_site() -> None:
    """403 for a state change the browser marks as sent from another site."""
    if request.headers.get("Sec-Fetch-Site", "").lower() == "cross-site":
        raise Forbidden("Cross-site requests may not change state.")


def guard_write() -> None:
    """Refuse state changes a browser could be tricked into sending (contract, CSRF)."""
    refuse_cross_site()
    if current_user().kind == "user" and not request.is_json:
        raise UnsupportedMediaType("Requests signed in with a password must send "
                                   "Content-Type: application/json.")


def require(*roles: str, write: bool = False) -> Callable[[F], F]:
    """Authenticate (401), authorize by role (403), then guard writes; in that order."""
    def decorate(view: F) -> F:
        @wraps(view)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if write:
                guard_write()
            return view(*args, **kwargs)
        return auth.login_required(role=list(roles))(guarded)  # type: ignore[no-any-return]
    return decorate


def init_app(app: Flask) -> None:
    """Give the app its password cache, throttle and hash slots; credentials before routing."""
    app.extensions["queuelog.password_cache"] = _PasswordCache(
        float(app.config["AUTH_CACHE_SECONDS"]))
    app.extensions["queuelog.sign_in_throttle"] = SignInThrottle()
    app.extensions["queuelog.hash_slots"] = HashSlots(app.config["PASSWORD_HASH_SLOTS"],
                                                      app.config["PASSWORD_HASH_WAIT_SECONDS"])
    app.before_request(_credentials_before_routing)


def _credentials_before_routing() -> Any:
    # An unknown path, a method a route lacks, and OPTIONS (answered by Flask itself) never
    # reach a view's login_required. Ask for credentials here too, so that without them
    # every URL but /healthz and /static/ answers 401 first (contract), and 404, 405 or an
    # Allow list say nothing to a stranger.
    if request.routing_exception is None and request.method != "OPTIONS":
        return None
    if request.path == "/healthz" or request.path.startswith("/static/"):
        return None
    if request.method == "OPTIONS":
        # flask-httpauth lets OPTIONS through unchecked, for CORS preflights; queuelog
        # answers no cross-origin callers, so OPTIONS is checked here by hand.
        scheme = next((a for a in (basic_auth, token_auth)
                       if a.is_compatible_auth(request.headers)), basic_auth)
        given = scheme.get_auth()
        if scheme.authenticate(given, scheme.get_auth_password(given)) in (None, False):
            return _auth_error(401)
        return None
    return auth.login_required(lambda: None)()

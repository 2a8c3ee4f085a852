"""Who is calling: Bearer API keys for programs, HTTP Basic for people (V-01, V-04)."""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import threading
import time
from functools import wraps
from typing import Any, Callable, TypeVar

from cachetools import TTLCache
from flask import Flask, current_app, g, request
from flask_httpauth import HTTPBasicAuth, HTTPTokenAuth, MultiAuth
from werkzeug.security import generate_password_hash

from queuelog.model.problems import Forbidden, TooManyRequests, UnsupportedMediaType

from queuelog.server.errors import problem, refusal
from queuelog.server.db import get_store
from queuelog.server.throttle import HashSlots, SignInThrottle

ROLES = ("producer", "worker", "viewer", "admin", "metrics")
KEY_ROLES = ("producer", "worker", "admin", "metrics")
USER_ROLES = ("viewer", "admin")
READERS = ("producer", "worker", "viewer", "admin")
REALM = "queuelog"
# The names the system acts under in the audit log: the command line (actions.CLI),
# automatic purges (retention.py) and schedules ("schedule:<name>"). No key or user may
# have one (contract), compared without case or outer blanks, as "CLI" reads as the system.
SYSTEM_NAMES = frozenset({"cli", "retention"})
SYSTEM_PREFIX = "schedule:"

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class Principal:
    """The authenticated caller: a key (program) or a user (person)."""

    name: str
    role: str
    kind: str                       # "key" or "user"
    types: tuple[str, ...] | None = None
    max_priority: int = 10
    # A key's own token, so a waiting claim can re-check that the key is still active
    # (actions.claim). Kept out of repr and comparisons: it is a secret.
    token: str | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def is_admin(self) -> bool:
        """Admins see error text and may do everything but worker calls."""
        return self.role == "admin"


def is_system_name(name: str) -> bool:
    """Whether ``name`` is one the system acts under (``SYSTEM_NAMES``, ``schedule:...``)."""
    folded = name.strip().casefold()
    return folded in SYSTEM_NAMES or folded.startswith(SYSTEM_PREFIX)


def _scheme() -> str | None:
    """The Authorization header's scheme, lower case (werkzeug parses it), else None."""
    given = request.authorization
    return None if given is None else given.type


class _Token(HTTPTokenAuth):
    # werkzeug parses the header (scheme names in any case, RFC 9110); flask-httpauth's
    # MultiAuth would match "Bearer" case-sensitively.
    def is_compatible_auth(self, headers: Any) -> bool:
        """Whether the Authorization header is a Bearer one."""
        return _scheme() == "bearer"

    def get_auth(self) -> Any:
        """The Bearer credentials (a token), or None."""
        return request.authorization if _scheme() == "bearer" else None


class _Basic(HTTPBasicAuth):
    # flask-httpauth's own Basic parser accepts any scheme word; only "Basic" may pass.
    def is_compatible_auth(self, headers: Any) -> bool:
        """Whether the Authorization header is a Basic one."""
        return _scheme() == "basic"

    def get_auth(self) -> Any:
        """The Basic credentials (username, password), or None."""
        return request.authorization if _scheme() == "basic" else None


basic_auth = _Basic(realm=REALM)
token_auth = _Token("Bearer", realm=REALM)
auth = MultiAuth(basic_auth, token_auth)


def _cache_key(username: str, password: str) -> bytes:
    """A password cache key: an HMAC of the credentials, so the cache never holds them."""
    msg = username.encode("utf-8", "surrogatepass") + b"\0" + password.encode(
        "utf-8", "surrogatepass")
    secret = current_app.config["SECRET_KEY"]
    # bytes too, as Flask takes it (instance/config.py: SECRET_KEY = b"..."): .encode() on
    # bytes failed every Basic sign-in with a 500.
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, msg, hashlib.sha256).digest()


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
    cache: TTLCache[bytes, Principal] = current_app.extensions["queuelog.password_cache"]
    key = _cache_key(username, password)
    hit = cache.get(key)
    if hit is not None:
        return _signed_in(hit)
    user = store.accounts.user(username)
    # An unknown user costs as long as a wrong password (the dummy hash), so names cannot
    # be probed.
    slots: HashSlots = current_app.extensions["queuelog.hash_slots"]
    matches = _check_password(slots, user.password_hash if user else slots.dummy(), password)
    if user is None or not matches:
        throttle.failed(store.sign_ins, username, address, store.clock())
        return None
    throttle.succeeded(store.sign_ins, username, address, recent)
    _refuse_system_name(user.username, "user")
    principal = Principal(user.username, user.role, "user", None, 30)
    with current_app.extensions["queuelog.password_cache_lock"]:
        cache[key] = principal  # TTLCache is not thread-safe
    return _signed_in(principal)


def _signed_in(principal: Principal) -> Principal:
    """A person whose password matched, kept for the request: flask-httpauth names its
    user only once the role check passed, and a 403 page still shows who is signed in
    (its header, its navigation)."""
    g.queuelog_signed_in = principal
    return principal


def signed_in() -> Principal | None:
    """The person of this request whose password matched, even on a 403; else None."""
    return g.get("queuelog_signed_in")


def _check_password(slots: HashSlots, password_hash: str, password: str) -> bool:
    # The slow hash, in one of this process's few slots, so guessing cannot take every
    # thread and core (throttle.HashSlots).
    matches = slots.check(password_hash, password)
    if matches is None:
        raise TooManyRequests("Too many sign-ins are being checked at once; try again in a "
                              "second.", headers={"Retry-After": "1"})
    return matches


@token_auth.verify_token
def _verify_token(token: str) -> Principal | None:
    if not token or not token.strip():
        return None
    key = get_store().accounts.key_for_token(token.strip())
    if key is None:
        return None
    _refuse_system_name(key.name, "key")
    return Principal(key.name, key.role, "key", key.types, key.max_priority, token.strip())


def _refuse_system_name(name: str, kind: str) -> None:
    # A key or user created with a system name before the name was reserved keeps its row
    # (no migration renames what an operator chose, nor drops a key a program holds), but it
    # is refused at sign-in: working on, it would act in the audit log as the system. Its
    # owner revokes it (keys revoke / users delete) and creates one under another name.
    if is_system_name(name):
        raise Forbidden(f"This {kind}'s name {name!r} is reserved for the system; an "
                        f"operator must replace it with a {kind} of another name.")


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
    return refusal(403, "forbidden", "Forbidden", "Your role may not do this"
                   + (": this page is for admins only." if "ui" in request.blueprints else "."))


def _why_unauthorized() -> str:
    # A newcomer with a mistyped token should not be told to send credentials they sent.
    scheme = _scheme()
    if scheme == "bearer":
        return ("This API key is not valid: it is mistyped, revoked, or its name is also a "
                "user's (see 'queuelog keys list').")
    if scheme == "basic":
        return "Wrong username or password."
    if "Authorization" not in request.headers:
        return "Send an API key (Authorization: Bearer ...) or a user's password (HTTP Basic)."
    return ("Unknown or unreadable authorization: use Bearer (API keys) or Basic (passwords, "
            "base64 of UTF-8 username:password).")


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


def require(*gated: Callable[..., Any], write: bool = False) -> Callable[[F], F]:
    """Authenticate (401); refuse (403) a caller that the actions the view calls would
    refuse, before its body is read; then guard writes. In that order (contract).

    The roles are the actions' own declarations (``actions.gate``), read here only so the
    403 comes first: each action checks its caller again itself. With no action named, a
    view is only authenticated.
    """
    roles: frozenset[str] | None = None
    for action in gated:
        declared: frozenset[str] = getattr(action, "roles")  # an action without a gate: a bug
        roles = declared if roles is None else roles & declared
    if roles is not None and not roles:
        raise ValueError(f"no role may call all of {[a.__name__ for a in gated]}")

    def decorate(view: F) -> F:
        @wraps(view)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if write:
                guard_write()
            return view(*args, **kwargs)
        return auth.login_required(  # type: ignore[no-any-return]
            role=None if roles is None else sorted(roles))(guarded)
    return decorate


def password_cache(app: Flask, timer: Callable[[], float] = time.monotonic,
                   ) -> TTLCache[bytes, Principal]:
    """Successful password checks, kept ``AUTH_CACHE_SECONDS`` by ``timer``'s clock."""
    return TTLCache(maxsize=1024, ttl=float(app.config["AUTH_CACHE_SECONDS"]), timer=timer)


def init_app(app: Flask) -> None:
    """Give the app its password cache, throttle and hash slots; credentials before routing."""
    # Successful password checks, briefly: the slow hash is not paid on every request.
    app.extensions["queuelog.password_cache"] = password_cache(app)
    app.extensions["queuelog.password_cache_lock"] = threading.Lock()
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

"""Who may read which store: bearer tokens, and the ASGI gate that checks them first.

Tokens come from ``LOKG_API_TOKEN`` (one token for everything, as before) and from a tokens
file (``lokg serve --tokens-file F`` or ``LOKG_TOKENS_FILE``): a JSON object mapping each token
to the store names it may read, or to ``"*"`` for every store::

    {"team-a-secret": ["a"], "team-b-secret": ["b", "shared"], "ops-secret": "*"}

With any token configured, every route but ``/healthz``, ``/readyz`` and the page's files needs
``Authorization: Bearer <token>`` (401 without a known one); a route that reads a store (its
ask, batch and readiness routes, and ``/v1/ask*`` on a single-store server) needs a token for
that store (403 otherwise); ``/metrics``, which counts every store, needs a ``"*"`` token (or
``LOKG_API_TOKEN``). ``GET /v1/stores`` lists only the stores the token may read. Tokens are
compared in constant time, before the body is read. The file is read at start-up (each
worker reads it); a bad file is refused with a one-line error naming it, never the tokens.
"""
from __future__ import annotations

import hmac
import json
import time
from pathlib import Path

from fastapi.responses import Response

from lokg.runtime.serve_service import TOKEN_ENV, ServeSettings
from lokg.runtime.serve_stores import Stores

TOKENS_ENV = "LOKG_TOKENS_FILE"
#: A token's grant of every store (and of /metrics).
EVERY_STORE = "*"
#: Routes open without a token: orchestrators probe them unauthenticated; the page is static.
OPEN_ROUTES = frozenset({"/healthz", "/readyz", "/"})
STATIC_PREFIX = "/static/"
#: Routes that count or describe every store.
ALL_STORE_ROUTES = frozenset({"/metrics"})


def load_tokens(path: str, names: list[str]) -> dict[str, frozenset[str]]:
    """The tokens file at ``path``: token → the store names it grants (see the module doc).
    A ValueError naming the file (and the entry, by position, never by token) otherwise."""
    where = f"tokens file {path}"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{where}: expected a JSON object mapping each token to a list of "
                         f"store names or \"{EVERY_STORE}\"")
    grants = {}
    for number, (token, stores) in enumerate(data.items(), 1):
        grants[_token(token, f"{where}: entry {number}")] = _granted(
            stores, names, f"{where}: entry {number}")
    return grants


def _token(token: str, where: str) -> str:
    if not token or not token.isascii() or not token.isprintable() or " " in token:
        raise ValueError(f"{where}: a token must be printable ASCII without spaces")
    return token


def _granted(stores, names: list[str], where: str) -> frozenset[str]:
    if stores == EVERY_STORE:
        return frozenset({EVERY_STORE})
    if not isinstance(stores, list) or not all(isinstance(s, str) for s in stores):
        raise ValueError(f"{where}: expected a list of store names or \"{EVERY_STORE}\"")
    unknown = sorted(set(stores) - set(names))
    if unknown:
        raise ValueError(f"{where}: unknown store {unknown[0]!r} (this server serves: "
                         f"{', '.join(names)})")
    return frozenset(stores)


class Access:
    """The configured tokens and what each grants; off (everything open) when there is none."""

    def __init__(self, grants: dict[str, frozenset[str]]):
        self._grants = [(token.encode(), stores) for token, stores in grants.items()]
        self.files_only = False  # no LOKG_API_TOKEN: the 401 names the tokens file too

    @classmethod
    def from_settings(cls, settings: ServeSettings, names: list[str]) -> Access:
        grants = load_tokens(settings.tokens_file, names) if settings.tokens_file else {}
        if settings.token:
            grants[settings.token] = frozenset({EVERY_STORE})
        access = cls(grants)
        access.files_only = settings.tokens_file is not None
        return access

    @property
    def on(self) -> bool:
        return bool(self._grants)

    def granted(self, scope) -> frozenset[str] | None:
        """The stores the request's ``Authorization: Bearer`` token grants (the scheme in any
        case, RFC 7235 §2.1); None for no token or an unknown one."""
        given = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, rest = value.partition(b" ")
                given = rest.lstrip(b" ") if scheme.lower() == b"bearer" else None
                break
        if not given:
            return None
        found = None
        for token, stores in self._grants:  # every token compared, each in constant time
            if hmac.compare_digest(given, token):
                found = stores
        return found

    @staticmethod
    def allows(granted: frozenset[str] | None, store: str) -> bool:
        return granted is None or EVERY_STORE in granted or store in granted

    def refusal(self, scope, stores: Stores) -> Response | None:
        """The 401/403 for a request the tokens do not allow; None to let it through."""
        path = scope["path"]
        if not self.on or path in OPEN_ROUTES or path.startswith(STATIC_PREFIX):
            return None
        granted = self.granted(scope)
        if granted is None:
            needs = f"{TOKEN_ENV} or a token of its tokens file" if self.files_only else TOKEN_ENV
            return _refuse(401, f"missing or wrong bearer token (this server requires "
                                f"{needs})", {"WWW-Authenticate": "Bearer"})
        if path in ALL_STORE_ROUTES and EVERY_STORE not in granted:
            return _refuse(403, f"{path} needs a token for every store (\"{EVERY_STORE}\")")
        store = stores.store_of(path)
        if store is not None and store in stores.services and not self.allows(granted, store):
            return _refuse(403, f"this token may not read store {store!r}")
        return None


def _refuse(status: int, detail: str, headers: dict | None = None) -> Response:
    return Response(json.dumps({"detail": detail}), status_code=status, headers=headers,
                    media_type="application/json")


class Gate:
    """Pure ASGI layer: the token check above, then request counts and latency per route
    (and per store, on a server with several)."""

    def __init__(self, app, *, stores: Stores, access: Access, routes: frozenset[str]):
        self.app, self.stores, self.access, self.routes = app, stores, access, routes
        self.metrics = stores.metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client gets if the app raises before responding

        async def send_and_note(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.metrics.started()
        try:
            refusal = self.access.refusal(scope, self.stores)
            await (refusal or self.app)(scope, receive, send_and_note)
        finally:
            path = scope["path"]
            route, store = ("/static", None) if path.startswith(STATIC_PREFIX) \
                else self.stores.route_of(path, self.routes)
            self.metrics.finished(route, scope["method"], status, time.perf_counter() - started,
                                  store)

"""The HTTP service: ``lokg serve`` answers questions from the published store (FastAPI).

Routes: ``POST /v1/ask`` (one question → the Answer JSON), ``POST /v1/ask/batch`` (up to
``MAX_BATCH`` questions, all on one build), ``GET /healthz`` (the process is up),
``GET /readyz`` (a verified build is loaded; which one; which builds failed to load),
``GET /metrics`` (Prometheus text), ``GET /openapi.json``, and the audit page: ``GET /`` and its
``GET /static/<file>`` (runtime/web/; no external assets, so it works offline and under a CSP
of ``'self'``).

Why it is shaped this way:

* **One reference, swapped.** A :class:`~runtime.serve_service.Service` per process holds the
  opened :class:`~runtime.query.Runtime` in one attribute. A request reads it once and keeps that
  object, so a hot reload — a single assignment — never changes the build under a request that
  has started: in-flight requests finish on their build, later ones get the new one, and a batch
  answers every item from the same build.
* **Reload off the request path.** A watcher thread reads ``CURRENT`` every ``poll_interval``
  seconds (a tiny file; inotify does not work on every filesystem a store lives on). When the id
  changes, that thread opens the build and verifies every checksum (a store on object storage:
  ``CURRENT`` is an object, and opening downloads the build into the verified local cache of
  runtime/object_store.py); only a build that opens
  cleanly is swapped in. A build that fails is logged, listed by ``/readyz`` and counted in the
  metrics, and the previous build keeps serving; it is retried only when ``CURRENT`` changes
  again. The first build is opened at start-up, before the worker accepts connections (with
  ``--workers N`` a worker that is still loading would otherwise answer 503 next to one that is
  ready); if it fails, the worker starts anyway and ``/readyz`` says 503 and why.
* **Threadpool.** ``ask`` is synchronous and CPU-bound, plus a bounded network wait for the
  ``openai`` reader, so the ask routes are plain ``def`` endpoints run in FastAPI's threadpool:
  a slow LLM call holds one worker thread, not the event loop, and health checks stay
  responsive (docs/BENCHMARKS.md has the measurement).
* **LLMs built once per process**, with the server's ``--llm-*`` options, and passed to ``ask``
  as objects: a reload does not reload a local model, and every ``openai`` call is bounded by
  the client's timeout, retries and total deadline, so a refusing, hanging or babbling endpoint
  gives the flagged fallback answer within that deadline.
* **Every client mistake is a 4xx naming the field**: the pydantic request models carry
  ``Runtime.ask``'s limits (question length, budget range, entity count) and the batch size;
  a ``QueryError`` from the runtime (e.g. an unknown entity id) is a 422; malformed JSON a 422
  or 400; a body over ``max_body_bytes`` a 413; an unknown route a 404.
* **Several stores** (``--store NAME=ROOT``, repeated): one Service per store, each with its
  own build, watcher and failures, sharing the readers and the metrics; routes
  ``/v1/stores/{name}/ask``, ``…/ask/batch``, ``…/readyz`` and ``GET /v1/stores``
  (runtime/serve_stores.py). A single ``--store PATH`` is served as before.
* **Security defaults**: bind 127.0.0.1; when ``LOKG_API_TOKEN`` is set, every route except
  ``/healthz``, ``/readyz`` and the page's static files needs ``Authorization: Bearer <token>``
  (compared in constant time, checked before the body is read; a browser cannot send the header
  on a page load, and the page holds no data — it sends the token the user types with its
  asks); a tokens file gives each token the stores it may read (runtime/serve_access.py);
  ``lokg serve`` refuses a non-loopback address without a token unless given
  ``--allow-unauthenticated``. The Swagger/ReDoc pages are off
  (they load scripts from a CDN); the schema is at ``/openapi.json``.
* **Metrics by hand** in the Prometheus text format (runtime/serve_metrics.py; no client
  library in the runtime). With ``--workers N`` each worker process is a separate service
  with its own runtime, watcher and counters; a scrape reads the worker that accepted it.
"""
from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import json
import logging
import os
import time
from contextlib import asynccontextmanager
from importlib import resources

import click
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from lokg.runtime import __version__
from lokg.runtime.answer_record import Answer
from lokg.runtime.contract import StoreError, is_url
from lokg.runtime.llm import available_backends
from lokg.runtime.object_store import open_store
from lokg.runtime.request import QueryError
from lokg.runtime.serve_access import EVERY_STORE, TOKENS_ENV, Access, Gate
from lokg.runtime.serve_models import AskRequest, BatchRequest, BatchResponse
from lokg.runtime.serve_service import (SETTINGS_ENV, TOKEN_ENV, BuildLost, ServeSettings,
                                        Service)
from lokg.runtime.serve_stores import DEFAULT_NAME, STORES_ROUTE, Stores, parse_stores

log = logging.getLogger("lokg.server")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
#: Seconds a connection may take to send a request head (after opening, or idle after a
#: response), and then its body, before it is closed: runtime/serve_conn.py.
DEFAULT_IDLE_TIMEOUT = 10.0
#: The audit page's files (runtime/web/), the only ones served, with their content types.
WEB_FILES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
             "style.css": "text/css; charset=utf-8"}
#: The page may load and call nothing but this service (and draw its SVG and data: images).
WEB_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                                          "object-src 'none'; base-uri 'none'; "
                                          "frame-ancestors 'none'; form-action 'self'",
               "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}


# ------------------------------------------------------------------------------ the app

def _plain(obj):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return vars(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _json(body, status: int = 200, headers: dict | None = None) -> Response:
    """JSON with Answers serialised by their fields as they are: Answer.to_dict (asdict) deep-
    copies every nested value first (0.97 vs 0.17 ms for a 9 KB answer, docs/BENCHMARKS.md).
    ensure_ascii: lone surrogates a client sent come back escaped, never as invalid UTF-8."""
    return Response(json.dumps(body, default=_plain), status_code=status, headers=headers,
                    media_type="application/json")


def _validation_message(errors) -> tuple[str, list[dict]]:
    """A one-line message naming each bad field, and the errors without the echoed input."""
    clean = []
    for err in errors:
        loc = [p for p in err.get("loc", ()) if p != "body"]
        msg = err.get("msg", "invalid")
        if err.get("type") == "json_invalid":
            msg = f"body is not valid JSON ({(err.get('ctx') or {}).get('error', 'decode error')})"
            loc = []
        clean.append({"loc": loc, "msg": msg, "type": err.get("type")})
    text = "; ".join((".".join(map(str, e["loc"])) + ": " if e["loc"] else "") + e["msg"]
                     for e in clean[:5])
    return text or "invalid request body", clean


def _add_page(app: FastAPI) -> None:
    """``GET /`` (the page) and ``GET /static/<file>`` (its script and style), nothing else;
    the files are read once from the package (runtime/web/)."""
    folder = resources.files("runtime") / "web"
    files = {name: (folder / name).read_bytes() for name in WEB_FILES}

    def served(name: str) -> Response:
        return Response(files[name], media_type=WEB_FILES[name], headers=WEB_HEADERS)

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return served("index.html")

    @app.get("/static/{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        if name not in files or name == "index.html":
            raise HTTPException(404, detail=f"no static file {name!r}")
        return served(name)


def _add_error_handlers(app: FastAPI) -> None:
    """Refusals as 422 with a message naming the field; a store failure as 503 + Retry-After."""

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request, exc: RequestValidationError):
        message, errors = _validation_message(exc.errors())
        return _json({"detail": message, "errors": errors}, 422)

    @app.exception_handler(QueryError)
    async def refused(request, exc: QueryError):
        return _json({"detail": str(exc)}, 422)

    @app.exception_handler(StoreError)  # BuildLost included
    async def store_failed(request, exc: StoreError):
        """A one-line reason without the detail: paths and the reader's error text are for
        the log (BuildLost was logged where it was raised), never for the client."""
        if isinstance(exc, BuildLost):
            reason = f"build {exc.build_id} could not be read"
        else:
            log.error("store error while answering: %s", exc)
            reason = "the store could not be read"
        return _json({"detail": f"store error: {reason} (details in the server log); retry"},
                     503, {"Retry-After": "1"})


def _add_routes(app: FastAPI, stores: Stores, access: Access) -> None:
    """The API: ask, ask/batch, health, readiness and metrics; the per-store routes."""
    _add_ask_routes(app, stores)
    _add_status_routes(app, stores, access)


def _ask(service: Service, request: AskRequest) -> Response:
    runtime = service.serving()
    with service.reading(runtime):
        answer = service.answer(runtime, request)
    return _json(answer, headers={"X-LOKG-Build": runtime.build_id})


def _ask_batch(service: Service, batch: BatchRequest) -> Response:
    runtime = service.serving()
    results = []
    with service.reading(runtime):
        for item in batch.requests:
            try:
                results.append({"ok": True, "answer": service.answer(runtime, item)})
            except QueryError as exc:
                results.append({"ok": False, "status": 422, "detail": str(exc)})
    return _json({"build_id": runtime.build_id, "results": results},
                 headers={"X-LOKG-Build": runtime.build_id})


ASK_RESPONSES = {200: {"model": Answer}, 422: {"description": "bad request"},
                 503: {"description": "no build loaded, or it lost a file"}}


def _add_ask_routes(app: FastAPI, stores: Stores) -> None:
    """/v1/ask and /v1/ask/batch (the only store), and each per store."""

    @app.post("/v1/ask", responses=ASK_RESPONSES)
    def ask(request: AskRequest) -> Response:
        """Answer one question with at most one LLM call; the Answer JSON."""
        return _ask(stores.only(), request)

    @app.post("/v1/ask/batch", responses={200: {"model": BatchResponse}})
    def ask_batch(batch: BatchRequest) -> Response:
        """Answer each question in order from one build; a refused item does not stop the rest."""
        return _ask_batch(stores.only(), batch)

    @app.post(STORES_ROUTE + "/{name}/ask", responses=ASK_RESPONSES)
    def store_ask(name: str, request: AskRequest) -> Response:
        """/v1/ask on store ``name``."""
        return _ask(stores.get(name), request)

    @app.post(STORES_ROUTE + "/{name}/ask/batch", responses={200: {"model": BatchResponse}})
    def store_ask_batch(name: str, batch: BatchRequest) -> Response:
        """/v1/ask/batch on store ``name``."""
        return _ask_batch(stores.get(name), batch)


def _add_status_routes(app: FastAPI, stores: Stores, access: Access) -> None:
    """/healthz, /readyz, /metrics, the stores and each store's readiness."""

    @app.get("/healthz")
    async def healthz() -> dict:
        """The process is up (says nothing about the store)."""
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> Response:
        """200 when a verified build is loaded; the build id and builds that failed to load
        (with several stores: when every store has one; counts only)."""
        status, body = stores.readiness()
        return _json(body, status)

    @app.get(STORES_ROUTE + "/{name}/readyz")
    async def store_readyz(name: str) -> Response:
        """/readyz of store ``name``."""
        status, body = stores.get(name).readiness()
        return _json(body, status)

    @app.get(STORES_ROUTE)
    async def store_list(request: Request) -> Response:
        """The stores this token may read: name, ready, build id."""
        granted = access.granted(request.scope) if access.on else None
        return _json(stores.listing(granted, EVERY_STORE))

    @app.get("/metrics")
    async def metrics() -> Response:
        """Prometheus text exposition format 0.0.4."""
        return Response(stores.metrics.render(list(stores.services.values())),
                        media_type="text/plain; version=0.0.4; charset=utf-8")


def create_app(settings: ServeSettings) -> FastAPI:
    """The FastAPI app of one service process; the watchers run while the app is served."""
    stores = Stores(settings)
    access = Access.from_settings(settings, stores.names)

    @asynccontextmanager
    async def lifespan(app):
        from lokg.runtime.serve_conn import quiet_loop_errors

        quiet_loop_errors(asyncio.get_running_loop())  # no log flood when descriptors run out
        stores.poll()  # the first builds, before any connection is accepted
        stores.start()
        try:
            yield
        finally:
            stores.stop()

    app = FastAPI(title="LOKG", version=__version__, lifespan=lifespan, docs_url=None,
                  redoc_url=None, max_body_size=settings.max_body_bytes,
                  description="Question answering over a knowledge graph with one LLM call "
                              "under a token budget.")
    app.state.stores = stores
    _add_error_handlers(app)
    _add_routes(app, stores, access)
    _add_page(app)
    app.add_middleware(Gate, stores=stores, access=access,
                       routes=frozenset(r.path for r in app.routes))
    return app


def app_from_env() -> FastAPI:
    """The uvicorn factory for ``--workers N``: each worker builds its own service."""
    return create_app(ServeSettings.from_env())


# ------------------------------------------------------------------------------ the command

def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _api_token(host: str, allow_unauthenticated) -> str | None:
    """The bearer token from the environment; none is refused on a non-loopback host unless
    unauthenticated access is allowed (or a tokens file guards the stores)."""
    token = os.environ.get(TOKEN_ENV) or None
    if not _is_loopback(host) and token is None and not allow_unauthenticated:
        raise click.UsageError(f"--host {host} is not a loopback address: set {TOKEN_ENV} "
                               f"or {TOKENS_ENV} to require a bearer token, or pass "
                               "--allow-unauthenticated")
    return token


def _check_store(store_root: str) -> None:
    """The store exists and has a published build (a ClickException otherwise)."""
    try:
        store = open_store(store_root)
        if not is_url(store_root) and not store.root.is_dir():
            raise StoreError(f"{store_root}: store root does not exist")
        if store.current_id() is None:
            raise StoreError(f"{store_root}: no published build (CURRENT missing)")
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None


@click.command("serve", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--store", "store_values", multiple=True, metavar="[NAME=]ROOT",
              help="Store root: a directory or s3://bucket/prefix (env LOKG_STORE; default "
                   "lokg_store). Repeat as NAME=ROOT to serve several stores, each at "
                   "/v1/stores/NAME/….")
@click.option("--tokens-file", envvar=TOKENS_ENV, type=click.Path(dir_okay=False),
              help="JSON: bearer token -> the store names it may read, or \"*\" (env "
                   f"{TOKENS_ENV}).")
@click.option("--host", default=DEFAULT_HOST, show_default=True,
              help="Address to bind; anything but loopback needs LOKG_API_TOKEN.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535))
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Worker processes, each with its own runtime and watcher.")
@click.option("--poll-interval", default=0.5, show_default=True,
              type=click.FloatRange(0.01, 3600), help="Seconds between reads of CURRENT.")
@click.option("--llm-backend", "llm_backends", multiple=True,
              type=click.Choice(available_backends()),
              help="Readers requests may choose (repeatable; default: none, local, openai).")
@click.option("--llm-base-url", help="openai reader: base URL (else LOKG_LLM_BASE_URL).")
@click.option("--llm-model", help="openai reader: model (else LOKG_LLM_MODEL).")
@click.option("--llm-timeout", type=click.FloatRange(min=0.001),
              help="Seconds per LLM attempt (openai) or per generation (local).")
@click.option("--llm-retries", type=click.IntRange(0, 10), help="openai reader: retries.")
@click.option("--llm-deadline", type=click.FloatRange(min=0.001),
              help="openai reader: total seconds per call, retries included.")
@click.option("--idle-timeout", default=DEFAULT_IDLE_TIMEOUT, show_default=True,
              type=click.FloatRange(0.1, 3600),
              help="Seconds a connection may stay idle or take to send a request's headers, "
                   "and then its body, before it is closed.")
@click.option("--read-only", is_flag=True,
              help="A replica with read-only store credentials: a pin that cannot be written "
                   "does not fail an open (/readyz says pins off; see docs/OPERATIONS.md).")
@click.option("--allow-unauthenticated", is_flag=True,
              help="Allow a non-loopback --host without LOKG_API_TOKEN.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@click.option("--access-log", is_flag=True, help="Log every request (costs throughput).")
@click.option("--feedback/--no-feedback", default=None,
              help="Log what questions find missing (default: the build's query.feedback).")
@click.option("--feedback-dir", type=click.Path(file_okay=False), default=None,
              help="The feedback log's directory (default: <store>/feedback/log).")
def serve_command(**opts) -> None:
    """Serve the store over HTTP: /v1/ask, /v1/ask/batch, /healthz, /readyz, /metrics, and
    the audit page at / (ask a question, see the answer, its path, triples, tokens, timings).
    Several stores (--store NAME=ROOT, repeated): /v1/stores/NAME/ask, …/ask/batch,
    …/readyz, and GET /v1/stores.

    The build CURRENT names is loaded and verified in the background and hot-reloaded when
    CURRENT changes (each store on its own); a build that fails verification is not swapped in.

    \b
    Environment:
      LOKG_API_TOKEN  bearer token every route but /healthz and /readyz then requires
                      (header "Authorization: Bearer <token>"); unset: no check, and only a
                      loopback --host is allowed unless --allow-unauthenticated. An
                      environment variable, not an option, so it never shows in ps.
      LOKG_TOKENS_FILE  --tokens-file: per-store tokens (docs/OPERATIONS.md, Serving).
    """
    import uvicorn

    from lokg.runtime.serve_conn import connection_options

    settings = _settings(opts)
    logging.basicConfig(level=opts["log_level"].upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options = dict(host=opts["host"], port=opts["port"], log_level=opts["log_level"],
                   access_log=opts["access_log"], **connection_options(opts["idle_timeout"]))
    if opts["workers"] == 1:
        uvicorn.run(create_app(settings), **options)
    else:
        os.environ[SETTINGS_ENV] = settings.to_env()
        uvicorn.run("lokg.runtime.server:app_from_env", factory=True,
                    workers=opts["workers"], **options)


def _settings(opts: dict) -> ServeSettings:
    """``lokg serve``'s options as the settings of every worker; every store checked, the
    tokens file read (a one-line error for a bad one)."""
    try:
        single, named = parse_stores(opts["store_values"]
                                     or [os.environ.get("LOKG_STORE") or "lokg_store"])
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    token = _api_token(opts["host"], opts["allow_unauthenticated"] or opts["tokens_file"])
    for _, root in named or [(None, single)]:
        _check_store(root)
    settings = ServeSettings(
        store=single or "", stores=named, tokens_file=opts["tokens_file"],
        poll_interval=opts["poll_interval"], token=token,
        llm_backends=tuple(opts["llm_backends"]) or ServeSettings.llm_backends,
        **{k: opts[k] for k in ("llm_base_url", "llm_model", "llm_timeout", "llm_retries",
                                "llm_deadline", "feedback", "feedback_dir", "read_only")})
    if settings.tokens_file:
        try:
            Access.from_settings(settings, [n for n, _ in named] or [DEFAULT_NAME])
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
    return settings


if __name__ == "__main__":
    serve_command(prog_name="python -m lokg.runtime.server")

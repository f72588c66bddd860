"""Several stores behind one service: ``lokg serve --store NAME=ROOT --store NAME=ROOT …``.

Each named store is a :class:`~runtime.serve_service.Service` of its own — its served build,
watcher thread, failures and reloads — so that one store's reload or broken build never
touches another's; they share the process's LLM readers and one
:class:`~runtime.serve_metrics.Metrics` (each store's series labelled ``store="NAME"``).
A single ``--store PATH`` is served as before: one service, no ``store`` label; its per-store
routes answer under the name :data:`DEFAULT_NAME`.

Routes per store: ``/v1/stores/{name}/ask``, ``…/ask/batch`` and ``…/readyz``; ``GET
/v1/stores`` lists the stores the caller's token may read. ``/v1/ask`` and ``/v1/ask/batch``
answer from the only store, and refuse (400, naming the per-store route) on a server with
several. Who may read which store: runtime/serve_access.py.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from fastapi import HTTPException

from lokg.runtime import __version__
from lokg.runtime.serve_metrics import Metrics
from lokg.runtime.serve_service import Readers, ServeSettings, Service

#: A store's name: what routes, tokens files and metric labels call it.
STORE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: The name of the one store of ``lokg serve --store PATH`` in the per-store routes.
DEFAULT_NAME = "default"
STORES_ROUTE = "/v1/stores"
STORE_PREFIX = STORES_ROUTE + "/"
#: The per-store routes after ``/v1/stores/{name}``; the metrics' route label is the template.
STORE_ROUTES = ("/ask", "/ask/batch", "/readyz")
#: The routes that answer from the only store (400 on a server with several).
SINGLE_ROUTES = frozenset({"/v1/ask", "/v1/ask/batch"})


def parse_stores(values: Sequence[str]) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """``--store`` values: one plain root (a single store, as before), or NAME=ROOT pairs (a
    ValueError naming the value otherwise). A plain root containing ``=`` can be given as
    ``./a=b``."""
    named: list[tuple[str, str]] = []
    plain: list[str] = []
    for value in values:
        name, sep, root = value.partition("=")
        if sep and root and STORE_NAME.fullmatch(name):
            named.append((name, root))
        else:
            plain.append(value)
    if plain and (named or len(plain) > 1):
        raise ValueError(f"--store {plain[-1]}: several stores must each be given as NAME=ROOT "
                         f"(NAME: letters, digits, '_', '-', '.'; ROOT: a directory or s3://…)")
    names = [name for name, _ in named]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"--store {twice[0]}=…: store name given more than once")
    return (plain[0] if plain else None), tuple(named)


class Stores:
    """The stores one service process serves, by name (see the module doc)."""

    def __init__(self, settings: ServeSettings):
        self.settings = settings
        self.metrics = Metrics()
        self.readers = Readers(settings)
        self.several = bool(settings.stores)
        pairs = settings.stores or ((DEFAULT_NAME, settings.store),)
        self.services = {name: Service(settings, root, label=name if self.several else None,
                                       metrics=self.metrics, readers=self.readers)
                         for name, root in pairs}

    @property
    def names(self) -> list[str]:
        return list(self.services)

    def get(self, name: str) -> Service:
        """Store ``name``'s service; 404 with a one-line message when there is none."""
        service = self.services.get(name)
        if service is None:
            raise HTTPException(404, detail=f"no store {name!r} on this server (GET "
                                            f"{STORES_ROUTE} lists the stores you may read)")
        return service

    def only(self) -> Service:
        """The one store the unnamed routes answer from; 400 on a server with several."""
        if len(self.services) == 1:
            return next(iter(self.services.values()))
        raise HTTPException(400, detail=f"this server serves several stores: name one, as "
                                        f"POST {STORE_PREFIX}<name>/ask (GET {STORES_ROUTE} "
                                        "lists the stores you may read)")

    def store_of(self, path: str) -> str | None:
        """The store a request to ``path`` reads: the name in ``/v1/stores/<name>/…``, the
        only store for ``/v1/ask*``; None for other routes."""
        if path.startswith(STORE_PREFIX):
            return path[len(STORE_PREFIX):].partition("/")[0]
        if path in SINGLE_ROUTES and len(self.services) == 1:
            return next(iter(self.services))
        return None

    def route_of(self, path: str, routes: frozenset[str]) -> tuple[str, str | None]:
        """The metrics' (route, store) labels of ``path``: a known route or template and a
        configured store name (None with a single store), else ("other", None)."""
        if path in routes:
            return path, None
        name, _, rest = path[len(STORE_PREFIX):].partition("/")
        template = f"{STORE_PREFIX}{{name}}/{rest}"
        if path.startswith(STORE_PREFIX) and name in self.services and template in routes:
            return template, name if self.several else None
        return "other", None

    def listing(self, granted: frozenset[str] | None, everything: str) -> dict:
        """``GET /v1/stores``: the stores ``granted`` (None: no access control) may read."""
        shown = [name for name in self.services
                 if granted is None or everything in granted or name in granted]
        return {"several": self.several,
                "stores": [{"name": name, **self._state(self.services[name])}
                           for name in shown]}

    @staticmethod
    def _state(service: Service) -> dict:
        runtime = service.runtime
        return {"ready": runtime is not None,
                "build_id": runtime.build_id if runtime is not None else None}

    def readiness(self) -> tuple[int, dict]:
        """``GET /readyz`` (open): one store's readiness as before; with several, 200 when
        every store has a build loaded, and only counts (names and builds need a token)."""
        if not self.several:
            return self.only().readiness()
        ready = sum(s.runtime is not None for s in self.services.values())
        every = ready == len(self.services)
        return (200 if every else 503), {"ready": every, "stores": len(self.services),
                                         "ready_stores": ready, "version": __version__}

    def poll(self) -> None:
        for service in self.services.values():
            service.poll()

    def start(self) -> None:
        for service in self.services.values():
            service.start()

    def stop(self) -> None:
        for service in self.services.values():
            service.stop()

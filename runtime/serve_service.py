"""The HTTP service's state in one process: the served build (one reference, swapped by a
watcher thread when CURRENT changes), the LLM readers built once, and the metrics; the
settings one process needs. Why it is shaped this way: runtime/server.py's module docstring.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

from fastapi import HTTPException

from lokg.runtime import __version__
from lokg.runtime.answer_record import Answer
from lokg.runtime.contract import StoreError
from lokg.runtime.llm import LLM, LLMError, available_backends, make_llm
from lokg.runtime.object_store import open_store
from lokg.runtime.query import Runtime
from lokg.runtime.request import QueryError
from lokg.runtime.serve_metrics import Metrics
from lokg.runtime.serve_models import AskRequest

log = logging.getLogger("lokg.server")

TOKEN_ENV = "LOKG_API_TOKEN"
#: How ``lokg serve --workers N`` hands its settings to the worker processes (never the token).
SETTINGS_ENV = "LOKG_SERVE_SETTINGS"
#: Fits a full batch of maximal questions even with every character \u-escaped (3 MiB).
MAX_BODY_BYTES = 4 * 1024 * 1024
#: Build load failures kept for /readyz (newest last).
KEEP_FAILURES = 10


class BuildLost(StoreError):
    """The served build could not be read while answering; the client should retry. The
    message holds the detail (paths, the reader's error) for the log; clients get only the
    build id (see runtime/server.py)."""

    def __init__(self, build_id: str, message: str):
        super().__init__(message)
        self.build_id = build_id



@dataclass(frozen=True)
class ServeSettings:
    """Everything one service process needs; JSON-able so workers can receive it."""

    store: str
    poll_interval: float = 0.5
    token: str | None = field(default=None, repr=False)
    llm_backends: tuple[str, ...] = ("none", "local", "openai")
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_timeout: float | None = None
    llm_retries: int | None = None
    llm_deadline: float | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    #: the feedback log (query.feedback*, runtime/feedback.py): None keeps the build's setting
    feedback: bool | None = None
    feedback_dir: str | None = None
    #: a replica with read-only credentials: a pin that cannot be written does not fail an
    #: open (runtime/object_store.py); /readyz then says ``"pins": "off"``
    read_only: bool = False
    #: several stores (runtime/serve_stores.py): (name, root) pairs; empty: ``store`` alone
    stores: tuple[tuple[str, str], ...] = ()
    #: the bearer tokens → stores map (runtime/serve_access.py); a path, re-read by workers
    tokens_file: str | None = None

    def __post_init__(self):
        if not self.poll_interval > 0:
            raise ValueError(f"poll_interval must be > 0 seconds; got {self.poll_interval!r}")
        unknown = set(self.llm_backends) - set(available_backends())
        if unknown:
            raise ValueError(f"llm_backends: unknown {sorted(unknown)}; "
                             f"known: {available_backends()}")

    def llm_options(self, backend: str) -> dict:
        """The make_llm options this server sets for ``backend`` (unset ones keep defaults)."""
        chosen = {"openai": {"base_url": self.llm_base_url, "model": self.llm_model,
                             "timeout": self.llm_timeout, "retries": self.llm_retries,
                             "deadline": self.llm_deadline},
                  "local": {"timeout": self.llm_timeout}}.get(backend, {})
        return {k: v for k, v in chosen.items() if v is not None}

    def runtime_settings(self, name: str | None = None) -> dict:
        """The query settings this server overrides in every Runtime it opens (store ``name``
        of several: its feedback log in ``feedback_dir/name``)."""
        where = self.feedback_dir
        if where is not None and name is not None:
            where = os.path.join(where, name)
        chosen = {"feedback": self.feedback, "feedback_dir": where}
        return {k: v for k, v in chosen.items() if v is not None}

    def to_env(self) -> str:
        return json.dumps({k: v for k, v in dataclasses.asdict(self).items() if k != "token"})

    @classmethod
    def from_env(cls) -> ServeSettings:
        raw = os.environ.get(SETTINGS_ENV)
        if not raw:
            raise RuntimeError(f"{SETTINGS_ENV} is not set (set by `lokg serve --workers N`)")
        data = json.loads(raw)
        data["llm_backends"] = tuple(data["llm_backends"])
        data["stores"] = tuple(tuple(pair) for pair in data.get("stores", ()))
        return cls(**data, token=os.environ.get(TOKEN_ENV) or None)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Readers:
    """This process's LLM readers, each built once with the server's options (shared by the
    stores it serves)."""

    def __init__(self, settings: ServeSettings):
        self.settings = settings
        self._lock = threading.Lock()
        self._llms: dict[str, LLM] = {}

    def get(self, name: str) -> LLM:
        """Reader ``name``; a QueryError when this server does not offer it."""
        key = name.strip().lower()
        if key not in self.settings.llm_backends:
            raise QueryError(f"llm must be one of {', '.join(self.settings.llm_backends)} on "
                             f"this server; got {name!r}")
        with self._lock:
            if key not in self._llms:
                try:
                    self._llms[key] = make_llm(key, **self.settings.llm_options(key))
                except LLMError as exc:
                    raise QueryError(f"llm: {exc}") from None
            return self._llms[key]


class Service:
    """One store's served build (one reference), its watcher thread, the readers and the
    metrics (``label``: the store's name in the metrics when the server has several)."""

    def __init__(self, settings: ServeSettings, root: str | None = None, *,
                 label: str | None = None, metrics: Metrics | None = None,
                 readers: Readers | None = None):
        self.settings = settings
        self.root = settings.store if root is None else root
        self.label = label
        self.store = open_store(self.root)
        self.runtime: Runtime | None = None
        self.loaded_at: str | None = None
        self.metrics = Metrics() if metrics is None else metrics
        self.readers = Readers(settings) if readers is None else readers
        self.current: str | None = None  # the CURRENT value last acted on
        self._failures: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._reopen = False  # the served build lost a file: open CURRENT again even if same
        self._thread: threading.Thread | None = None

    # ---- builds

    def poll(self) -> None:
        """Load the build CURRENT names if it changed since the last poll (see module doc)."""
        try:
            current = self.store.current_id()
        except (StoreError, OSError) as exc:  # the detail (paths) to the log, not to /readyz
            if self._failed(None, "CURRENT could not be read (details in the server log)"):
                log.error("cannot read CURRENT: %s", exc)
            return
        reopen, self._reopen = self._reopen, False
        if current is None or (current == self.current and not reopen):
            return
        self.current = current
        if self.runtime is not None and current == self.runtime.build_id and not reopen:
            return
        log.info("%sCURRENT is %s; opening and verifying it", self._who(), current)
        try:
            runtime = Runtime.open(self.root, build_id=current, verify=True,
                                   pins_required=not self.settings.read_only,
                                   **self.settings.runtime_settings(self.label))
        except Exception as exc:  # any failure to open a build keeps the one being served
            log.error("%sbuild %s failed to load; still serving %s: %s", self._who(), current,
                      self.runtime.build_id if self.runtime else "nothing", exc)
            self._failed(current, f"build {current} failed to load ({type(exc).__name__}; "
                                  "details in the server log)")
            self.metrics.reloaded(False, self.label)
            return
        self.runtime = runtime  # the swap: requests that already hold the old one keep it
        self.loaded_at = _now()
        with self._lock:  # failures are reported until a build loads after them
            self._failures = []
        self.metrics.reloaded(True, self.label)
        log.info("%sserving build %s (opened in %.0f ms)", self._who(), current, runtime.open_ms)

    def _who(self) -> str:
        return f"store {self.label}: " if self.label else ""

    def _failed(self, build_id: str | None, error: str) -> bool:
        """Report a failure in /readyz (a one-line reason without paths); False when it is
        the one reported last already."""
        with self._lock:
            if self._failures and self._failures[-1]["build_id"] == build_id \
                    and self._failures[-1]["error"] == error:
                return False
            self._failures.append({"build_id": build_id, "error": error, "at": _now()})
            del self._failures[:-KEEP_FAILURES]
        return True

    def failures(self) -> list[dict]:
        with self._lock:
            return [dict(f) for f in self._failures]

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:  # the watcher must outlive any surprise; it is logged
                log.exception("store watcher failed; retrying")
            self._wake.wait(self.settings.poll_interval)
            self._wake.clear()

    @contextmanager
    def reading(self, runtime: Runtime):
        """Turn a failure to read the build under a request (deleted or damaged files) into
        :class:`BuildLost` — a 503 with Retry-After — and make the watcher poll now and open
        CURRENT again, even when CURRENT still names the build being served."""
        try:
            yield
        except (StoreError, OSError) as exc:
            log.error("%sbuild %s failed while answering: %s", self._who(), runtime.build_id, exc)
            if self.runtime is runtime:
                self._reopen = True
            self._wake.set()
            raise BuildLost(runtime.build_id, f"build {runtime.build_id}: {exc}") from exc

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, daemon=True,
                                        name=f"lokg-store-watcher-{self.label or 'store'}")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def serving(self) -> Runtime:
        runtime = self.runtime
        if runtime is None:
            raise HTTPException(503, detail="no build loaded yet; see /readyz",
                                headers={"Retry-After": "1"})
        return runtime

    def readiness(self) -> tuple[int, dict]:
        runtime = self.runtime
        body = {"ready": runtime is not None,
                "build_id": runtime.build_id if runtime else None,
                "loaded_at": self.loaded_at, "open_ms": runtime.open_ms if runtime else None,
                "current": self.current, "failed_builds": self.failures(),
                "pins": None if runtime is None else "on" if runtime.pinned else "off",
                "read_only": self.settings.read_only, "version": __version__}
        return (200 if runtime is not None else 503), body

    # ---- answering

    def answer(self, runtime: Runtime, request: AskRequest) -> Answer:
        answer = runtime.ask(request.question, entities=request.entities, budget=request.budget,
                             llm=self.readers.get(request.llm), policy=request.policy,
                             retrieval=request.retrieval, encoding=request.encoding,
                             source_sentences=request.source_sentences)
        self.metrics.answered(answer, self.label)
        return answer

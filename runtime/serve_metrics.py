"""The HTTP service's ``/metrics``: request and answer counters in the Prometheus text format,
by hand (no client library in the runtime). A server with several stores labels each store's
series with ``store`` (its configured name: bounded by the server, never by a client); one
serving a single ``--store PATH`` has no such label, as before."""

from __future__ import annotations

import bisect
import threading
from collections import Counter

from lokg.runtime.answer_record import Answer

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                   30.0, 60.0)
#: The method label's values: any other method a client invents is counted as "other", so
#: that no client can add series to ``/metrics`` (routes are bounded by the server: see
#: runtime/server.py).
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT",
                     "TRACE"})


def _label(value) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels) -> str:
    """``{k="v",…}`` of the labels whose value is not None ("" when none is left)."""
    given = [f'{k}="{_label(v)}"' for k, v in labels.items() if v is not None]
    return "{" + ",".join(given) + "}" if given else ""


class Metrics:
    """Request and answer counters for ``/metrics``; a few increments under one lock each."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: Counter = Counter()  # (route, store, method, status)
        self.latency: dict[tuple, list] = {}  # (route, store) -> [bucket counts (+Inf last), sum]
        self.in_flight = 0
        self.answers: Counter = Counter()  # (store, status)
        self.llm_calls: Counter = Counter()  # (store, backend)
        self.fallbacks: Counter = Counter()  # (store, backend)
        self.reloads: Counter = Counter()  # (store, ok | failed)

    def started(self) -> None:
        with self._lock:
            self.in_flight += 1

    def finished(self, route: str, method: str, status: int, seconds: float,
                 store: str | None = None) -> None:
        slot = bisect.bisect_left(LATENCY_BUCKETS, seconds)
        method = method if method in METHODS else "other"
        with self._lock:
            self.in_flight -= 1
            self.requests[(route, store, method, status)] += 1
            hist = self.latency.setdefault((route, store),
                                           [[0] * (len(LATENCY_BUCKETS) + 1), 0.0])
            hist[0][slot] += 1
            hist[1] += seconds

    def answered(self, answer: Answer, store: str | None = None) -> None:
        backend = answer.llm.get("backend", "?")
        with self._lock:
            self.answers[(store, answer.status)] += 1
            if answer.llm_calls:
                self.llm_calls[(store, backend)] += answer.llm_calls
            if answer.fallback:
                self.fallbacks[(store, backend)] += 1

    def reloaded(self, ok: bool, store: str | None = None) -> None:
        with self._lock:
            self.reloads[(store, "ok" if ok else "failed")] += 1

    def render(self, services) -> str:
        """The exposition text; ``services`` (runtime/serve_service.py's, each with its
        ``label``) give the served builds and the builds that failed to load."""
        out: list[str] = []

        def family(name: str, kind: str, text: str, samples) -> None:
            out.append(f"# HELP {name} {text}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(f"{name}{labels} {value}" for labels, value in samples)

        with self._lock:
            family("lokg_http_requests_total", "counter", "HTTP requests by route and status.",
                   [(_labels(route=r, store=st, method=m, status=s), n)
                    for (r, st, m, s), n in sorted(self.requests.items(), key=_order)])
            family("lokg_http_request_duration_seconds", "histogram",
                   "Time from request start to response end.", [])
            out.extend(self._latency_samples())
            family("lokg_http_requests_in_flight", "gauge", "Requests being handled now.",
                   [("", self.in_flight)])
            family("lokg_answers_total", "counter", "Answers by status (ok, fallback, ...).",
                   [(_labels(store=st, status=s), n)
                    for (st, s), n in sorted(self.answers.items(), key=_order)])
            family("lokg_llm_calls_total", "counter", "LLM calls made, by backend.",
                   [(_labels(store=st, backend=b), n)
                    for (st, b), n in sorted(self.llm_calls.items(), key=_order)])
            family("lokg_llm_fallbacks_total", "counter",
                   "Answers that fell back to retrieval because the LLM failed, by backend.",
                   [(_labels(store=st, backend=b), n)
                    for (st, b), n in sorted(self.fallbacks.items(), key=_order)])
            family("lokg_build_reloads_total", "counter",
                   "Attempts to load a new CURRENT build, by result.",
                   [(_labels(store=st, result=r), n)
                    for (st, r), n in sorted(self.reloads.items(), key=_order)])
        _build_families(services, family)
        return "\n".join(out) + "\n"

    def _latency_samples(self) -> list[str]:
        """The duration histogram's samples (the caller holds the lock): every route's
        cumulative buckets, then each route's sum and count."""
        lines = []
        latency = sorted(self.latency.items(), key=_order)
        for (route, store), (counts, total) in latency:
            running = 0
            for bound, n in zip((*LATENCY_BUCKETS, "+Inf"), counts):
                running += n
                lines.append(f"lokg_http_request_duration_seconds_bucket"
                             f"{_labels(route=route, store=store, le=bound)} {running}")
        for (route, store), (counts, total) in latency:
            labels = _labels(route=route, store=store)
            lines.append(f"lokg_http_request_duration_seconds_sum{labels} {total}")
            lines.append(f"lokg_http_request_duration_seconds_count{labels} {sum(counts)}")
        return lines


def _order(item) -> tuple:
    """Sort key of a (labels tuple, value) item whose labels may hold None (no store)."""
    return tuple("" if v is None else str(v) for v in item[0])


def _build_families(services, family) -> None:
    """The served builds' gauges: ready, which build, which failed, whether CURRENT moved on
    (a sample per store)."""
    family("lokg_ready", "gauge", "1 when a verified build is loaded.",
           [(_labels(store=s.label), int(s.runtime is not None)) for s in services])
    family("lokg_build_info", "gauge", "The build being served (value 1).",
           [(_labels(store=s.label, build_id=s.runtime.build_id), 1) for s in services
            if s.runtime is not None])
    family("lokg_build_failed", "gauge",
           "Builds that failed to load since the served one was loaded (value 1).",
           [(_labels(store=s.label, build_id=f["build_id"]), 1) for s in services
            for f in s.failures() if f["build_id"] is not None])
    family("lokg_build_stale", "gauge", "1 when CURRENT names a build other than the "
           "one served (it failed to load, or is loading).",
           [(_labels(store=s.label), int(s.runtime is not None and s.current
                                         not in (None, s.runtime.build_id)))
            for s in services])

"""The HTTP service's ``/metrics``: request and answer counters in the Prometheus text format,
by hand (no client library in the runtime)."""

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
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in labels.items()) + "}"


class Metrics:
    """Request and answer counters for ``/metrics``; a few increments under one lock each."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: Counter = Counter()  # (route, method, status)
        self.latency: dict[str, list] = {}  # route -> [per-bucket counts (+Inf last), sum]
        self.in_flight = 0
        self.answers: Counter = Counter()  # status
        self.llm_calls: Counter = Counter()  # backend
        self.fallbacks: Counter = Counter()  # backend
        self.reloads: Counter = Counter()  # ok | failed

    def started(self) -> None:
        with self._lock:
            self.in_flight += 1

    def finished(self, route: str, method: str, status: int, seconds: float) -> None:
        slot = bisect.bisect_left(LATENCY_BUCKETS, seconds)
        method = method if method in METHODS else "other"
        with self._lock:
            self.in_flight -= 1
            self.requests[(route, method, status)] += 1
            hist = self.latency.setdefault(route, [[0] * (len(LATENCY_BUCKETS) + 1), 0.0])
            hist[0][slot] += 1
            hist[1] += seconds

    def answered(self, answer: Answer) -> None:
        backend = answer.llm.get("backend", "?")
        with self._lock:
            self.answers[answer.status] += 1
            if answer.llm_calls:
                self.llm_calls[backend] += answer.llm_calls
            if answer.fallback:
                self.fallbacks[backend] += 1

    def reloaded(self, ok: bool) -> None:
        with self._lock:
            self.reloads["ok" if ok else "failed"] += 1

    def render(self, service) -> str:
        """The exposition text; ``service`` (runtime/serve_service.py) gives the served build
        and the builds that failed to load."""
        out: list[str] = []

        def family(name: str, kind: str, text: str, samples) -> None:
            out.append(f"# HELP {name} {text}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(f"{name}{labels} {value}" for labels, value in samples)

        with self._lock:
            family("lokg_http_requests_total", "counter", "HTTP requests by route and status.",
                   [(_labels(route=r, method=m, status=s), n)
                    for (r, m, s), n in sorted(self.requests.items())])
            family("lokg_http_request_duration_seconds", "histogram",
                   "Time from request start to response end.", [])
            out.extend(self._latency_samples())
            family("lokg_http_requests_in_flight", "gauge", "Requests being handled now.",
                   [("", self.in_flight)])
            family("lokg_answers_total", "counter", "Answers by status (ok, fallback, ...).",
                   [(_labels(status=s), n) for s, n in sorted(self.answers.items())])
            family("lokg_llm_calls_total", "counter", "LLM calls made, by backend.",
                   [(_labels(backend=b), n) for b, n in sorted(self.llm_calls.items())])
            family("lokg_llm_fallbacks_total", "counter",
                   "Answers that fell back to retrieval because the LLM failed, by backend.",
                   [(_labels(backend=b), n) for b, n in sorted(self.fallbacks.items())])
            family("lokg_build_reloads_total", "counter",
                   "Attempts to load a new CURRENT build, by result.",
                   [(_labels(result=r), n) for r, n in sorted(self.reloads.items())])
        _build_families(service, family)
        return "\n".join(out) + "\n"

    def _latency_samples(self) -> list[str]:
        """The duration histogram's samples (the caller holds the lock): every route's
        cumulative buckets, then each route's sum and count."""
        lines = []
        for route, (counts, total) in sorted(self.latency.items()):
            running = 0
            for bound, n in zip((*LATENCY_BUCKETS, "+Inf"), counts):
                running += n
                lines.append(f"lokg_http_request_duration_seconds_bucket"
                             f"{_labels(route=route, le=bound)} {running}")
        for route, (counts, total) in sorted(self.latency.items()):
            lines.append(f"lokg_http_request_duration_seconds_sum{_labels(route=route)} {total}")
            lines.append(f"lokg_http_request_duration_seconds_count{_labels(route=route)} "
                         f"{sum(counts)}")
        return lines


def _build_families(service, family) -> None:
    """The served build's gauges: ready, which build, which failed, whether CURRENT moved on."""
    runtime = service.runtime
    family("lokg_ready", "gauge", "1 when a verified build is loaded.",
           [("", int(runtime is not None))])
    family("lokg_build_info", "gauge", "The build being served (value 1).",
           [(_labels(build_id=runtime.build_id), 1)] if runtime is not None else [])
    family("lokg_build_failed", "gauge",
           "Builds that failed to load since the served one was loaded (value 1).",
           [(_labels(build_id=f["build_id"]), 1) for f in service.failures()
            if f["build_id"] is not None])
    family("lokg_build_stale", "gauge", "1 when CURRENT names a build other than the "
           "one served (it failed to load, or is loading).",
           [("", int(runtime is not None and service.current not in (None, runtime.build_id)))])

"""Bounded load generator for ``lokg serve``: throughput, p50/p99 latency, errors, builds seen.

    python -m bench.load --store S --requests 10000 --concurrency 32 --publish-at 0.5
    python -m bench.load --url http://127.0.0.1:8000 --store S --requests 2000 --concurrency 8

Without ``--url`` it starts ``python -m lokg.runtime.server --store S`` on a free loopback port
(``--workers N``), waits for ``/readyz`` and stops it afterwards. C threads each hold one
keep-alive ``http.client`` connection and POST ``/v1/ask`` (``llm`` none by default) until N
requests are done; a warm-up runs first, untimed. Questions come from ``--questions`` (JSONL with
a ``question`` field, or one question per line), else from the served build's entity names.

``--publish-at F`` republishes the CURRENT build under a new id (a real ``Store.publish``: copy,
manifest with checksums, atomic CURRENT swap) once a fraction F of the requests is done, to
exercise hot reload under load. Every response must carry one build id, the same in the
``X-LOKG-Build`` header and the body; a mismatch counts as an error. ``flaps`` counts responses
from the old build to requests that started after a response from the new build had already
arrived (with one worker process: always 0 — the swap is one reference).

``--serve-from s3://bucket/prefix`` pushes the CURRENT build of ``--store`` to that object store
and serves from it (the server's verified local cache, runtime/object_store.py); the mid-run
publish is then a local republish pushed there. ``--loopback-s3`` starts the S3 endpoint for it
on loopback (moto, lokg/testing/s3.py); otherwise the usual ``LOKG_S3_ENDPOINT`` / ``AWS_*``
environment applies.

``--ask-path /v1/stores/NAME/ask`` loads one store of a ``--url`` server that serves several
(``lokg serve --store NAME=ROOT …``); ``--store`` is then that store's root.

``--churn`` runs operator traffic meanwhile (:func:`churn`: publish with ``keep=0``, roll back
to the oldest other build, retention with ``keep=0``, in a loop): with reader pins no served
build is deleted, so every status stays below 500 (``statuses`` counts them).
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from urllib.parse import urlsplit

from bench.common import read_questions, store_questions
from lokg.runtime.config import DEFAULT_BUDGET
from lokg.runtime.contract import Store, StoreError, new_build_id
from lokg.runtime.object_store import RemoteStore
from lokg.testing import REPO
from lokg.testing.s3 import loopback_s3
from lokg.testing.serving import Connection, free_port

_MANIFEST_KEYS = ("schema_version", "build_id", "created_at", "tables", "files")


def republish(store_root: str | Path, build_id: str | None = None, *,
              hook: Callable[[str], None] | None = None, keep: int = 3) -> str:
    """Publish the CURRENT build's tables and files again as a new build; returns its id."""
    store = Store(store_root)
    build = store.build(verify=True)
    tables = {name: build.table_path(name) for name in build.manifest["tables"]}
    table_rels = {entry["path"] for entry in build.manifest["tables"].values()}
    extra = {rel: build.path / rel for rel in build.manifest["files"]
             if not any(rel == t or rel.startswith(t + "/") for t in table_rels)}
    info = {k: v for k, v in build.manifest.items() if k not in _MANIFEST_KEYS}
    new_id = build_id or new_build_id()
    store.publish(new_id, tables, extra_files=extra, info=info, hook=hook, keep=keep)
    return new_id


def churn(store_root: str | Path, stop: threading.Event, pause: float = 0.2) -> Counter:
    """Until ``stop``: republish with ``keep=0``, roll back to the oldest other build, run
    retention with ``keep=0`` — the operator traffic that once deleted served builds.
    Counts each operation; a refused one (e.g. a CAS loss) is counted, not raised."""
    store, done = Store(store_root), Counter()
    steps = itertools.cycle(("publish", "rollback", "gc"))
    while not stop.wait(pause):
        step = next(steps)
        try:
            if step == "publish":
                republish(store_root, keep=0)
            elif step == "rollback":
                others = [b for b in store.build_ids() if b != store.current_id()]
                if others:
                    store.rollback(others[0])
            else:
                store.collect_garbage(keep=0)
            done[step] += 1
        except StoreError as exc:
            done[f"{step} refused"] += 1
            print(f"churn: {step} refused: {exc}", file=sys.stderr)
    return done


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def run_load(url: str, questions: list[str], *, requests: int, concurrency: int,
             options: dict | None = None, token: str | None = None, warmup: int = 0,
             publish: Callable[[], str] | None = None, publish_after: int | None = None,
             timeout: float = 60.0, path: str = "/v1/ask") -> dict:
    """Send ``requests`` POST ``path`` (/v1/ask; one store of several:
    /v1/stores/<name>/ask) from ``concurrency`` keep-alive threads; the report."""
    if requests < 1 or concurrency < 1 or not questions:
        raise ValueError("requests and concurrency must be ≥ 1 and questions non-empty")
    parts = urlsplit(url)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    bodies = [json.dumps({"question": q, **(options or {})}).encode() for q in questions]
    counter = itertools.count()
    done = itertools.count(1)
    go_publish = threading.Event()
    records: list[list[tuple]] = [[] for _ in range(concurrency)]

    def connect() -> http.client.HTTPConnection:
        return Connection(parts.hostname, parts.port, timeout=timeout)

    def worker(slot: int, total: int, timed: bool) -> None:
        conn = connect()
        out = records[slot]
        while (i := next(counter)) < total:
            started = time.perf_counter()
            try:
                conn.request("POST", path, bodies[i % len(bodies)], headers)
                resp = conn.getresponse()
                data = resp.read()
                build, error = resp.getheader("X-LOKG-Build"), None
                if resp.status != 200:
                    error = f"HTTP {resp.status}: {data[:200]!r}"
                elif json.loads(data).get("build_id") != build:
                    error = f"header build {build} differs from body build"
                status = resp.status
            except (OSError, http.client.HTTPException, ValueError) as exc:
                status, build, error = None, None, f"{type(exc).__name__}: {exc}"
                conn.close()
                conn = connect()
            if timed:
                out.append((started, time.perf_counter(), status, build, error))
                if publish_after is not None and next(done) == publish_after:
                    go_publish.set()
        conn.close()

    def pool(total: int, timed: bool) -> None:
        threads = [threading.Thread(target=worker, args=(s, total, timed), daemon=True)
                   for s in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    if warmup:
        pool(warmup, timed=False)
        counter = itertools.count()
    published: dict = {}

    def publisher() -> None:
        if go_publish.wait():
            if publish is None:
                return
            t0 = time.perf_counter()
            published["build_id"] = publish()
            published["at"] = time.perf_counter()
            published["publish_s"] = round(published["at"] - t0, 3)

    pub = threading.Thread(target=publisher, daemon=True)
    if publish is not None and publish_after is not None:
        pub.start()
    started = time.perf_counter()
    pool(requests, timed=True)
    seconds = time.perf_counter() - started
    go_publish.set()
    if pub.is_alive():
        pub.join()

    rows = sorted((r for out in records for r in out), key=lambda r: r[0])
    latencies = sorted((end - start) * 1000.0 for start, end, *_ in rows)
    errors = [r[4] for r in rows if r[4] is not None]
    builds = Counter(r[3] for r in rows if r[4] is None)
    report = {
        "requests": len(rows), "concurrency": concurrency, "seconds": round(seconds, 3),
        "throughput_rps": round(len(rows) / seconds, 1),
        "p50_ms": round(_percentile(latencies, 0.50), 2),
        "p99_ms": round(_percentile(latencies, 0.99), 2),
        "max_ms": round(latencies[-1], 2) if latencies else None,
        "errors": len(errors), "error_samples": sorted(set(errors))[:5],
        "statuses": {str(k): v for k, v in sorted(Counter(r[2] for r in rows).items(),
                                                   key=lambda kv: str(kv[0]))},
        "builds": dict(builds),
    }
    if "build_id" in published:
        new = published["build_id"]
        first_new = min((end for _, end, _, b, e in rows if b == new and e is None),
                        default=None)
        report["published"] = {
            "build_id": new, "publish_s": published["publish_s"],
            "first_response_after_s": (round(first_new - published["at"], 3)
                                       if first_new is not None else None),
            "flaps": sum(1 for start, _, _, b, e in rows
                         if first_new is not None and start > first_new and b != new
                         and e is None)}
    return report


def wait_ready(url: str, timeout: float, proc: subprocess.Popen | None = None) -> dict:
    """Poll /readyz until it answers 200; its body."""
    parts = urlsplit(url)
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with code {proc.returncode}")
        try:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
            conn.request("GET", "/readyz")
            resp = conn.getresponse()
            body = resp.read()
            conn.close()
            if resp.status == 200:
                return json.loads(body)
            last = body.decode(errors="replace")
        except OSError as exc:
            last = str(exc)
        time.sleep(0.2)
    raise TimeoutError(f"{url}/readyz not ready after {timeout} s: {last}")


@contextmanager
def churning(store_root: str | Path | None):
    """:func:`churn` in a thread for the duration of the block (nothing when no store); the
    block gets the operation counts, filled in when it ends."""
    operations: Counter = Counter()
    if store_root is None:
        yield operations
        return
    stop = threading.Event()
    thread = threading.Thread(target=lambda: operations.update(churn(store_root, stop)),
                              daemon=True)
    thread.start()
    try:
        yield operations
    finally:
        stop.set()
        thread.join(timeout=120)


@contextmanager
def serve_source(args):
    """The store the server reads and the mid-run publish: ``--store`` and :func:`republish`,
    or, with ``--serve-from``, that object store and a republish pushed to it."""
    if not args.serve_from:
        yield args.store, lambda: republish(args.store)
        return
    with ExitStack() as stack:
        if args.loopback_s3:
            os.environ.update(stack.enter_context(
                loopback_s3(urlsplit(args.serve_from).netloc)))
        os.environ.setdefault("LOKG_CACHE_DIR", stack.enter_context(TemporaryDirectory()))
        remote = RemoteStore(args.serve_from)

        def push() -> str:
            new_id = republish(args.store)
            remote.publish(Store(args.store).build(new_id))
            return new_id

        if remote.current_id() is None:
            remote.publish(Store(args.store).build())
        yield args.serve_from, push


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (default: start one on --store)")
    parser.add_argument("--store", required=True, help="store root (questions, publishing)")
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=200, help="untimed requests first")
    parser.add_argument("--publish-at", type=float, default=0.0,
                        help="republish CURRENT when this fraction of requests is done (0: never)")
    parser.add_argument("--questions", help="JSONL with 'question', or one question per line")
    parser.add_argument("--llm", default="none")
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET)
    parser.add_argument("--workers", type=int, default=1, help="server workers (started here)")
    parser.add_argument("--poll-interval", type=float, default=0.5)
    parser.add_argument("--churn", action="store_true",
                        help="publish (keep=0), roll back and run retention in a loop meanwhile")
    parser.add_argument("--serve-from", metavar="S3_URL",
                        help="push --store's CURRENT here and serve from this object store")
    parser.add_argument("--loopback-s3", action="store_true",
                        help="with --serve-from: start an S3 server (moto) on loopback for it")
    parser.add_argument("--feedback", choices=("on", "off"), default=None,
                        help="the started server's feedback log (default: the build's setting)")
    parser.add_argument("--ask-path", default="/v1/ask",
                        help="the route asked: /v1/stores/NAME/ask for one store of a --url "
                             "server that serves several")
    parser.add_argument("--json", dest="json_out", help="also write the report here")
    args = parser.parse_args(argv)

    questions = read_questions(args.questions) if args.questions else store_questions(args.store)
    with serve_source(args) as (served, publish):
        report = _measure(args, questions, served, publish)
    print(json.dumps(report, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n")
    return 0 if report["errors"] == 0 else 1


def _measure(args, questions: list[str], served: str, publish: Callable[[], str]) -> dict:
    """Start the server on ``served`` (unless ``--url``), run the load, stop it; the report."""
    proc = None
    url = args.url
    if url is None:
        url = f"http://127.0.0.1:{free_port()}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "lokg.runtime.server", "--store", served, "--port",
             url.rsplit(":", 1)[1], "--workers", str(args.workers), "--poll-interval",
             str(args.poll_interval), "--log-level", "warning",
             *([f"--{'' if args.feedback == 'on' else 'no-'}feedback"] if args.feedback else [])],
            cwd=REPO)
    try:
        ready = wait_ready(url, 300, proc)
        publish_after = max(1, int(args.requests * args.publish_at)) if args.publish_at else None
        with churning(args.store if args.churn else None) as operations:
            report = run_load(url, questions, requests=args.requests,
                              concurrency=args.concurrency,
                              options={"llm": args.llm, "budget": args.budget},
                              token=os.environ.get("LOKG_API_TOKEN") or None, warmup=args.warmup,
                              publish=publish if publish_after else None,
                              publish_after=publish_after, path=args.ask_path)
        if args.churn:
            report["churn"] = dict(operations)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
    return {"url": url, "store": served, "served_build": ready["build_id"],
            "workers": args.workers, "questions": len(questions), **report}


if __name__ == "__main__":
    sys.exit(main())

"""The operator probe's totals (issue 51), rerun on loopback with bounded loads.

    python -m bench.serve_probe
    python -m bench.serve_probe --requests 4000 --stalled 300 --json probe.json

Builds a small store from the synthetic generator (``lokg synth``, ``lokg build`` with small
hyperparameters), then runs each case against ``lokg serve`` or the store commands and prints
one table, case → expected → observed → ok (exit code 1 when a case is not ok):

- ``churn``: ``python -m bench.load --churn`` (publish with keep 0, rollback, ``gc --keep 0`` in
  a loop while N questions are asked): no 5xx, no answer whose header and body builds differ;
- ``invented methods``: M requests with made-up HTTP method names (some 10 KB long): the
  ``lokg_http_requests_total`` series and the size of ``/metrics`` stay bounded;
- ``stalled sockets``: ``lokg serve`` under a descriptor limit (RLIMIT_NOFILE) and more silent
  connections than the limit: ``/healthz`` answers while they are open, they are closed by the
  server's ``--idle-timeout``, ``/v1/ask`` answers afterwards, and the log stays short;
- ``trickled body``: a head in time, then ``Content-Length: 1000`` a byte at a time: cut off
  within ``--idle-timeout``;
- ``unlisted file``: a copy of a table's part file the manifest does not list: ``lokg store
  verify`` refuses the build;
- ``symlink + gc``: a symlink under ``builds/`` and ``lokg store gc --keep 0``: exit 0, the
  link's target untouched, no ``.partial-`` directory left;
- ``concurrent builds``: a second ``lokg build`` on the store while one runs: refused at its
  start with a clear message and nothing left behind; the first publishes.

The store cases run on copies, the server cases on the built store; everything is on loopback
and bounded (the default run took 94–139 s on 2 shared cores).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from bench.common import child_env
from lokg.runtime.contract import BUILD_LEASE_FILE, Store
from lokg.testing import REPO
from lokg.testing.builds import FAST
from lokg.testing.serving import (Client, answers, closed_by_server, served_process,
                                  stalled_sockets, wait_for)

#: The log of a server through descriptor exhaustion may not grow past this many lines.
MAX_LOG_LINES = 200


def lokg(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``lokg ARGS`` as an operator runs it (this checkout), its output captured."""
    return subprocess.run([sys.executable, "-m", "lokg.cli", *args], cwd=REPO, env=child_env(),
                          capture_output=True, text=True, timeout=timeout)


def build_args(dump: Path, store: Path, build_id: str | None = None) -> list[str]:
    """``lokg build`` of the synthetic dump with small hyperparameters."""
    args = ["build", "--dump", str(dump), "--store", str(store), "--full"]
    args += ["--build-id", build_id] if build_id else []
    return args + [a for kv in FAST for a in ("--set", kv)]


def built_store(work: Path, triples: int) -> tuple[Path, Path]:
    """A synthetic dump and a store built from it."""
    dump, store = work / "dump", work / "store"
    for args in (["synth", "--triples", str(triples), "--questions", "20", "--out", str(dump)],
                 build_args(dump, store)):
        done = lokg(*args)
        if done.returncode:
            raise SystemExit(f"lokg {args[0]} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return dump, store


def row(case: str, expected: str, observed: str, ok: bool) -> dict:
    return {"case": case, "expected": expected, "observed": observed, "ok": bool(ok)}


# ------------------------------------------------------------------------------ server cases

def churn_case(work: Path, store: Path, requests: int, concurrency: int) -> dict:
    """bench.load --churn on a copy of the store: 5xx and answers mixing builds."""
    copy, out = work / "churned", work / "churn.json"
    shutil.copytree(store, copy, symlinks=True)
    done = subprocess.run([sys.executable, "-m", "bench.load", "--store", str(copy),
                           "--requests", str(requests), "--concurrency", str(concurrency),
                           "--warmup", "20", "--poll-interval", "0.05", "--churn",
                           "--json", str(out)],
                          cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=900)
    if not out.exists():
        return row("churn", "report", f"bench.load failed: {done.stderr[-300:]}", False)
    report = json.loads(out.read_text())
    server_errors = sum(n for status, n in report["statuses"].items() if status.startswith("5"))
    mixed = sum(1 for e in report["error_samples"] if "differs" in e)
    observed = (f"{report['requests']} requests, {server_errors} 5xx, {report['errors']} errors"
                f"{' (mixing builds)' if mixed else ''}, {len(report['builds'])} builds served, "
                f"churn {report.get('churn', {})}")
    return row("churn: publish/rollback/gc --keep 0", "0 5xx, 0 errors, ≥ 2 builds", observed,
               report["errors"] == 0 and len(report["builds"]) >= 2)


def series(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.startswith("lokg_http_requests_total{"))


def methods_case(client: Client, methods: int) -> dict:
    """``methods`` requests with invented method names; /metrics before and after."""
    before = client.call("GET", "/metrics")[2]
    statuses = set()
    for i in range(methods):
        name = f"INVENTED{i}" + ("X" * 10_000 if i % 50 == 0 else "")
        statuses.add(client.raw(name, f"/made-up/{i}")[0])
    after = client.call("GET", "/metrics")[2]
    grown = series(after) - series(before)
    observed = (f"{methods} methods: series {series(before)} → {series(after)}, "
                f"{len(before) // 1024} → {len(after) // 1024} KiB, statuses {sorted(statuses)}")
    return row("invented methods", "≤ 4 new series, < 10 KiB more, no 5xx", observed,
               grown <= 4 and len(after) - len(before) < 10_240 and max(statuses) < 500)


def trickle_case(port: int, idle_timeout: float) -> dict:
    """A head in time, then a 1,000-byte body a byte every 0.2 s: seconds until cut off."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /v1/ask HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000\r\n\r\n")
    started, closed = time.monotonic(), False
    sock.settimeout(0.2)
    while not closed and time.monotonic() - started < idle_timeout + 10:
        try:
            sock.sendall(b" ")
            closed = closed_by_server(sock)
        except OSError:
            closed = True
    took = time.monotonic() - started
    sock.close()
    observed = f"cut off after {took:.1f} s" if closed else f"still open after {took:.0f} s"
    return row("trickled body", f"cut off within --idle-timeout {idle_timeout:g} s + 1",
               observed, closed and took < idle_timeout + 1)


def stalled_case(store: Path, work: Path, stalled: int, nofile: int,
                 idle_timeout: float) -> dict:
    """``stalled`` silent connections against a server limited to ``nofile`` descriptors."""
    log = work / "stalled.log"
    with served_process(store, log, nofile=nofile, idle_timeout=idle_timeout) as (proc, client):
        sockets = stalled_sockets(client.port, stalled)
        started = time.monotonic()
        healthz = wait_for(lambda: answers(client.port, "/healthz") and time.monotonic(), 60,
                           "/healthz") - started
        deadline = time.monotonic() + 60
        for sock in sockets:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
        closed = sum(closed_by_server(sock) for sock in sockets)
        all_closed = time.monotonic() - started
        for sock in sockets:
            sock.close()
        ask = answers(client.port, "/v1/ask", timeout=10)
        running = proc.poll() is None
    lines = len(log.read_text(errors="replace").splitlines())
    observed = (f"{stalled} sockets, limit {nofile}: /healthz after {healthz:.1f} s, "
                f"{closed} closed by the server in {all_closed:.1f} s, /v1/ask "
                f"{'200' if ask else 'failed'}, server {'up' if running else 'gone'}, "
                f"log {lines} lines")
    return row("stalled sockets vs /healthz", f"/healthz < {idle_timeout + 5:g} s, all closed, "
               f"/v1/ask 200, log < {MAX_LOG_LINES} lines", observed,
               healthz < idle_timeout + 5 and closed == stalled and ask and running
               and lines < MAX_LOG_LINES)


def server_cases(store: Path, work: Path, args) -> list[dict]:
    """Invented methods and a trickled body on one server; stalled sockets on another."""
    with served_process(store, work / "serve.log", idle_timeout=args.idle_timeout) as (_, c):
        rows = [methods_case(c, args.methods), trickle_case(c.port, args.idle_timeout)]
    return rows + [stalled_case(store, work, args.stalled, args.nofile, args.idle_timeout)]


# ------------------------------------------------------------------------------ store cases

def unlisted_file_case(store: Path, work: Path) -> dict:
    """A copy of a triples part under a name the manifest does not list; lokg store verify."""
    copy = work / "unlisted"
    shutil.copytree(store, copy, symlinks=True)
    build = Store(copy).build()
    part = sorted((build.path / "triples.parquet").glob("*.parquet"))[0]
    shutil.copy(part, part.with_name("part-99999.parquet"))
    done = lokg("store", "verify", "--store", str(copy))
    said = done.stdout + done.stderr
    at = said.find("part-99999")
    observed = f"exit {done.returncode}: …{said[max(0, at - 16):at + 60].strip()}" if at >= 0 \
        else f"exit {done.returncode}, the file not named"
    return row("unlisted file in a table", "verify exits 1 naming part-99999", observed,
               done.returncode == 1 and at >= 0)


def symlink_gc_case(store: Path, work: Path) -> tuple[dict, Path]:
    """A symlink under builds/ to a build copied elsewhere, then gc --keep 0; the store."""
    copy, elsewhere = work / "linked", work / "elsewhere"
    shutil.copytree(store, copy, symlinks=True)
    shutil.copytree(Store(copy).build().path, elsewhere)
    (copy / "builds" / "20200101T000000Z-aaaaaa").symlink_to(elsewhere)
    before = sorted(p.name for p in elsewhere.rglob("*"))
    done = lokg("store", "gc", "--store", str(copy), "--keep", "0", "--older-than", "0")
    partial = [p for p in (copy / "builds").iterdir() if p.name.startswith(".partial-")]
    intact = sorted(p.name for p in elsewhere.rglob("*")) == before
    observed = (f"exit {done.returncode}, target {'intact' if intact else 'changed'}, "
                f"{len(partial)} .partial- left")
    return row("symlink under builds/ + gc --keep 0", "exit 0, target intact, 0 .partial-",
               observed, done.returncode == 0 and intact and not partial), copy


def concurrent_builds_case(dump: Path, store: Path) -> dict:
    """Build A, and build B once A holds the store's build lease: one publishes."""
    lease = store / BUILD_LEASE_FILE
    first = subprocess.Popen([sys.executable, "-m", "lokg.cli",
                              *build_args(dump, store, "20300101T000000Z-aaaaaa")],
                             cwd=REPO, env=child_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    wait_for(lambda: first.poll() is not None or (lease.exists() and lease.read_text().strip()
                                                  not in ("", "{}")), 120, "build A's lease")
    second = lokg(*build_args(dump, store, "20300101T000000Z-bbbbbb"))
    first.wait(timeout=600)
    said = second.stdout + second.stderr
    left = Store(store).staging_dir("20300101T000000Z-bbbbbb").exists()
    current = Store(store).current_id()
    observed = (f"A exit {first.returncode}, B exit {second.returncode} "
                f"({'refused: running' if 'is running on this store' in said else said[-80:]}), "
                f"CURRENT {current}, B staging {'left' if left else 'none'}")
    return row("two concurrent builds", "A publishes; B exits 1, refused, leaves nothing",
               observed, first.returncode == 0 and second.returncode == 1
               and "is running on this store" in said and not left
               and current == "20300101T000000Z-aaaaaa")


# ------------------------------------------------------------------------------ main

def print_table(rows: list[dict]) -> None:
    """case | expected | ok | observed, the first two padded."""
    width = {k: max(len(k), *(len(r[k]) for r in rows)) for k in ("case", "expected")}
    print(f"{'case':<{width['case']}} | {'expected':<{width['expected']}} | ok | observed")
    for r in rows:
        print(f"{r['case']:<{width['case']}} | {r['expected']:<{width['expected']}} | "
              f"{'ok' if r['ok'] else 'NO'} | {r['observed']}")


def probe(work: Path, args) -> list[dict]:
    dump, store = built_store(work, args.triples)
    rows = [churn_case(work, store, args.requests, args.concurrency)]
    rows += server_cases(store, work, args)
    rows.append(unlisted_file_case(store, work))
    gc_row, linked = symlink_gc_case(store, work)
    return rows + [gc_row, concurrent_builds_case(dump, linked)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2_000, help="churn: questions asked")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--methods", type=int, default=300, help="invented method names sent")
    parser.add_argument("--stalled", type=int, default=150, help="silent connections opened")
    parser.add_argument("--nofile", type=int, default=128, help="the server's descriptor limit")
    parser.add_argument("--idle-timeout", type=float, default=1.0)
    parser.add_argument("--triples", type=int, default=300, help="the synthetic store's size")
    parser.add_argument("--work", type=Path, help="keep the stores and logs here")
    parser.add_argument("--json", dest="json_out", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    with TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        rows = probe(work, args)
    print_table(rows)
    print(f"{sum(r['ok'] for r in rows)}/{len(rows)} ok in {time.monotonic() - started:.0f} s")
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

"""A refresh's ingest from its line store against a full ingest of the same dump.

    python -m bench.ingest_refresh --dump W/edited --previous STORE/refresh/B/ingest --work W2

``--previous``: the ingest stage directory of an earlier build of the dump's previous version
(in a store's refresh cache: its tables and its line store ``dump_lines.parquet``). Two
processes, one after the other, each measured as ``bench/build_scale.py`` measures a stage
process (wall, CPU seconds of the process tree sampled every 0.2 s, the Spark JVM included):

1. **full** — ingest of ``--dump`` with no previous build, as a full build runs it (on the
   engine the build resolves: ``engine.name``);
2. **refresh** — ingest of ``--dump`` with ``--previous`` as its ``previous:`` inputs, as a
   refresh's driver passes them: only the lines its line store lacks are parsed.

Equality: every table of ``spark_jobs.ingest.STORE_TABLES`` and every part of the change set
compared by ``pipeline.refresh.same_rows`` (rows as multisets, schema included) — the change set
against a third run, with the previous build's tables but not its line store, unmeasured.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


#: run → the previous build's outputs it takes as ``previous:`` inputs
RUNS = {"full": (), "refresh": ("dump_lines",), "every_line": ()}


def child(run: str, dump: Path, previous: Path, out: Path) -> None:
    """One ingest in this process; its report as ``out/report.json``."""
    from lokg.common.stage import PREVIOUS
    from lokg.pipeline.config import load_config
    from lokg.spark_jobs import ingest
    from lokg.spark_jobs.engine import with_engine

    inputs = {"dump": str(dump)}
    if run != "full":
        inputs.update({PREVIOUS + name: str(previous / f"{name}.parquet")
                       for name in (*ingest.STORE_TABLES, *RUNS[run])})
    config = with_engine(load_config(None, []), dump)
    result = ingest.run(config, inputs, str(out / "stage"))
    (out / "report.json").write_text(json.dumps(result["report"], indent=2))


def equal_tables(one: Path, other: Path) -> tuple[dict[str, bool], dict[str, bool]]:
    """Whether two ingests' tables, and their change sets' parts, hold the same rows."""
    from lokg.pipeline.refresh import same_rows
    from lokg.spark_jobs.ingest_change_set import CHANGE_SET_PARTS
    from lokg.spark_jobs.ingest import STORE_TABLES

    tables = {t: same_rows(one / f"{t}.parquet", other / f"{t}.parquet") for t in STORE_TABLES}
    return tables, {part: same_rows(one / "change_set" / part, other / "change_set" / part)
                    for part in CHANGE_SET_PARTS}


def main() -> None:
    from bench.common import run_measured

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", type=Path, required=True)
    ap.add_argument("--previous", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--child", choices=list(RUNS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.dump.resolve(), args.previous.resolve(),
                     args.work / args.child)
    started, measured = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), {}
    for run in RUNS:
        (args.work / run).mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "bench.ingest_refresh", "--dump", str(args.dump),
                "--previous", str(args.previous), "--work", str(args.work), "--child", run]
        measured[run] = run_measured(argv, args.work / f"{run}.log")
        report = json.loads((args.work / run / "report.json").read_text())
        measured[run].update(refresh=report["refresh"], step_seconds=report["step_seconds"])
    stage = {run: args.work / run / "stage" for run in RUNS}
    tables, _ = equal_tables(stage["refresh"], stage["full"])
    _, changes = equal_tables(stage["refresh"], stage["every_line"])
    print(json.dumps({"utc": started, "dump": str(args.dump), "previous": str(args.previous),
                      "runs": measured, "equal_tables": tables, "equal_change_set": changes,
                      "refresh_over_full_cpu": round(measured["refresh"]["cpu_s"]
                                                     / measured["full"]["cpu_s"], 4)}, indent=2))


if __name__ == "__main__":
    main()

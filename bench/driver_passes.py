"""entity_types (SQL on DuckDB), two checkouts on the same staged ingest: what a change to its
passes buys, before against after in one run.

    python -m bench.driver_passes --ingest STORE/staging/BUILD/ingest \\
        --tree before=/path/to/old/checkout --tree after=. --rounds 2 --work W --json W/passes.json

``--ingest`` is an ingest stage's output directory (triples, relations, entities,
type_assertions). Per round and checkout (the order alternates: AB, BA, …), each stage runs in
its own process (``bench.common.RUN``, default config) with that checkout on ``PYTHONPATH`` —
entity_types on the ingest's tables — measured as
``build_scale.run_measured`` measures (wall, CPU seconds of the process tree, peak RSS). Every
checkout's tables must equal the first checkout's (``refresh_scale.table_equality``), else the
bench stops. Config: the default, with ``engine.name`` duckdb (a one-node build's engine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from bench.common import RUN, run_measured, table_equality

STAGES = ("entity_types",)
#: The config each stage runs with: the SQL engine resolved as a one-node build resolves it
CONFIG = json.dumps({"engine": {"name": "duckdb"}})


def stage_inputs(ingest: Path, out: Path) -> dict[str, dict]:
    """Each stage's inputs: the ingest's tables."""
    return {"entity_types": {p.stem: str(p) for p in ingest.glob("*.parquet")}}


def run_checkout(tree: Path, ingest: Path, out: Path) -> dict[str, dict]:
    """Both stages of one checkout into ``out``; their measurements."""
    inputs, measured = stage_inputs(ingest, out), {}
    for stage in STAGES:
        (out / stage).mkdir(parents=True)
        argv = [sys.executable, "-c", RUN, CONFIG, json.dumps(inputs[stage]), str(out / stage),
                stage]
        measured[stage] = run_measured(argv, out / f"{stage}.log", code=tree)
    return measured


def outputs_equal(one: Path, other: Path) -> dict[str, bool]:
    """Every table the first checkout wrote, compared as multisets of rows."""
    import pyarrow.parquet as pq

    found = {}
    for path in sorted(one.rglob("*.parquet")):
        if path.is_file():
            name = str(path.relative_to(one))
            found[name] = table_equality(pq.read_table(path), pq.read_table(other / name))["equal"]
    return found


def run(args) -> dict:
    trees = dict(spec.split("=", 1) for spec in args.tree)
    names, seconds, equality = list(trees), {}, {}
    for i in range(args.rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            out = args.work / f"round{i}-{name}"
            for stage, m in run_checkout(Path(trees[name]).resolve(), args.ingest, out).items():
                seconds.setdefault(f"{name} {stage}", []).append(m)
            print(f"round {i + 1}, {name}: "
                  f"{ {k: v[-1]['wall_s'] for k, v in seconds.items() if k.startswith(name)} }",
                  file=sys.stderr, flush=True)
        for name in names[1:]:  # once every checkout of the round has written its tables
            equality[f"round {i + 1}: {name}"] = same = outputs_equal(
                args.work / f"round{i}-{names[0]}", args.work / f"round{i}-{name}")
            if not same or not all(same.values()):
                raise SystemExit(f"{name}'s tables differ from {names[0]}'s (or none): {same}")
    return {"ingest": str(args.ingest), "trees": trees, "rounds": args.rounds,
            "runs": seconds, "equality": equality, "median_wall_s": {
                k: statistics.median(m["wall_s"] for m in v) for k, v in seconds.items()}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ingest", type=Path, required=True)
    parser.add_argument("--tree", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    row = run(args)
    print(json.dumps(row["median_wall_s"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()

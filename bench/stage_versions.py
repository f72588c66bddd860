"""Stages of two checkouts on the same staged inputs: what a change to a stage costs or buys,
before against after in one run, and whether its tables stayed the same.

    python -m bench.stage_versions --staged STORE/staging/BUILD --dump D \\
        --tree before=/path/to/old/checkout --tree after=. --rounds 2 --work W --json W/v.json

``--staged`` is a build's staging directory (``lokg build --until …`` leaves it): each stage
reads the outputs its producers recorded there (``_stage.json``), exactly as the build fed it,
and ingest reads ``--dump``. Per round and checkout (the order alternates: AB, BA, …), each of
``--stages`` runs in its own process (``bench.common.RUN``) under that checkout's own
interpreter (``bench.common.checkout_python``), measured as ``build_scale.run_measured``
measures (wall, CPU seconds of the process tree, sampled peak RSS). Config: the default, with ``engine.name`` ``--engine`` (a
checkout without the engine ignores it). Every table a stage writes is compared with the first
checkout's by exact row digest (``pipeline.refresh.row_digest``); a difference is reported,
not fatal (last-bit float differences are for the reader to explain).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from bench.common import RUN, checkout_python, run_measured

#: The relational stages, in build order.
STAGES = ("ingest", "entity_types", "relation_stats", "scos_merge", "node_gain", "path_cache")


def stage_inputs(staged: Path, dump: Path | None, stage: str) -> dict[str, str]:
    """The artefacts ``stage`` reads, from the records of their producers under ``staged``."""
    from lokg.pipeline.registry import producers, stage as spec_of

    spec, made, inputs = spec_of(stage), producers(stage), {}
    for artefact in (*spec.inputs, *spec.optional):
        if artefact == "dump":
            inputs["dump"] = str(dump)
            continue
        record = staged / made.get(artefact, "?") / "_stage.json"
        if record.is_file():
            outputs = json.loads(record.read_text())["outputs"]
            if artefact in outputs:
                inputs[artefact] = outputs[artefact]
    return inputs


def run_checkout(tree: Path, args, out: Path) -> dict[str, dict]:
    """Every stage of one checkout into ``out``; their measurements."""
    config, measured = json.dumps({"engine": {"name": args.engine}}), {}
    for stage in args.stages:
        (out / stage).mkdir(parents=True)
        argv = [str(checkout_python(tree)), "-c", RUN, config,
                json.dumps(stage_inputs(args.staged, args.dump, stage)), str(out / stage), stage]
        measured[stage] = run_measured(argv, out / f"{stage}.log", code=tree)
    return measured


def same_tables(one: Path, other: Path) -> dict[str, bool]:
    """Every Parquet table (a file, or a directory of parts) the first checkout wrote, its rows
    compared exactly (row digests) with the other's."""
    from lokg.pipeline.refresh import row_digest

    def files(path: Path) -> list[str]:
        return [str(path)] if path.is_file() else sorted(
            str(f) for f in path.rglob("*.parquet") if f.is_file())

    tables = {p for p in one.glob("*/*") if p.suffix == ".parquet" or
              (p.is_dir() and any(p.rglob("*.parquet")))}
    return {str(t.relative_to(one)): row_digest(files(t)) == row_digest(
        files(other / t.relative_to(one))) for t in sorted(tables)}


def run(args) -> dict:
    trees = dict(spec.split("=", 1) for spec in args.tree)
    names, runs, equality = list(trees), {}, {}
    for i in range(args.rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            out = args.work / f"round{i}-{name}"
            for stage, m in run_checkout(Path(trees[name]).resolve(), args, out).items():
                runs.setdefault(f"{name} {stage}", []).append(m)
            print(f"round {i + 1}, {name}: "
                  f"{ {k: v[-1]['wall_s'] for k, v in runs.items() if k.startswith(name)} }",
                  file=sys.stderr, flush=True)
        for name in names[1:]:  # once every checkout of the round has written its tables
            equality[f"round {i + 1}: {name}"] = same_tables(
                args.work / f"round{i}-{names[0]}", args.work / f"round{i}-{name}")
    median = {k: statistics.median(m["wall_s"] for m in v) for k, v in runs.items()}
    return {"staged": str(args.staged), "trees": trees, "rounds": args.rounds,
            "engine": args.engine, "runs": runs, "equality": equality, "median_wall_s": median,
            "ratio_to_first": {f"{name} {stage}": round(
                median[f"{name} {stage}"] / median[f"{names[0]} {stage}"], 2)
                for name in names[1:] for stage in args.stages},
            "peak_mib": {k: max(m["peak_mib"] for m in v) for k, v in runs.items()}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--staged", type=Path, required=True)
    parser.add_argument("--dump", type=Path)
    parser.add_argument("--stages", type=lambda s: tuple(s.split(",")), default=STAGES)
    parser.add_argument("--engine", default="duckdb", choices=("duckdb", "spark"))
    parser.add_argument("--tree", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    row = run(args)
    print(json.dumps({k: row[k] for k in ("median_wall_s", "ratio_to_first", "peak_mib",
                                          "equality")}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()

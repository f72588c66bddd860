"""Spark vs DuckDB on ingest and relation_stats: the single-node reference.

    python -m bench.duckdb_reference                       # 10⁶ triples, 2 rounds, ratios
    python -m bench.duckdb_reference --triples 10000000 --rounds 1 --json ref.jsonl
    python -m bench.duckdb_reference --dump /data/synth-1e6  # an existing pipeline.synth dir
    python -m bench.duckdb_reference --dump D --baseline ../old  # + an older relation_stats
    python -m bench.duckdb_reference --dump D --baseline ../old --baseline-stage ingest
    python -m bench.duckdb_reference --dump D --paths product  # the paths a build would take

One process, one dump (``pipeline.synth``, ``--malformed-rate`` 0.1 % by default so that the
quarantine has work). Rounds alternate Spark then DuckDB so that both see the same machine load:

* **Spark**: ``ingest`` and ``entity_types`` through ``pipeline.driver.run_stage`` and
  ``relation_stats`` on their staged outputs — ``relation_stats_scale.spark_stages``, exactly as
  the build runs them. The session (``local[2]``) is started once, before the rounds, and its
  start-up is reported apart. The stages run on Spark SQL (``bench.common.SPARK_PATHS``) unless
  ``--paths product``: then on the engine the build resolves from the dump's size, as a build
  of that size would (the row's ``step_paths`` and the table say which ran, per step); the row's
  ``ingest_path`` says whether ingest parsed every line (``full``) or few (``partial``),
  ``ingest_driver_peak_mib`` the Python process's peak RSS during each round's ingest.
* **DuckDB** (``threads`` = 2, the same cores): the same ingest in SQL — the N-Triples rules of
  ``spark_jobs.formats`` (its regexes, made RE2-compatible), the quarantine with its reasons and
  exact line numbers, entity ids in key order, relation ids in name order, de-duplicated
  triples, names/aliases/descriptions/attributes, type assertions — then the stage
  ``spark_jobs.relation_stats`` itself on the DuckDB engine (its rules are SQL), on DuckDB's
  own triples and the entity types Spark's ``entity_types`` wrote (not a stage compared here).

Every output that is deterministic is compared: counts, quarantine (line, reason), entities
(id, key, name, aliases, description, attributes), relations, triples, type assertions, per
relation counts and H(r), type-pair masses, candidate pairs with source, shared entities,
Jaccard and NMI (floats to ``TOLERANCE``; Spark rounds H and P_r to 12 decimals, DuckDB
likewise, but sums in another order). Prints a Markdown table of per-step seconds (median over
rounds, with min–max) and ratios LOKG / DuckDB; ``--json PATH`` appends the row.

``--baseline DIR`` (a checkout, e.g. a git worktree at an older commit): in every round its
``spark_jobs/relation_stats.py`` (``--baseline-stage ingest``: its ``spark_jobs/ingest.py``
with its own ``formats.py``, on the same dump) also runs, in the same session — a before/after
under the same load — right after this tree's stages in even rounds and right before them in
odd ones (on the previous round's staged tables), since whichever runs second finds a warmer
JIT and page cache; its outputs are compared with DuckDB's too. The baseline calls the stage's ``run`` directly (not through ``run_stage``: no
output move, no record), which if anything favours it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import duckdb_sql
from bench.common import (
    PATHS, Peaks, bench_config, load_baseline, machine, spark_stages, start_spark, synth_dump)

TOLERANCE = 1e-9


def duck_round(dump: Path, spark_outputs: dict, config: dict, work: Path) -> tuple[dict, dict]:
    """One DuckDB ingest + relation_stats (the stage on the DuckDB engine, on that ingest's
    triples) on ``dump``; returns (step seconds, its tables)."""
    import duckdb

    from lokg.pipeline.config import section
    from lokg.spark_jobs import relation_stats

    con = duckdb.connect(str(work / "ref.duckdb"))
    con.execute("SET threads = 2")
    con.execute("SET preserve_insertion_order = true")
    seconds = {}
    started = time.perf_counter()
    languages = section(config, "ingest")["languages"]
    duckdb_sql.ingest(con, dump / "kg.nt", [languages] if isinstance(languages, str) else languages,
                      work)
    seconds["ingest"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    con.close()
    relation_stats.run({**config, "engine": {**config.get("engine", {}), "name": "duckdb"}},
                       {"triples": str(work / "triples.parquet"),
                        "relations": str(work / "relations.parquet"),
                        "entities": spark_outputs["entities"]}, str(work))
    seconds["relation_stats"] = round(time.perf_counter() - started, 2)
    tables = duckdb_sql.fetch_outputs(work)
    return seconds, tables


def baseline_round(module, stage: str, config: dict, dump: Path, outputs: dict,
                   out_dir: Path) -> tuple[float, dict]:
    """The baseline's stage on this round's dump (ingest) or staged inputs: (seconds,
    the outputs to compare with DuckDB's)."""
    out_dir.mkdir()
    inputs = {"dump": str(dump)} if stage == "ingest" else outputs
    started = time.perf_counter()
    result = module.run(config, inputs, str(out_dir))
    seconds = round(time.perf_counter() - started, 2)
    return seconds, result["outputs"] if stage == "ingest" else {**outputs, **result["outputs"]}


def compare(spark_outputs: dict, duck: dict) -> dict[str, str]:
    """'equal' or the first difference, per output that both hold (see the module doc)."""
    names = sorted(set(duck) & set(spark_outputs))
    spark = duckdb_sql.read_spark_outputs(spark_outputs, names)
    return {name: duckdb_sql.difference(spark[name], duck[name], TOLERANCE) for name in names}


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 2), "min": min(values), "max": max(values),
            "runs": values}


def timed_baseline(baseline, stage: str, config: dict, dump: Path, outputs: dict, tmp: str,
                   i: int, times: dict) -> dict:
    """One round of the baseline's stage, its seconds appended to ``times``; its tables."""
    seconds, before = baseline_round(baseline, stage, config, dump, outputs,
                                     Path(tmp) / f"base{i}")
    times.setdefault(f"baseline_{stage}", []).append(seconds)
    return before


def run(args) -> dict:
    config = bench_config(args, args.paths)
    config["ingest"]["format"] = "synth"
    with tempfile.TemporaryDirectory(prefix="lokg-duckdb-ref-", dir=args.workdir) as tmp:
        dump, generate_s = synth_dump(args, tmp, args.malformed_rate)
        spark, startup_s = start_spark(config)
        peaks = Peaks(spark)
        times: dict[str, list[float]] = {}
        loads, equality, baseline_equality, peak_mib = [], {}, {}, []
        stage = args.baseline_stage
        baseline = load_baseline(args.baseline, stage) if args.baseline else None
        outputs = None
        for i in range(args.rounds):
            loads.append(machine()["load_average"])
            baseline_first = baseline is not None and i % 2 == 1  # ABAB… → AB BA AB …
            if baseline_first:  # on the previous round's staged outputs (the same tables)
                before = timed_baseline(baseline, stage, config, dump, outputs, tmp, i, times)
            stages, reports, outputs = spark_stages(config, dump, Path(tmp) / f"store{i}", peaks)
            for name, st in stages.items():
                times.setdefault(f"lokg_{name}", []).append(st["seconds"])
            peak_mib.append(stages["ingest"]["driver_peak_mib"])
            if baseline and not baseline_first:
                before = timed_baseline(baseline, stage, config, dump, outputs, tmp, i, times)
            work = Path(tmp) / f"duck{i}"
            work.mkdir()
            seconds, tables = duck_round(dump, outputs, config, work)
            for name, s in seconds.items():
                times.setdefault(f"duckdb_{name}", []).append(s)
            equality = compare(outputs, tables)
            if baseline:
                baseline_equality = compare(before, tables)
            loads.append(machine()["load_average"])
            print(f"round {i + 1}/{args.rounds}: {step_paths(reports)} "
                  f"{ {k: v[-1] for k, v in times.items()} } equal: {equality} ingest steps: "
                  f"{reports['ingest']['step_seconds']}",
                  file=sys.stderr, flush=True)
    return {
        "mode": "duckdb_reference", "dump": str(args.dump) if args.dump else None,
        "seed": args.seed, "malformed_rate": None if args.dump else args.malformed_rate,
        "triples": reports["ingest"]["triples"], "lines": reports["ingest"]["lines"],
        "entities": reports["ingest"]["entities"], "relations": reports["ingest"]["relations"],
        "malformed": reports["ingest"]["malformed"],
        "ingest_path": reports["ingest"]["refresh"]["ingest"],
        "ingest_path_why": reports["ingest"]["refresh"]["why"],
        "paths": args.paths, "step_paths": step_paths(reports),
        "ingest_driver_peak_mib": peak_mib,
        "candidate_pairs": reports["relation_stats"]["candidate_pairs"],
        "ingest_steps": reports["ingest"]["step_seconds"],
        "relation_stats_steps": reports["relation_stats"]["step_seconds"],
        "rounds": args.rounds, "seconds": {k: spread(v) for k, v in times.items()},
        "ratios": ratios(times), "equality": equality,
        "baseline": str(args.baseline) if args.baseline else None,
        "baseline_stage": stage if args.baseline else None,
        "baseline_equality": baseline_equality,
        "generate_seconds": generate_s, "spark_startup_seconds": startup_s,
        "duckdb_version": __import__("duckdb").__version__, "load_averages": loads,
        "driver_memory": args.driver_memory, "cpus": machine()["cpus"],
    }


def step_paths(reports: dict) -> dict[str, str]:
    """Where each step ran, from the stages' own reports: their SQL engine (duckdb | spark)."""
    return {stage: reports[stage]["engine"]
            for stage in ("ingest", "entity_types", "relation_stats")}


def ratios(times: dict[str, list[float]]) -> dict[str, float]:
    """LOKG / DuckDB of the medians: ingest (LOKG's ingest stage) and relation_stats."""
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {step: round(med[f"lokg_{step}"] / med[f"duckdb_{step}"], 2)
           for step in ("ingest", "relation_stats")}
    for step in ("ingest", "relation_stats"):
        if f"baseline_{step}" in med:
            out[f"baseline_{step}"] = round(med[f"baseline_{step}"] / med[f"duckdb_{step}"], 2)
    return out


def table(row: dict) -> str:
    sec = row["seconds"]

    def cell(key: str) -> str:
        s = sec[key]
        return f"{s['median']:.1f} ({s['min']:.1f}–{s['max']:.1f})"

    rounds, paths = row["rounds"], row["step_paths"]
    lines = [f"| triples | step (path) | LOKG s, median (min–max), {rounds} rounds | "
             "DuckDB s, median (min–max) | LOKG / DuckDB |", "|--:|---|--:|--:|--:|"]
    for step in ("ingest", "relation_stats"):
        lines.append(f"| {row['triples']:,} | {step} ({paths[step]}) | {cell('lokg_' + step)} | "
                     f"{cell('duckdb_' + step)} | {row['ratios'][step]:.1f}× |")
    for step in ("ingest", "relation_stats"):
        if f"baseline_{step}" in sec:
            lines.append(f"| {row['triples']:,} | {step}, --baseline | "
                         f"{cell('baseline_' + step)} | {cell('duckdb_' + step)} | "
                         f"{row['ratios']['baseline_' + step]:.1f}× |")
    lines.append(f"| | entity_types ({paths['entity_types']}; LOKG only, input of both "
                 f"relation_stats) | {cell('lokg_entity_types')} | — | — |")
    lines.append(f"| | Spark session start-up (once, excluded above) | "
                 f"{row['spark_startup_seconds']:.1f} | — | — |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--triples", type=int, default=1_000_000)
    parser.add_argument("--dump", type=Path, help="an existing pipeline.synth directory")
    parser.add_argument("--malformed-rate", type=float, default=0.001)
    parser.add_argument("--rounds", type=int, default=2, help="Spark/DuckDB rounds, alternating")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--paths", choices=PATHS, default="spark",
                        help="spark: the stages on Spark SQL; product: the engine the build "
                             "resolves from the dump's size")
    parser.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", type=Path, help="append the result as one JSON line")
    parser.add_argument("--workdir", type=Path, help="parent of the temporary directory")
    parser.add_argument("--baseline", type=Path,
                        help="a checkout whose relation_stats also runs in every round")
    parser.add_argument("--baseline-stage", choices=("relation_stats", "ingest"),
                        default="relation_stats", help="the baseline's stage that runs")
    args = parser.parse_args(argv)
    row = run(args)
    print(json.dumps(row), flush=True)
    print("\n" + table(row))
    if args.json:
        with open(args.json, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
    if any(v != "equal" for v in [*row["equality"].values(), *row["baseline_equality"].values()]):
        sys.exit(f"outputs differ: {row['equality']} (baseline: {row['baseline_equality']})")


if __name__ == "__main__":
    main()

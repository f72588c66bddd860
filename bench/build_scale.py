"""The whole build at scale: each stage's time and peak memory over dump sizes,
their growth exponents, and what a larger dump would need.

    python -m bench.build_scale --sizes 10000,100000 --work W --markdown W/table.md
    python -m bench.build_scale --sizes 1e5,1e6,1e7 --work W --json W/runs.jsonl \\
        --set transe.epochs=20 --estimate 1e8

For each size the synthetic generator writes a dump (``pipeline.synth.generate``, ``--seed``,
``--questions`` labelled questions, the same for every size so they do not grow with it; a dump
already in ``W/dump-N`` is reused), then every stage runs as its own process, exactly as the
Airflow DAG runs it (``lokg build --stage S --build-id B``), and ``lokg publish`` publishes it.
Per stage it records the stage's own seconds (the driver's record: the stage's ``run``, a Spark
stage's session start included), the process's wall seconds (interpreter and imports too), its
process tree's CPU seconds (user + system of the process, the Spark JVM and its workers: on a
shared host the figure that carries over) and the peak resident memory of that tree, summed over
the tree and sampled every 0.2 s — a sampled peak, so a spike shorter than that can be missed.

``--one-process`` runs each build as a user does, ``lokg build`` in one process (one Spark
session for every Spark stage, where the DAG's tasks start one each), and charges each sample —
the tree's memory, the CPU its processes used since the last sample — to the stage the build's
log last announced (``start`` = interpreter and imports before the first stage; in one process a
stage's peak includes what earlier stages left resident, the JVM's heap above all):

    python -m bench.build_scale --sizes 1e5,1e6 --one-process --work W --json W/runs.jsonl \
        --markdown W/table.md --estimate 1e7

``--resume`` (a process per stage, with ``--json``): each stage's row is appended to the JSON as
it finishes, the build of size N has the id ``scale-N``, and the steps already there for a size
(same settings) are kept rather than run again — so a build longer than a session (10⁷ triples:
hours) continues where it stopped, its stages staged under ``W/store-N``:

    python -m bench.build_scale --sizes 1e5,1e6,1e7 --work W --json W/runs.jsonl --resume

Growth exponent: the least-squares slope of log(seconds) on log(triples) over the sizes, for
wall and for CPU seconds each (1 = linear; the target is ≤ 1.1). ``--estimate N``
extrapolates each stage's wall and CPU seconds along their exponents (at least 1: a smaller
one is fixed costs still dominating at these sizes), and its peak memory from
the largest size by the memory a triple adds (the slope of peak on triples over the sizes): an
estimate, labelled so. ``--json`` appends one object per (size, stage) as each size finishes;
``--markdown`` writes the tables. ``--from-json RUNS`` builds nothing: it prints the same
tables from a saved ``--json`` (another ``--estimate``, say):

    python -m bench.build_scale --from-json W/runs.jsonl --estimate 1e8

``--dump D`` builds a given dump instead (FB15k-237, say) the same way, once, and reports each
stage's seconds, CPU seconds, peak memory, its share of the total and the 1-minute load average
around it:

    python -m bench.build_scale --dump ../shared/data/fb15k237 --work W --json W/fb.jsonl \
        --markdown W/fb.md [--one-process]
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from bench.common import build_one_process, dump_for, run_measured, write_results


def build_measured(dump: Path, store: Path, build_id: str, overrides: list[str],
                   logs: Path, done: Mapping[str, dict], record) -> list[dict]:
    """Every stage, then publish, each as its own process: one row per step, each passed to
    ``record`` as it finishes. Steps in ``done`` (their rows) are not run again."""
    from lokg.pipeline.registry import STAGE_NAMES

    common = ["--store", str(store), "--build-id", build_id, "--dump", str(dump)]
    common += [arg for kv in overrides for arg in ("--set", kv)]
    rows = []
    for name in (*STAGE_NAMES, "publish"):
        if name in done:
            rows.append(done[name])
            continue
        argv = (["lokg", "publish", *common] if name == "publish"
                else ["lokg", "build", "--stage", name, *common])
        row = {"stage": name, **run_measured(argv, logs / f"{name}.log")}
        row["stage_s"] = stage_seconds(logs / f"{name}.log")
        rows.append(row)
        record(row)
        print(f"  {name}: {row['wall_s']:.1f} s wall, {row['peak_mib']:.0f} MiB", flush=True)
    return rows


def stage_seconds(log: Path) -> float | None:
    """The stage's own seconds, from the JSON line ``lokg build --stage`` prints last."""
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith("{") and '"seconds"' in line:
            return float(json.loads(line)["seconds"])
    return None


def exponent(sizes: list[int], seconds: list[float]) -> float | None:
    """Least-squares slope of log(seconds) on log(size); None under two usable points."""
    points = [(math.log(n), math.log(s)) for n, s in zip(sizes, seconds) if s and s > 0]
    if len(points) < 2:
        return None
    x, y = np.array(points).T
    return float(np.polyfit(x, y, 1)[0])


def memory_per_triple(sizes: list[int], peaks_mib: list[float]) -> float:
    """MiB a triple adds to the peak: the least-squares slope of peak on triples (a process's
    fixed memory, the JVM's capped heap above all, is the intercept, not charged per triple; a
    peak that fell — the collector kept less at the larger size — adds nothing); from one size,
    its peak over its triples."""
    if len(sizes) < 2:
        return peaks_mib[-1] / sizes[-1]
    return max(float(np.polyfit(np.array(sizes, float), np.array(peaks_mib, float), 1)[0]), 0.0)


def growth(runs: dict[int, list[dict]], estimate: int | None) -> list[dict]:
    """Per stage: its wall and CPU exponents over the sizes, the memory a triple adds to its peak
    and, with ``estimate``, its wall and CPU seconds extrapolated along those exponents (at least
    1) and its
    peak along that memory per triple from the largest size."""
    sizes = sorted(runs)
    largest = sizes[-1]
    out = []
    for last in runs[largest]:
        stage = last["stage"]
        seen = {n: r for n in sizes for r in runs[n] if r["stage"] == stage}
        per_triple = memory_per_triple(list(seen), [r["peak_mib"] for r in seen.values()])
        row = {"stage": stage, "bytes_per_triple": per_triple * 2**20}
        for figure in ("wall_s", "cpu_s"):
            slope = exponent(list(seen), [r[figure] for r in seen.values()])
            row[f"exponent_{figure}"] = slope
            if estimate and slope is not None:
                # at least linear: an exponent below 1 says fixed costs (a session, a model's
                # load) still dominate, which a larger dump does not keep up
                row[f"estimate_{figure}"] = last[figure] * (estimate / largest) ** max(slope, 1.0)
        if estimate:
            row["estimate_mib"] = last["peak_mib"] + per_triple * (estimate - largest)
        out.append(row)
    return out


def markdown(runs: dict[int, list[dict]], slopes: list[dict], estimate: int | None) -> str:
    """Per size and stage wall s (stage s) / CPU s / peak MiB, then per stage its exponents,
    memory per triple and, with ``estimate``, the extrapolation (labelled an estimate)."""
    sizes = sorted(runs)
    lines = ["| stage | " + " | ".join(f"{n:,}: wall s (stage s) / CPU s / peak MiB"
                                         for n in sizes) + " |",
             "|---|" + "--:|" * len(sizes)]
    for g in slopes:
        cells = []
        for n in sizes:
            r = next((r for r in runs[n] if r["stage"] == g["stage"]), None)
            own = f" ({r['stage_s']:.1f})" if r and r.get("stage_s") is not None else ""
            cells.append("—" if r is None else
                         f"{r['wall_s']:.1f}{own} / {r.get('cpu_s', 0):.1f} / {r['peak_mib']:.0f}")
        lines.append(f"| {g['stage']} | " + " | ".join(cells) + " |")
    totals = {f: [sum(r.get(f, 0) for r in runs[n]) for n in sizes] for f in ("wall_s", "cpu_s")}
    lines.append("| **total** | " + " | ".join(
        f"**{w:.1f}** / **{c:.1f}** / {max(r['peak_mib'] for r in runs[n]):.0f} (max)"
        for n, w, c in zip(sizes, totals["wall_s"], totals["cpu_s"])) + " |")
    return "\n".join(lines) + "\n\n" + growth_markdown(sizes, slopes, totals, estimate)


def growth_markdown(sizes: list[int], slopes: list[dict], totals: dict[str, list[float]],
                    estimate: int | None) -> str:
    """The exponents, bytes per triple and the estimate, per stage and for the total."""
    est = f" estimate at {estimate:,}: wall s / CPU s / MiB |" if estimate else ""
    lines = ["| stage | exponent wall | exponent CPU | peak bytes per added triple |"
             + est, "|---|--:|--:|--:|" + ("--:|" if estimate else "")]
    for g in slopes:
        extra = ""
        if estimate:
            extra = (" — |" if g.get("estimate_wall_s") is None else
                     f" {g['estimate_wall_s']:,.0f} / {_count_text(g.get('estimate_cpu_s'))}"
                     f" / {g['estimate_mib']:,.0f} |")
        lines.append(f"| {g['stage']} | {_slope_text(g['exponent_wall_s'])} | "
                     f"{_slope_text(g['exponent_cpu_s'])} | {g['bytes_per_triple']:,.0f} |"
                     + extra)
    total_est = ""
    if estimate:
        total_est = " {:,.0f} / {:,.0f} / {:,.0f} (max) |".format(
            *(sum(g.get(k) or 0 for g in slopes) for k in ("estimate_wall_s", "estimate_cpu_s")),
            max(g["estimate_mib"] for g in slopes))
    lines.append(f"| **total** | {_slope_text(exponent(sizes, totals['wall_s']))} | "
                 f"{_slope_text(exponent(sizes, totals['cpu_s']))} | |" + total_est)
    return "\n".join(lines) + "\n"


def dump_markdown(rows: list[dict]) -> str:
    """One build's table: per step its seconds, CPU, peak memory, share and load."""
    total_wall, total_cpu = sum(r["wall_s"] for r in rows), sum(r["cpu_s"] for r in rows)
    lines = ["| stage | wall s | stage s | CPU s | peak MiB | share of wall | load 1-min before → after |",
             "|---|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        own = "—" if r["stage_s"] is None else f"{r['stage_s']:.1f}"
        lines.append(f"| {r['stage']} | {r['wall_s']:.1f} | {own} | {r['cpu_s']:.1f} | "
                     f"{r['peak_mib']:.0f} | {100 * r['wall_s'] / total_wall:.1f} % | "
                     f"{r['load'][0]:.2f} → {r['load'][1]:.2f} |")
    lines.append(f"| **total** | **{total_wall:.1f}** | | **{total_cpu:.1f}** | "
                 f"{max(r['peak_mib'] for r in rows):.0f} (max) | 100 % | |")
    return "\n".join(lines) + "\n"


def _slope_text(slope: float | None) -> str:
    return "—" if slope is None else f"{slope:.2f}"


def _count_text(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000", help="triples per dump, comma-separated")
    ap.add_argument("--dump", type=Path, help="build this dump once instead of synthetic sizes")
    ap.add_argument("--one-process", action="store_true",
                    help="one `lokg build` process per build, not a process per stage")
    ap.add_argument("--work", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--estimate", type=float, help="extrapolate to this many triples")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--resume", action="store_true",
                    help="keep the steps of each size already in --json (build id scale-N) and "
                         "run the rest")
    ap.add_argument("--from-json", type=Path, metavar="RUNS",
                    help="no build: the tables and --estimate from a saved --json of --sizes")
    args = ap.parse_args(argv)
    estimate = int(args.estimate) if args.estimate else None
    if args.from_json:
        runs = runs_from_json(args.from_json)
        write_results([], markdown(runs, growth(runs, estimate), estimate), None, args.markdown)
        return
    if args.work is None:
        ap.error("--work is required to build")
    if args.dump:
        build_dump(args)
        return
    if args.resume and (args.one_process or not args.json):
        ap.error("--resume needs --json and a process per stage (no --one-process)")
    runs: dict[int, list[dict]] = {}
    for n in sorted(int(float(s)) for s in args.sizes.split(",")):
        print(f"{n:,} triples: load {os.getloadavg()}", flush=True)
        dump = dump_for(args.work, n, args.seed, args.questions)
        run = {"triples": n, "one_process": args.one_process, "overrides": args.overrides,
               "build_id": f"scale-{n}" if args.resume else f"scale-{n}-{os.getpid()}"}
        done = finished_steps(args.json, run) if args.resume else {}
        runs[n] = measured_build(args, dump, args.work / f"store-{n}", args.work / f"logs-{n}",
                                 run["build_id"], done, json_recorder(run, args.json))
    write_results([], markdown(runs, growth(runs, estimate), estimate), None, args.markdown)


def finished_steps(path: Path, run: dict) -> dict[str, dict]:
    """The rows a ``--resume`` run keeps: the steps of this size, settings and build id already
    in the ``--json`` file."""
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return {row["stage"]: row for row in rows
            if all(row.get(key) == value for key, value in run.items())}


def runs_from_json(path: Path) -> dict[int, list[dict]]:
    """The rows of a ``--json`` file of ``--sizes`` runs, per size; a size run twice keeps its
    later rows."""
    runs: dict[int, dict[str, dict]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if "triples" in row:
            runs.setdefault(row["triples"], {})[row["stage"]] = row
    return {n: list(rows.values()) for n, rows in runs.items()}


def measured_build(args: argparse.Namespace, dump: Path, store: Path, logs: Path,
                   build_id: str, done: Mapping[str, dict], record) -> list[dict]:
    """One measured build of ``dump``: in one process (``--one-process``: every row passed to
    ``record`` at the end) or a process per stage (each as it finishes); one row per step."""
    logs.mkdir(parents=True, exist_ok=True)
    if not args.one_process:
        return build_measured(dump.resolve(), store, build_id, args.overrides, logs, done,
                              record)
    rows = build_one_process(dump.resolve(), store, args.overrides, logs / "build.log")
    for row in rows:
        record(row)
    return rows


def build_dump(args: argparse.Namespace) -> None:
    """``--dump``: one measured build of a given dump, its table and JSON lines."""
    print(f"{args.dump}: load {os.getloadavg()}", flush=True)
    run = {"dump": str(args.dump), "one_process": args.one_process, "overrides": args.overrides}
    rows = measured_build(args, args.dump, args.work / "store", args.work / "logs",
                          f"dump-{os.getpid()}", {}, json_recorder(run, args.json))
    write_results([], dump_markdown(rows), None, args.markdown)


def json_recorder(run: dict, json_path: Path | None):
    """Appends a finished step's row, tagged with its ``run``, to the JSON-lines file."""
    return lambda row: write_results([{**run, **row}], "", json_path, None)


if __name__ == "__main__":
    main()

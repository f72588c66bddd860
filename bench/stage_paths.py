"""relation_stats, driver path against Spark path, as a small refresh runs it: each stage alone
in a fresh process, on the staged inputs a build cached.

    python -m bench.stage_paths --cache STORE/refresh/BUILD_ID --work W --json W/paths.json

``--cache`` is a store's refresh cache of one build (``refresh/<build_id>``: every stage's
outputs and ``_stage.json``); relation_stats reads its ingest's triples and relations,
entity_types' entities and transe's relation embeddings — what the build gave them. Per stage,
the Spark path (``--set`` ``driver_max_triples=0``) and the driver path (the same switch at
``DRIVER_ALWAYS``: the driver at any size), one after the other, each in its own process
(``build_scale.run_measured``: wall and CPU seconds of the process tree — the JVM and Spark's
Python workers included — sampled every 0.2 s): so the Spark path pays the JVM start and its
first queries' JIT, as the first Spark stage of a refresh does (a stage after another Spark
stage in the same build finds them paid). The two outputs are compared as multisets of rows,
floats to 9 places (``refresh_scale.table_equality``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.common import RUN, run_measured, table_equality

#: stage → (its inputs: name → (producing stage, artefact), outputs compared, the Spark switch)
STAGES = {
    "relation_stats": ({"entities": ("entity_types", "entities"),
                        "relations": ("ingest", "relations"), "triples": ("ingest", "triples"),
                        "relation_embeddings": ("transe", "relation_embeddings")},
                       ("relation_stats", "relation_pairs"), {"driver_max_triples": 0}),
}
#: A stage's driver switch set to this picks its driver path whatever the input's size.
DRIVER_ALWAYS = 10**12
def staged_inputs(cache: Path, wanted: dict) -> dict[str, str]:
    """The paths the cached stages wrote, by the artefact names a stage reads (moved with the
    cache: ``_stage.json`` names the staging directory the build wrote them in)."""
    inputs = {}
    for name, (stage, artefact) in wanted.items():
        record = json.loads((cache / stage / "_stage.json").read_text())
        inputs[name] = str(cache / stage / Path(record["outputs"][artefact]).name)
    return inputs


def path_settings(stage: str) -> dict[str, dict]:
    """The stage's settings for each path: its switch at 0 (Spark) or ``DRIVER_ALWAYS``."""
    switch = STAGES[stage][2]
    return {"spark": switch, "driver": {key: DRIVER_ALWAYS for key in switch}}


def measure(stage: str, cache: Path, work: Path) -> dict:
    """Both paths of one stage, Spark first; their costs and whether their outputs agree."""
    from lokg.runtime.contract import read_table

    wanted, outputs, _ = STAGES[stage]
    inputs = staged_inputs(cache, wanted)
    row = {"stage": stage}
    for path, settings in path_settings(stage).items():
        out = work / f"{stage}-{path}"
        config = {stage: settings}
        argv = [sys.executable, "-c", RUN, json.dumps(config), json.dumps(inputs), str(out), stage]
        row[path] = run_measured(argv, work / f"{stage}-{path}.log")
    row["equality"] = {name: table_equality(
        *(read_table(next((work / f"{stage}-{p}").glob(f"{name}*"))) for p in ("driver", "spark")))
        ["equal"] for name in outputs}
    return row


def markdown(rows: list[dict]) -> str:
    lines = ["| stage | Spark wall s | driver wall s | Spark CPU s | driver CPU s | driver / Spark "
             "(CPU) | load (1 min) | equal |", "|---|--:|--:|--:|--:|--:|---|---|"]
    for row in rows:
        s, d = row["spark"], row["driver"]
        lines.append(f"| {row['stage']} | {s['wall_s']:.1f} | {d['wall_s']:.1f} | {s['cpu_s']:.1f} "
                     f"| {d['cpu_s']:.1f} | {d['cpu_s'] / s['cpu_s']:.1%} | {s['load'][0]:.1f} → "
                     f"{d['load'][1]:.1f} | {all(row['equality'].values())} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, required=True, help="STORE/refresh/<build_id>")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--stages", nargs="+", default=list(STAGES), choices=list(STAGES))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    rows = [measure(stage, args.cache, args.work) for stage in args.stages]
    print(json.dumps(rows))
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

"""The ``gat`` stage alone on a built store, several code versions and settings in one run.

    python -m bench.gat_stage --build STORE/builds/ID --work W \\
        --run old=../wt-gat-old --run new=. --run new-2threads=.:gat.threads=2 \\
        --json W/gat.jsonl --markdown W/gat.md

Each ``--run LABEL=CHECKOUT[:KEY=VALUE,...]`` runs ``training.gat.run`` of that checkout (its
own process, that checkout on ``PYTHONPATH``, config overrides after the colon) on the inputs
of a published build (``--build``: its triples, relations, relation_map, entities, entity
vectors and ids, TransE relation embeddings), writing into ``W/LABEL``. Per run: wall and CPU
seconds of the process (user + system, sampled every 0.2 s by ``build_scale.TreeMeter``: on a
shared host the figure that carries over), the stage's own training seconds and seconds per
epoch, peak resident memory, the link losses, and — against the first run — the largest and
mean absolute difference of the exported attention per edge (the same edges in the same order:
the graph is sorted the same way by every version). ``--repeat N`` runs the list N times,
interleaved, so that the host's load falls on every version alike.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from bench.common import run_measured, write_results

#: the gat stage's inputs, as a published build lays them out
INPUT_FILES = {"triples": "triples.parquet", "relations": "relations.parquet",
               "relation_map": "relation_map.parquet", "entities": "entities.parquet",
               "entity_ids": "entity_ids.parquet", "entity_vectors": "entity_vectors.npy",
               "relation_embeddings": "models/relation_embeddings.npy"}

CHILD = ("import json, sys; from lokg.pipeline.config import load_config; "
         "from lokg.training import gat; "
         "r = gat.run(load_config(None, json.loads(sys.argv[1])), json.loads(sys.argv[2]), "
         "sys.argv[3]); print('REPORT ' + json.dumps(r['report']))")


def parse_run(spec: str) -> dict:
    """``LABEL=CHECKOUT[:KEY=VALUE,...]`` → label, checkout and config overrides."""
    label, _, rest = spec.partition("=")
    code, _, overrides = rest.partition(":")
    if not label or not code:
        raise SystemExit(f"--run {spec!r}: expected LABEL=CHECKOUT[:KEY=VALUE,...]")
    return {"label": label, "code": Path(code).resolve(),
            "overrides": [kv for kv in overrides.split(",") if kv]}


def run_one(run: dict, inputs: dict[str, str], work: Path, overrides: list[str]) -> dict:
    """One measured stage run; its report's figures and the exported attention."""
    out = work / run["label"]
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-c", CHILD, json.dumps(overrides + run["overrides"]),
            json.dumps(inputs), str(out)]
    measured = run_measured(argv, work / f"{run['label']}.log", code=run["code"])
    report = next(json.loads(line[len("REPORT "):]) for line in
                  (work / f"{run['label']}.log").read_text().splitlines()
                  if line.startswith("REPORT "))
    attention = pq.read_table(out / "edges.parquet", columns=["attention"]).column(0).to_numpy()
    return {"label": run["label"], "code": str(run["code"]),
            "overrides": overrides + run["overrides"], **measured,
            "train_s": report["step_seconds"]["train"], "epochs": report["epochs"],
            "seconds_per_epoch": report["seconds_per_epoch"],
            "link_loss": report["link_loss"], "eval_link_loss": report["eval_link_loss"],
            "attention": attention}


def compared(rows: list[dict]) -> list[dict]:
    """Rows without the attention arrays, each with its difference to the first row's."""
    reference = rows[0]["attention"]
    out = []
    for row in rows:
        diff = np.abs(row["attention"] - reference)
        out.append({**{k: v for k, v in row.items() if k != "attention"},
                    "attention_max_abs_diff": float(diff.max()),
                    "attention_mean_abs_diff": float(diff.mean())})
    return out


def markdown(rows: list[dict]) -> str:
    lines = ["| run | CPU s | wall s | train s | s / epoch | epochs | link loss first → last | "
             "eval link loss after | max abs Δα vs first | peak MiB | load 1-min before → after |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        lines.append(
            f"| {r['label']} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | {r['train_s']:.1f} | "
            f"{r['seconds_per_epoch']:.2f} | {r['epochs']} | {r['link_loss']['first']:.4f} → "
            f"{r['link_loss']['last']:.4f} | {r['eval_link_loss']['after']:.4f} | "
            f"{r['attention_max_abs_diff']:.2e} | {r['peak_mib']:.0f} | "
            f"{r['load'][0]:.2f} → {r['load'][1]:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, required=True, help="a published build's directory")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--run", dest="runs", action="append", required=True, type=parse_run,
                    metavar="LABEL=CHECKOUT[:KEY=VALUE,...]")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="config override for every run")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args(argv)
    inputs = {name: str((args.build / rel).resolve()) for name, rel in INPUT_FILES.items()}
    missing = sorted(name for name, path in inputs.items() if not Path(path).exists())
    if missing:
        raise SystemExit(f"{args.build}: no {missing} (a published build's directory?)")
    print(f"load {os.getloadavg()}", flush=True)
    rows = []
    for repeat in range(args.repeat):
        for run in args.runs:
            label = run["label"] + (f"#{repeat + 1}" if args.repeat > 1 else "")
            rows.append(run_one({**run, "label": label}, inputs, args.work, args.overrides))
            print(f"  {label}: {rows[-1]['cpu_s']:.1f} CPU s, {rows[-1]['wall_s']:.1f} s wall",
                  flush=True)
    rows = compared(rows)
    write_results(rows, markdown(rows), args.json, args.markdown)


if __name__ == "__main__":
    main()

"""Warm-started TransE and GAT in a refresh: FB15k-237 (or a synthetic dump)
with 1 % of its triples changed, a warm refresh against a full build.

    python -m bench.warm_refresh --work W [--dump ../shared/data/fb15k237] \\
        [--share 0.01] [--seed 0] [--set KEY=VALUE ...]
    python -m bench.warm_refresh --work W --synth 20000

Builds and publishes the dump into ``W/store`` (a full build), writes ``W/d2``: the dump with
``share`` of its triples changed, half removed and half added (FB15k-237: random ``train.txt``
lines removed, new triples between existing entities with existing relations added;
``--synth N``: a ``pipeline.synth`` dump of N triples, seed 7, 200 questions, edited by
``pipeline.dump_edit.edit_synth_dump``, ``gat.questions`` its train.jsonl), then builds ``W/d2`` up
to ``gat`` twice: as a refresh of ``W/store`` (transe and gat warm-start) and as a full build
into ``W/full``. Prints one JSON object: the transe and gat stage seconds of both (same session,
so compare the ratio), the epochs each ran, whether the SCOS merge groups are equal (and the
merges they share), the GAT eval link loss (fixed triples and negatives) of both, the agreement
of the two attention tables (Pearson r and mean |Δα| over the edges) and, with gold paths
(``--synth``), the GAT's mean attention on them (the check of tests/test_refresh_learned.py;
FB15k-237 has no gold paths).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import time
from pathlib import Path

from bench.common import attention_agreement, stage_record
from lokg.pipeline import driver as pipeline
from lokg.pipeline.config import load_config
from lokg.runtime.contract import Store, read_table

LEARNED = ("transe", "gat")


def edited_dump(src: Path, dst: Path, share: float, seed: int) -> dict:
    """``src`` copied to ``dst`` with ``share`` of all triples changed in ``train.txt``: half
    of them removed, as many new ones added."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    lines = (src / "train.txt").read_text(encoding="utf-8").splitlines()
    total = sum(len((src / f).read_text(encoding="utf-8").splitlines())
                for f in ("train.txt", "valid.txt", "test.txt"))
    n = round(total * share / 2)
    rng = random.Random(seed)
    gone = set(rng.sample(range(len(lines)), n))
    triples = [line.split("\t") for line in lines]
    present = {tuple(t) for t in triples}
    entities = sorted({t[0] for t in triples} | {t[2] for t in triples})
    relations = sorted({t[1] for t in triples})
    added: set[tuple[str, str, str]] = set()
    while len(added) < n:
        triple = (rng.choice(entities), rng.choice(relations), rng.choice(entities))
        if triple not in present:
            added.add(triple)
    kept = [line for i, line in enumerate(lines) if i not in gone]
    (dst / "train.txt").write_text("\n".join(kept + ["\t".join(t) for t in sorted(added)])
                                   + "\n", encoding="utf-8")
    return {"triples": total, "removed": n, "added": n}


def dumps(args, work: Path) -> tuple[Path, dict]:
    """(the first dump, the edit) with the edited dump written to ``work/d2``."""
    if not args.synth:
        return Path(args.dump), edited_dump(Path(args.dump), work / "d2", args.share, args.seed)
    from lokg.pipeline.synth import generate
    from lokg.pipeline.dump_edit import edit_synth_dump

    first = work / "d1"
    if not first.exists():
        generate(first, n_triples=args.synth, seed=7, n_questions=200)
    shutil.rmtree(work / "d2", ignore_errors=True)
    n = round(args.synth * args.share / 2)
    edit_synth_dump(first, work / "d2", remove_edges=n, add_edges=n, seed=args.seed)
    return first, {"triples": args.synth, "removed": n, "added": n}


def merge_groups(store: Path, build_id: str) -> set[frozenset]:
    rows = read_table(Path(stage_record(store, build_id, "scos_merge")["outputs"]["relation_map"]))
    groups: dict[str, set] = {}
    for row in rows.to_pylist():
        groups.setdefault(row["canonical_name"], set()).add(row["name"])
    return {frozenset(g) for g in groups.values() if len(g) > 1}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", default="../shared/data/fb15k237")
    parser.add_argument("--synth", type=int, help="a synthetic dump of this many triples instead")
    parser.add_argument("--work", required=True)
    parser.add_argument("--share", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    work = Path(args.work)
    out: dict = {"load_start": uptime()}
    dump, out["edit"] = dumps(args, work)
    if args.synth:
        args.overrides += ["ingest.format=synth", f"gat.questions={dump}/train.jsonl"]
    config = load_config(None, args.overrides)
    if not (Store(work / "store").current_id() if (work / "store").exists() else None):
        pipeline.build(str(dump), str(work / "store"), config, build_id="b1", log=print)
    runs = {"warm": work / "store", "full": work / "full"}
    for run, store in runs.items():
        started = time.perf_counter()
        pipeline.build(str(work / "d2"), str(store), config, build_id=run, until="gat", log=print)
        out[f"{run}_until_gat_s"] = round(time.perf_counter() - started, 1)
    for stage in LEARNED:
        recs = {run: stage_record(store, run, stage) for run, store in runs.items()}
        out[stage] = {run: {"seconds": r["seconds"], "epochs": r["report"]["epochs"],
                            "refresh": r["report"]["refresh"]} for run, r in recs.items()}
        out[stage]["warm_over_full"] = round(recs["warm"]["seconds"] / recs["full"]["seconds"], 3)
    gat = {run: stage_record(store, run, "gat")["report"] for run, store in runs.items()}
    out["gat_eval_link_loss"] = {run: report["eval_link_loss"] for run, report in gat.items()}
    if args.synth:
        out["gold_attention"] = {run: report["gold_attention"] for run, report in gat.items()}
    groups = {run: merge_groups(store, run) for run, store in runs.items()}
    out["merge_groups"] = {"equal": groups["warm"] == groups["full"],
                           "warm": len(groups["warm"]), "full": len(groups["full"]),
                           "shared": len(groups["warm"] & groups["full"])}
    out["attention"] = attention_agreement(
        *(Path(stage_record(store, run, "gat")["outputs"]["edges"]) for run, store in runs.items()))
    out["load_end"] = uptime()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

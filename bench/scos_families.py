"""SCOS merge quality on the synthetic generator's planted relation families.

    python -m bench.scos_families                       # 10^4, 10^5, 10^6 triples, seed 0
    python -m bench.scos_families --triples 10000 --json scos.json

For each size: generate a synthetic KG, run `lokg build` up to and including ``scos_merge``
(ingest → entity_types → transe → relation_stats → scos_merge), read the relation map φ, and
compare the pairs it puts together with the ground truth of ``families.json``:

* predicted pairs = unordered pairs of relations mapped to the same canonical relation;
* true pairs      = unordered pairs inside one synonym family;
* precision = |pred ∩ true| / |pred| (1 when nothing merged), recall = |pred ∩ true| / |true|.

Inverse pairs are reported separately (how many were merged): the §2.5 similarity compares
type-pair roles in one direction, so inverses are not expected to merge. Stage times come from
the stage records. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from pathlib import Path


def family_pairs(groups: list[list[str]]) -> set[frozenset]:
    return {frozenset(p) for g in groups for p in itertools.combinations(sorted(g), 2)}


def merged_pairs(relation_map) -> set[frozenset]:
    clusters: dict[str, list[str]] = {}
    for row in relation_map.to_pylist():
        clusters.setdefault(row["canonical_name"], []).append(row["name"])
    return family_pairs(list(clusters.values()))


def run_size(n_triples: int, seed: int, workdir: Path, overrides: list[str]) -> dict:
    from lokg.pipeline import driver as pipeline
    from lokg.pipeline.config import load_config
    from lokg.runtime.contract import Store, new_build_id, read_table
    from lokg.pipeline.synth import generate

    dump = workdir / f"synth-{n_triples}"
    generate(dump, n_triples=n_triples, seed=seed, n_questions=0)
    families = json.loads((dump / "families.json").read_text())
    config = load_config(None, ["ingest.format=synth", *overrides])
    store = Store(workdir / f"store-{n_triples}")
    build_id = new_build_id()
    started = time.perf_counter()
    timings = {}
    for name in pipeline.STAGE_NAMES:
        record = pipeline.run_stage(store, build_id, name, config, str(dump))
        timings[name] = record["seconds"]
        if name == "scos_merge":
            break
    total = time.perf_counter() - started
    records = pipeline.stage_records(store, build_id)
    scos = records["scos_merge"]
    relation_map = read_table(Path(scos["outputs"]["relation_map"]), "relation_map")
    predicted = merged_pairs(relation_map)
    truth = family_pairs(families["synonyms"])
    inverses = family_pairs(families["inverses"])
    hit = predicted & truth
    return {
        "triples": n_triples,
        "R0": scos["report"]["R0"],
        "R_star": scos["report"]["R_star"],
        "rho_hat": round(scos["report"]["rho_hat"], 4),
        "L_info": round(scos["report"]["L_info"], 4),
        "precision": round(len(hit) / len(predicted), 4) if predicted else 1.0,
        "recall": round(len(hit) / len(truth), 4) if truth else 1.0,
        "merged_pairs": len(predicted),
        "true_pairs": len(truth),
        "inverse_pairs_merged": len(predicted & inverses),
        "false_merges": sorted(sorted(p) for p in predicted - truth),
        "stage_seconds": timings,
        "seconds": round(total, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--triples", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="config override (repeatable)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    parser.add_argument("--workdir", type=Path, help="keep dumps and stores here")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="lokg-scos-bench-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        rows = []
        for n in args.triples:
            rows.append(run_size(n, args.seed, workdir, args.overrides))
            print(json.dumps(rows[-1]), flush=True)
    print("\n| triples | R0 → R* | ρ̂ | L_info | precision | recall | inverses merged | "
          "ingest+entity_types s | transe s | relation_stats s | scos_merge s |")
    print("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        t = r["stage_seconds"]
        print(f"| {r['triples']:,} | {r['R0']} → {r['R_star']} | {r['rho_hat']} | {r['L_info']} | "
              f"{r['precision']} | {r['recall']} | {r['inverse_pairs_merged']} | "
              f"{t['ingest'] + t['entity_types']:.0f} | {t['transe']:.0f} | "
              f"{t['relation_stats']:.0f} | {t['scos_merge']:.0f} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

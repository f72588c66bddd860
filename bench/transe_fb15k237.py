"""The SCOS merge list on FB15k-237 with each TransE trainer, from one ingest.

    python -m bench.transe_fb15k237 --dump ../shared/data/fb15k237 --workdir /tmp/transe-fb

Runs ``ingest`` and ``entity_types`` once, then for ``transe.trainer`` = ``pykeen`` (the previous
CPU default) and ``sparse`` (the new one) re-runs ``transe`` → ``relation_stats`` →
``scos_merge`` in the same staged build (a stage re-run replaces only its own outputs; TransE
feeds both the candidate pairs and the cosine term), and prints each merge list in order with
its stage times, then the merges the two lists share. Default config otherwise.

    python -m bench.transe_fb15k237 --compare STORE_A STORE_B

prints the same for two stores' published builds (the FB15k-237 end-to-end runs).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


TRAINED = ("transe", "relation_stats", "scos_merge")


def merges(merge_log: str | Path) -> list[tuple]:
    """(left, right, sim, θ) of each merge, in order."""
    import pyarrow.parquet as pq

    return [(m["left"], m["right"], round(m["sim"], 3), round(m["theta"], 3))
            for m in pq.read_table(merge_log).to_pylist()]


def published_merges(store_root: Path) -> dict:
    """A published build's merge list, labelled by its store (``--compare``)."""
    from lokg.runtime.contract import Store

    build = Store(store_root).build()
    return {"trainer": str(store_root), "build": build.build_id,
            "merges": merges(build.path / "reports" / "merge_log.parquet")}


def print_merges(runs: list[dict]) -> None:
    """Each run's merge list, then the merges the first two share."""
    for r in runs:
        print(json.dumps({k: v for k, v in r.items() if k != "merges"}))
        for i, (left, right, sim, theta) in enumerate(r["merges"], 1):
            print(f"{i}. `{left}` + `{right}` ({sim}; {theta})")
    if len(runs) < 2:
        return
    shared = {frozenset(m[:2]) for m in runs[0]["merges"]} & {
        frozenset(m[:2]) for m in runs[1]["merges"]}
    print(f"shared merges: {len(shared)} of {len(runs[0]['merges'])} ({runs[0]['trainer']}) and "
          f"{len(runs[1]['merges'])} ({runs[1]['trainer']})")


def run_trainer(store, build_id, dump: str, trainer: str, overrides: list[str]) -> dict:
    """transe → relation_stats → scos_merge with one trainer; times, report and merges."""
    from lokg.pipeline import driver
    from lokg.pipeline.config import load_config

    config = load_config(None, [f"transe.trainer={trainer}", *overrides])
    records = {name: driver.run_stage(store, build_id, name, config, dump) for name in TRAINED}
    transe = records["transe"]["report"]
    scos = records["scos_merge"]["report"]
    return {"trainer": trainer,
            "seconds": {name: round(r["seconds"], 1) for name, r in records.items()},
            "epochs": transe["epochs"], "converged": transe["converged"],
            "R0": scos["R0"], "R_star": scos["R_star"], "rho_hat": round(scos["rho_hat"], 4),
            "L_info": round(scos["L_info"], 4),
            "merges": merges(records["scos_merge"]["outputs"]["merge_log"])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compare", nargs=2, type=Path, metavar="STORE",
                        help="only print the merge lists of two stores' published builds")
    parser.add_argument("--dump")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--build-id", help="a staged build in WORKDIR/store to reuse: its "
                        "stages before transe are not run again")
    parser.add_argument("--trainers", nargs="+", default=["pykeen", "sparse"],
                        choices=["pykeen", "sparse"])
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="config override for the sparse run")
    args = parser.parse_args(argv)
    if args.compare:
        print_merges([published_merges(root) for root in args.compare])
        return
    if not (args.dump and args.workdir):
        parser.error("--dump and --workdir are required (or --compare)")
    from lokg.pipeline import driver
    from lokg.pipeline.config import load_config
    from lokg.runtime.contract import Store, new_build_id

    store, build_id = Store(args.workdir / "store"), args.build_id or new_build_id()
    done = driver.stage_records(store, build_id)
    for name in driver.STAGE_NAMES[:driver.STAGE_NAMES.index("transe")]:
        if name not in done:
            driver.run_stage(store, build_id, name, load_config(None, []), args.dump)
    runs = [run_trainer(store, build_id, args.dump, t, args.overrides if t == "sparse" else [])
            for t in args.trainers]
    print_merges(runs)


if __name__ == "__main__":
    main()

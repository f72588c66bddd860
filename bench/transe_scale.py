"""TransE at scale: PyKEEN's trainer vs the sparse trainer, same inputs, same run.

    python -m bench.transe_scale --triples 100000 1000000 --new-only 10000000 \\
        --old-cap 1800 --workdir /tmp/transe-bench

For each size: generate the synthetic dump (``pipeline.synth.generate``, seed 0) and run the
``ingest`` stage once into ``WORKDIR/store-N`` (reused when present: a 10⁷ ingest takes minutes),
then run the ``transe`` stage with ``transe.trainer=pykeen`` (the previous default on CPU; killed
after ``--old-cap`` seconds and reported as "> cap") and ``transe.trainer=sparse`` (the new CPU
default), each in its own process on CPU so its peak RSS is its own. Everything else is the
default config. Reports wall seconds of the whole stage, the process's CPU seconds (user + system:
what the run costs when the shared host's load inflates wall time), training seconds (wall),
epochs run, peak RSS
and a quick quality figure from ``families.json``: the mean cosine of the planted synonym pairs
against the mean over all other relation pairs (the merge quality itself is
bench/scos_families.py's).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path


def ingest_outputs(n_triples: int, workdir: Path) -> dict:
    """``{triples, relations}`` paths of an ingest of the N-triple dump, made once per workdir."""
    pointer = workdir / f"ingest-{n_triples}.json"
    if pointer.exists():
        return json.loads(pointer.read_text())
    from lokg.pipeline import driver
    from lokg.pipeline.synth import generate
    from lokg.pipeline.config import load_config
    from lokg.runtime.contract import Store, new_build_id

    dump = workdir / f"synth-{n_triples}"
    generate(dump, n_triples=n_triples, seed=0, n_questions=0)
    config = load_config(None, ["ingest.format=synth"])
    store, build_id = Store(workdir / f"store-{n_triples}"), new_build_id()
    for name in driver.STAGE_NAMES:
        record = driver.run_stage(store, build_id, name, config, str(dump))
        if name == "ingest":
            break
    outputs = {k: record["outputs"][k] for k in ("triples", "relations")}
    pointer.write_text(json.dumps({**outputs, "dump": str(dump)}))
    return {**outputs, "dump": str(dump)}


def family_cosines(out: Path, inputs: dict) -> tuple[float, float]:
    """(mean cosine of planted synonym pairs, mean cosine of all other pairs of seen relations)."""
    import numpy as np
    import pyarrow.parquet as pq

    emb = np.load(out / "relation_embeddings.npy").astype(np.float64)
    names = pq.read_table(inputs["relations"]).to_pydict()
    ids = dict(zip(names["name"], names["id"]))
    unit = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    sims = unit @ unit.T
    families = json.loads((Path(inputs["dump"]) / "families.json").read_text())["synonyms"]
    planted = {(ids[a], ids[b]) for g in families for a in g for b in g if a != b}
    seen = np.flatnonzero(np.linalg.norm(emb, axis=1) > 0)
    other = [sims[i, j] for i in seen for j in seen if i != j and (i, j) not in planted]
    return (round(float(np.mean([sims[i, j] for i, j in planted])), 3),
            round(float(np.mean(other)), 3))


def child(settings: dict, inputs: dict, out: Path) -> dict:
    """Run the transe stage once in this process; its figures plus this process's peak RSS."""
    from lokg.training import transe

    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    result = transe.run({"transe": {**settings, "device": "cpu"}}, inputs, str(out))
    trainer = settings["trainer"]
    report = result["report"]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"trainer": trainer, "wall_s": round(time.perf_counter() - started, 1),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "train_s": report["seconds"], "epochs": report["epochs"],
            "converged": report["converged"], "final_loss": report["final_loss"],
            "entities": report["entities"], "triples": report["triples"],
            "peak_rss_mb": usage.ru_maxrss // 1024}


def timed(settings: dict, inputs: dict, out: Path, cap: float | None) -> dict:
    """The child run in a fresh process; ``{"capped": cap}`` when it ran past ``cap`` s."""
    trainer = settings["trainer"]
    stage_inputs = {k: inputs[k] for k in ("triples", "relations")}
    cmd = [sys.executable, __file__, "--child", json.dumps(settings), json.dumps(stage_inputs),
           str(out)]
    try:
        # stdout: the child's JSON line; stderr (the trainer's per-epoch log) passes through
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=cap, check=True)
    except subprocess.TimeoutExpired:
        return {"trainer": trainer, "capped": cap}
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"{trainer} failed (exit {exc.returncode}); its log is above") from exc
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["synonym_cos"], result["other_cos"] = family_cosines(out, inputs)
    return result


def row(n: int, r: dict) -> str:
    if "capped" in r:
        return f"| {n:,} | {r['trainer']} | > {r['capped']:.0f} | – | – | – | – | – |"
    return (f"| {n:,} | {r['trainer']} | {r['wall_s']:.0f} | {r['cpu_s']:.0f} | "
            f"{r['train_s']:.0f} | "
            f"{r['epochs']}{' (converged)' if r['converged'] else ''} | {r['peak_rss_mb']:,} | "
            f"{r['synonym_cos']} / {r['other_cos']} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--triples", type=int, nargs="*", default=[100_000, 1_000_000],
                        help="sizes run with both trainers")
    parser.add_argument("--new-only", type=int, nargs="*", default=[],
                        help="sizes run with the sparse trainer only")
    parser.add_argument("--old-cap", type=float, default=1800, help="seconds; PyKEEN is killed")
    parser.add_argument("--workdir", type=Path, help="dumps, stores and runs (required)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="transe setting for the sparse runs, e.g. "
                        "epochs=10 (repeatable; values as JSON)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        settings, inputs, out = args.child
        print(json.dumps(child(json.loads(settings), json.loads(inputs), Path(out))))
        return
    if args.workdir is None:
        parser.error("--workdir is required")
    args.workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in [*args.triples, *args.new_only]:
        inputs = ingest_outputs(n, args.workdir)
        trainers = ["sparse"] + (["pykeen"] if n in args.triples else [])
        sparse = {k: json.loads(v) for k, v in (o.split("=", 1) for o in args.overrides)}
        for trainer in trainers:
            cap = args.old_cap if trainer == "pykeen" else None
            settings = {"trainer": trainer, **(sparse if trainer == "sparse" else {})}
            out = args.workdir / f"out-{n}-{trainer}"
            rows.append((n, timed(settings, inputs, out, cap)))
            print(json.dumps({"triples": n, **rows[-1][1]}), flush=True)
    print("\n| triples | trainer | stage wall s | process CPU s | training s | epochs | "
          "peak RSS MB | cos synonyms / others |")
    print("|--:|---|--:|--:|--:|--:|--:|--:|")
    for n, r in rows:
        print(row(n, r))


if __name__ == "__main__":
    main()

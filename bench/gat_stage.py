"""The ``gat`` stage alone on a built store, several code versions and settings in one run.

    python -m bench.gat_stage --build STORE/builds/ID --work W \\
        --run old=../wt-gat-old --run new=. --run new-2threads=.:gat.threads=2 \\
        --json W/gat.jsonl --markdown W/gat.md
    python -m bench.gat_stage --synthetic 100000 --synthetic 1000000 --work W \\
        --run old=../wt-gat-old --run new=.

Each ``--run LABEL=CHECKOUT[:KEY=VALUE,...]`` runs ``training.gat.run`` of that checkout (its
own process under the checkout's own ``.venv/bin/python``, config overrides after the colon) on
the inputs of a published build (``--build``: its triples, relations, relation_map, entities, entity
vectors and ids, TransE relation embeddings), writing into ``W/LABEL``. Per run: wall and CPU
seconds of the process (user + system, sampled every 0.2 s by ``build_scale.TreeMeter``: on a
shared host the figure that carries over), the stage's own training seconds and seconds per
epoch, peak resident memory, the link losses, and — against the first run — the largest and
mean absolute difference of the exported attention per edge (the same edges in the same order:
the graph is sorted the same way by every version). ``--repeat N`` runs the list N times,
interleaved, so that the host's load falls on every version alike.

``--synthetic N`` (repeatable) instead of ``--build``: the inputs made from a synthetic dump of N
triples (``pipeline.synth``; entities and relations numbered in key order, random unit entity
vectors of ``--vector-dim`` floats, random TransE vectors), so that the stage's memory and time
are measured at several sizes without building them; per run label, the slope of its peak RSS
per added triple between the smallest and the largest size, and the 10⁷ and 10⁸ estimates on
that line. Peak RSS is the child's own ``ru_maxrss`` (exact), beside the sampled tree peak.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from bench.common import checkout_python, run_measured, write_results

#: the gat stage's inputs, as a published build lays them out
INPUT_FILES = {"triples": "triples.parquet", "relations": "relations.parquet",
               "relation_map": "relation_map.parquet", "entities": "entities.parquet",
               "entity_ids": "entity_ids.parquet", "entity_vectors": "entity_vectors.npy",
               "relation_embeddings": "models/relation_embeddings.npy"}

CHILD = ("import json, sys; from lokg.pipeline.config import load_config; "
         "from lokg.training import gat; "
         "r = gat.run(load_config(None, json.loads(sys.argv[1])), json.loads(sys.argv[2]), "
         "sys.argv[3]); print('REPORT ' + json.dumps(r['report'])); import resource; "
         "print('PEAK', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")


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
    argv = [str(checkout_python(run["code"])), "-c", CHILD,
            json.dumps(overrides + run["overrides"]), json.dumps(inputs), str(out)]
    measured = run_measured(argv, work / f"{run['label']}.log", code=run["code"])
    report = next(json.loads(line[len("REPORT "):]) for line in
                  (work / f"{run['label']}.log").read_text().splitlines()
                  if line.startswith("REPORT "))
    peak = next(int(line.split()[1]) for line in
                (work / f"{run['label']}.log").read_text().splitlines() if line.startswith("PEAK "))
    attention = pq.read_table(out / "edges.parquet", columns=["attention"]).column(0).to_numpy()
    return {"label": run["label"], "code": str(run["code"]), "peak_rss_mib": round(peak / 1024, 1),
            "overrides": overrides + run["overrides"], **measured,
            "train_s": report["step_seconds"]["train"], "epochs": report["epochs"],
            "seconds_per_epoch": report["seconds_per_epoch"],
            "link_loss": report["link_loss"], "eval_link_loss": report["eval_link_loss"],
            "attention": attention}


def synthetic_inputs(work: Path, n_triples: int, vector_dim: int) -> dict[str, str]:
    """The gat stage's inputs from a synthetic dump of ``n_triples`` (made once under ``work``):
    entity and relation ids in key order, identity relation map, random unit vectors."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    from bench.common import dump_for
    from lokg.runtime.contract import write_table

    root = work / f"inputs-{n_triples}"
    paths = {name: root / rel for name, rel in INPUT_FILES.items()}
    if all(p.exists() for p in paths.values()):
        return {name: str(p) for name, p in paths.items()}
    dump = dump_for(work, n_triples, seed=0, questions=0)
    kg = pcsv.read_csv(dump / "kg.tsv", read_options=pcsv.ReadOptions(column_names=["s", "r", "o"]),
                       parse_options=pcsv.ParseOptions(delimiter="\t", quote_char=False))
    keys = np.unique(np.concatenate([kg.column(c).to_numpy(zero_copy_only=False)
                                     for c in ("s", "o")]))
    names = np.unique(kg.column("r").to_numpy(zero_copy_only=False))
    ids = {c: np.searchsorted(keys if c != "r" else names,
                              kg.column(c).to_numpy(zero_copy_only=False)) for c in "sro"}
    tri = np.unique(np.stack([ids["s"], ids["r"], ids["o"]], 1), axis=0)
    (root / "models").mkdir(parents=True, exist_ok=True)
    n, r, rng = len(keys), len(names), np.random.default_rng(0)
    write_table("entities", pa.table({
        "id": np.arange(n), "key": keys, "name": keys, "aliases": [[]] * n,
        "description": [None] * n, "types": [[]] * n,
        "attributes": pa.array([[]] * n, pa.list_(pa.struct([("key", pa.string()),
                                                               ("value", pa.string())])))}),
        paths["entities"])
    write_table("relations", pa.table({"id": np.arange(r), "name": names}), paths["relations"])
    write_table("relation_map", pa.table({"id": np.arange(r), "name": names,
                                          "canonical_id": np.arange(r), "canonical_name": names}),
                paths["relation_map"])
    write_table("triples", pa.table({"s": tri[:, 0], "r": tri[:, 1], "o": tri[:, 2]}),
                paths["triples"])
    write_table("entity_ids", pa.table({"row": np.arange(n), "id": np.arange(n)}),
                paths["entity_ids"])
    vectors = np.lib.format.open_memmap(paths["entity_vectors"], "w+", np.float32, (n, vector_dim))
    for start in range(0, n, 100_000):
        block = rng.standard_normal((min(100_000, n - start), vector_dim), dtype=np.float32)
        vectors[start:start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    vectors.flush()
    np.save(paths["relation_embeddings"], rng.standard_normal((r, 64)).astype(np.float32))
    return {name: str(p) for name, p in paths.items()}


def made_apart(work: Path, n_triples: int, vector_dim: int) -> dict[str, str]:
    """``synthetic_inputs`` in a spawned process: a child forked from this one would start with
    this process's peak as its own ``ru_maxrss`` (Linux keeps it across fork and exec)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(synthetic_inputs, (work, n_triples, vector_dim))


def slopes(rows: list[dict]) -> list[dict]:
    """Per run label: peak RSS and wall seconds per added triple between the smallest and the
    largest synthetic size, and the 10⁷ / 10⁸ estimates on that line."""
    out = []
    for label in dict.fromkeys(r["label"].split("#")[0] for r in rows):
        mine = sorted((r for r in rows if r["label"].split("#")[0] == label),
                      key=lambda r: r["triples"])
        lo, hi = mine[0], mine[-1]
        if hi["triples"] == lo["triples"]:
            continue
        d = hi["triples"] - lo["triples"]
        per = {k: (hi[k] - lo[k]) / d for k in ("peak_rss_mib", "wall_s")}
        out.append({"label": label, "from": lo["triples"], "to": hi["triples"],
                    "bytes_per_triple": round(per["peak_rss_mib"] * 2**20, 1),
                    **{f"peak_gb_{n:.0e}": round((hi["peak_rss_mib"] + per["peak_rss_mib"] *
                                                  (n - hi["triples"])) * 2**20 / 1e9, 2)
                       for n in (1e7, 1e8)}})
    return out


def compared(rows: list[dict]) -> list[dict]:
    """Rows without the attention arrays, each with its difference to the first row's."""
    out = []
    for row in rows:
        reference = next(r["attention"] for r in rows if r.get("triples") == row.get("triples"))
        diff = np.abs(row["attention"] - reference)
        out.append({**{k: v for k, v in row.items() if k != "attention"},
                    "attention_max_abs_diff": float(diff.max()),
                    "attention_mean_abs_diff": float(diff.mean())})
    return out


def markdown(rows: list[dict]) -> str:
    lines = ["| run | triples | CPU s | wall s | train s | s / epoch | epochs | "
             "link loss first → last | eval link loss after | max abs Δα vs first | "
             "peak MiB (ru_maxrss) | load 1-min before → after |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        lines.append(
            f"| {r['label']} | {r.get('triples', '')} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | "
            f"{r['train_s']:.1f} | "
            f"{r['seconds_per_epoch']:.2f} | {r['epochs']} | {r['link_loss']['first']:.4f} → "
            f"{r['link_loss']['last']:.4f} | {r['eval_link_loss']['after']:.4f} | "
            f"{r['attention_max_abs_diff']:.2e} | {r['peak_rss_mib']:.0f} | "
            f"{r['load'][0]:.2f} → {r['load'][1]:.2f} |")
    if any("triples" in r for r in rows):
        lines += ["", "| run | triples | peak bytes per added triple | 10⁷ peak GB | 10⁸ peak GB |",
                  "|---|--:|--:|--:|--:|"]
        lines += [f"| {s['label']} | {s['from']:,} → {s['to']:,} | {s['bytes_per_triple']:.0f} | "
                  f"{s['peak_gb_1e+07']:.2f} | {s['peak_gb_1e+08']:.2f} |" for s in slopes(rows)]
    return "\n".join(lines) + "\n"


def build_inputs(build: Path) -> dict[str, str]:
    """A published build's gat inputs; refused when one is missing."""
    inputs = {name: str((build / rel).resolve()) for name, rel in INPUT_FILES.items()}
    missing = sorted(name for name, path in inputs.items() if not Path(path).exists())
    if missing:
        raise SystemExit(f"{build}: no {missing} (a published build's directory?)")
    return inputs


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--build", type=Path, help="a published build's directory")
    source.add_argument("--synthetic", type=int, action="append", metavar="N",
                        help="inputs made from a synthetic dump of N triples (repeatable)")
    ap.add_argument("--vector-dim", type=int, default=384)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--run", dest="runs", action="append", required=True, type=parse_run,
                    metavar="LABEL=CHECKOUT[:KEY=VALUE,...]")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="config override for every run")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    sizes = {None: build_inputs(args.build)} if args.build else {
        n: made_apart(args.work, n, args.vector_dim) for n in args.synthetic}
    print(f"load {os.getloadavg()}", flush=True)
    rows = []
    for n, inputs in sizes.items():
        for repeat in range(args.repeat):
            for run in args.runs:
                label = run["label"] + (f"#{repeat + 1}" if args.repeat > 1 else "")
                work = args.work / (f"n{n}" if n else ".")
                rows.append({"triples": n, **run_one({**run, "label": label}, inputs, work,
                                                     args.overrides)} if n else
                            run_one({**run, "label": label}, inputs, work, args.overrides))
                print(f"  {n or ''} {label}: {rows[-1]['cpu_s']:.1f} CPU s, "
                      f"{rows[-1]['wall_s']:.1f} s wall, peak {rows[-1]['peak_rss_mib']:.0f} MiB",
                      flush=True)
    rows = compared(rows)
    write_results(rows, markdown(rows), args.json, args.markdown)


if __name__ == "__main__":
    main()

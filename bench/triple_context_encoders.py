"""triple_context's batch on the two encoders of a store, in one run: sentence-transformers
(torch, float32) and the store's int8 ONNX export (``triple_context.encoder`` torch | onnx).

    python -m bench.triple_context_encoders --store /tmp/mqs [--rounds 2] [--limit 5000]

Reads a published build (one that restored context: from documents, or a KB dump with
``documents.corpus``), and per round runs, for each encoder in turn, the stage's two encoding
steps on the build's own tables — the restoration (templates and candidate sentences, argmax
cosine, the floor) and the chunk vectors — on the same threads the stage uses. Prints the
seconds per step and encoder, the torch/onnx ratio per round, and how far the outputs agree:
the share of triples restoring the same sentence (and the same 'restored or not'), and the
cosine between the two encoders' chunk vectors.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from lokg.pipeline.config import load_config
from lokg.runtime.contract import Store

TABLES = ("entities", "relations", "triples", "documents", "chunks", "sentences")


def stage_inputs(build) -> dict[str, str]:
    """The published tables as the stage reads its inputs, with the build's encoder files."""
    inputs = {name: str(build.table_path(name)) for name in TABLES}
    inputs["encoder"] = str(build.path / "models" / "encoder.json")
    exported = build.path / "models" / "query_encoder.onnx"
    if not exported.is_file():
        raise SystemExit(f"{build.path}: no models/query_encoder.onnx (entity_encode.query_onnx)")
    inputs["query_encoder"] = str(exported)
    return inputs


def run_encoder(name: str, inputs: dict, build, triples: np.ndarray, cfg: dict) -> dict:
    """Restoration and chunk vectors with one encoder: outputs and seconds per step."""
    from lokg.common.stage import torch_threads
    from lokg.text import triple_context as tc

    with torch_threads(cfg.get("threads")):
        started = time.perf_counter()
        encoder = tc.stage_encoder(inputs, {**cfg, "encoder": name})
        loaded = time.perf_counter()
        candidates = tc.Candidates(inputs, build.read("chunks"), build.read("triple_sources"),
                                   descriptions=cfg["enabled"] == "on")
        context, _ = tc.restore(triples, tc.templates(inputs, triples), candidates, encoder, cfg)
        restored = time.perf_counter()
        chunks = build.read("chunks", columns=["text"]).column("text").to_pylist()
        vectors = tc.encode_by_length(encoder, chunks, int(cfg["batch_size"]))
        done = time.perf_counter()
    return {"backend": encoder.backend, "load": loaded - started, "restore": restored - loaded,
            "chunk_vectors": done - restored, "context": context, "vectors": vectors}


def agreement(a: dict, b: dict, n_triples: int) -> dict:
    def chosen(run):
        t = run["context"]
        return dict(zip(zip(*(t[c].to_pylist() for c in "sro")), t["sentence_id"].to_pylist()))

    first, second = chosen(a), chosen(b)
    same = sum(first.get(k) == second.get(k) for k in set(first) | set(second))
    cos = (a["vectors"] * b["vectors"]).sum(axis=1) if len(a["vectors"]) else np.ones(1)
    return {"triples": n_triples, "restored": [len(first), len(second)],
            "same_sentence": same, "same_share": same / max(1, len(set(first) | set(second))),
            "chunk_cosine_min": float(cos.min()), "chunk_cosine_mean": float(cos.mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="first N triples only (0: all)")
    args = ap.parse_args()
    build = Store(args.store).build()
    cfg = load_config(None, [])["triple_context"]
    t = build.read("triples")
    triples = np.stack([t[c].to_numpy() for c in "sro"], axis=1).astype(np.int64)
    triples = triples[: args.limit] if args.limit else triples
    inputs = stage_inputs(build)
    rows = []
    for rnd in range(1, args.rounds + 1):
        runs = {name: run_encoder(name, inputs, build, triples, cfg) for name in ("torch", "onnx")}
        ratio = {step: runs["torch"][step] / max(runs["onnx"][step], 1e-9)
                 for step in ("restore", "chunk_vectors")}
        row = {"round": rnd, **{f"{n}_{s}_s": round(r[s], 2) for n, r in runs.items()
                                for s in ("load", "restore", "chunk_vectors")},
               "torch/onnx restore": round(ratio["restore"], 2),
               "torch/onnx chunk_vectors": round(ratio["chunk_vectors"], 2),
               **agreement(runs["torch"], runs["onnx"], len(triples))}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"store": args.store, "build": build.build_id, "chunks": build.rows("chunks"),
                      "rounds": rows}, indent=1))


if __name__ == "__main__":
    main()

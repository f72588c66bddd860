"""entity_encode's peak memory and seconds by entity count, one checkout against another, and
what its bounded-memory index and float16 vectors find.

    python -m bench.stage_memory run --code /work/wt/ref --code . --entities 1e5,1e6 \\
        --work W [--encoder stub|real] [--set build.memory_gb=2] [--json W/runs.jsonl]
    python -m bench.stage_memory index --vectors BUILD/entity_encode/entity_vectors.npy \\
        [--memory-gb 0.25] [--nprobe 16,64,128] [--queries 1000]

``run``: for each size a synthetic ``entities`` table (names from a small vocabulary, a type, a
one-sentence description; every text distinct) is written once under ``--work``, and each
``--code`` checkout runs the stage on it in a process of its own (that checkout's ``.venv``),
whose ``ru_maxrss`` (its own and its waited-for children's, which ``workers`` start) is the
stage's peak. ``--encoder stub`` replaces the stage's encoder by a table lookup (each text's
vector the normalised sum of two rows of a fixed random table picked by its hash), so that sizes
the int8 encoder would take an hour over measure what the stage holds around the encoder:
vectors, scratch, index, texts. ``real`` is the stage as configured. Per run it prints entities,
seconds, peak MiB, the index kind, and per checkout the slope between the two largest sizes
(bytes of peak per added entity).

``index``: on a real build's vectors (float32, unit norm), the stage's index built with
``--memory-gb`` (``training.entity_blocks.build_index``: a small budget gives the IVF kinds) at
each ``--nprobe`` (``--lists``: that many IVF lists, as a bigger build would have), and the
exact inner-product search: recall@10 and recall@1 (bench.entity_index's noisy queries at cosine ``--query-cosine`` to a random entity). Then the vectors stored as
float16: the cosine of each to its float32 row (min, mean) and the exact top-10's agreement
(recall@10 of the float16 search against the float32 one, and same first hit).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import noisy_queries, recall

WORDS = ("red river north lake stone bridge old new saint mount grand little upper east west "
         "green black white hill port fort glen bay cape royal golden silver iron oak pine").split()
TYPES = ("people.person", "location.city", "film.film", "music.album", "organization.company",
         "sports.team", "book.book", "location.river")

#: Run in the checkout's interpreter: the stage on the table, the peak and the report printed.
CHILD = r"""
import json, resource, sys, time, zlib
import numpy as np
from lokg.pipeline.config import load_config
from lokg.training import entity_encode as stage
entities, out, encoder, overrides = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])

class Stub:
    backend, dim = "stub", 384
    table = np.random.default_rng(0).normal(size=(4096, 384)).astype(np.float32)
    spec = {"model": "stub", "path": "stub", "dim": 384, "device": "cpu", "normalize": True}
    def passage_lengths(self, texts):
        return np.fromiter(map(len, texts), np.int64, len(texts))
    def encode_passages(self, texts, batch_size=32, progress=False):
        a = np.fromiter((zlib.crc32(t.encode()) for t in texts), np.int64, len(texts))
        v = self.table[a % 4096] + self.table[(a // 4096) % 4096]
        return v / np.linalg.norm(v, axis=1, keepdims=True)

if encoder == "stub":
    stage.stage_batch_encoder = lambda *a, **k: Stub()
config = load_config(None, overrides)
t = time.perf_counter()
result = stage.run(config, {"entities": entities}, out)
secs = time.perf_counter() - t
rss = sum(resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
print(json.dumps({"seconds": round(secs, 1), "peak_mb": round(rss / 1024, 1),
                  "index": result["report"]["index"], "entities": result["report"]["entities"],
                  "step_seconds": result["report"]["step_seconds"]}))
"""


def write_entities(path: Path, n: int) -> None:
    """``n`` synthetic entities, ids 0..n-1 shuffled, every text distinct."""
    import pyarrow as pa

    from lokg.runtime.contract import write_table

    rng = np.random.default_rng(n)
    w = np.array(WORDS)
    first, second = w[rng.integers(0, len(w), n)], w[rng.integers(0, len(w), n)]
    names = [f"{a.title()} {b.title()} {i}" for i, (a, b) in enumerate(zip(first, second))]
    types = [[TYPES[i % len(TYPES)]] for i in range(n)]
    descriptions = [f"A {TYPES[i % len(TYPES)].split('.')[1]} near the {b} {a}." for i, (a, b)
                    in enumerate(zip(first, second))]
    write_table("entities", pa.table({
        "id": rng.permutation(n).astype(np.int64), "key": [f"m.{i:x}" for i in range(n)],
        "name": names, "aliases": [[] for _ in range(n)], "description": descriptions,
        "types": types,
        "attributes": pa.array([[] for _ in range(n)],
                               pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))),
    }), path)


def run_stage(code: Path, entities: Path, out: Path, encoder: str, overrides: list[str]) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    sets = list(overrides) + (["entity_encode.query_onnx='off'"] if encoder == "stub" else [])
    done = subprocess.run([str(code / ".venv/bin/python"), "-c", CHILD, str(entities), str(out),
                           encoder, json.dumps(sets)], cwd=code, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(code)})
    if done.returncode:
        raise SystemExit(f"{code}: the stage failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cmd_run(args) -> None:
    rows = []
    sizes = [int(float(s)) for s in args.entities.split(",")]
    for n in sizes:
        table = args.work / f"entities-{n}.parquet"
        if not table.is_file():
            write_entities(table, n)
        for code in args.code:
            result = run_stage(code.resolve(), table, args.work / f"out-{code.resolve().name}-{n}",
                               args.encoder, args.set)
            row = {"code": str(code), "n": n, "encoder": args.encoder, "sets": args.set, **result}
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.json:
                with open(args.json, "a") as sink:
                    sink.write(json.dumps(row) + "\n")
    for code in args.code:
        mine = sorted((r["n"], r["peak_mb"]) for r in rows if r["code"] == str(code))
        if len(mine) >= 2:
            (n0, p0), (n1, p1) = mine[-2], mine[-1]
            print(json.dumps({"code": str(code), "slope_bytes_per_entity":
                              round((p1 - p0) * (1 << 20) / (n1 - n0), 1)}))


def cmd_index(args) -> None:
    import faiss

    from lokg.pipeline.config import DEFAULTS
    from lokg.training import entity_blocks
    from lokg.training.entity_blocks import build_index

    if args.lists:  # as many lists as a bigger build would have: what its nprobe finds
        entity_blocks.IVF_LISTS = (args.lists, args.lists)
    vectors = np.ascontiguousarray(np.load(args.vectors, mmap_mode="r"), np.float32)
    queries = noisy_queries(vectors, args.queries, args.query_cosine, args.seed)
    exact = faiss.IndexFlatIP(vectors.shape[1])
    exact.add(vectors)
    _, truth = exact.search(queries, 10)
    cfg = {**DEFAULTS["entity_encode"], "ivf_nprobe": 1}
    started = time.perf_counter()
    index, kind = build_index(args.vectors, cfg, args.memory_gb, rows=args.block_rows)
    built = time.perf_counter() - started
    for nprobe in (int(p) for p in args.nprobe.split(",")):
        if hasattr(index, "nprobe"):
            index.nprobe = nprobe  # as entity_encode.ivf_nprobe would store it
        _, found = index.search(queries, 10)
        print(json.dumps({"rows": len(vectors), "kind": kind, "memory_gb": args.memory_gb,
                          "lists": int(getattr(index, "nlist", 0)), "nprobe": nprobe,
                          "build_s": round(built, 1), **recall(found, truth)}), flush=True)
    half = vectors.astype(np.float16)
    back = half.astype(np.float32)
    cosine = (back * vectors).sum(axis=1) / np.linalg.norm(back, axis=1)
    _, found = (lambda i: (i.add(back), i.search(queries, 10))[1])(faiss.IndexFlatIP(back.shape[1]))
    print(json.dumps({"float16": True, "cosine_min": round(float(cosine.min()), 6),
                      "cosine_mean": round(float(cosine.mean()), 6), **recall(found, truth)}))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--code", type=Path, action="append", required=True)
    run.add_argument("--entities", default="1e5,1e6")
    run.add_argument("--work", type=Path, required=True)
    run.add_argument("--encoder", choices=("stub", "real"), default="stub")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    run.add_argument("--json", type=Path)
    index = sub.add_parser("index")
    index.add_argument("--vectors", type=Path, required=True)
    index.add_argument("--memory-gb", type=float, default=0.25)
    index.add_argument("--block-rows", type=int, default=65536)
    index.add_argument("--nprobe", default="16,64,128")
    index.add_argument("--lists", type=int, help="IVF lists (default: the stage's, ~sqrt(rows))")
    index.add_argument("--queries", type=int, default=1000)
    index.add_argument("--query-cosine", type=float, default=0.8)
    index.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True) if args.command == "run" else None
    (cmd_run if args.command == "run" else cmd_index)(args)


if __name__ == "__main__":
    sys.exit(main())

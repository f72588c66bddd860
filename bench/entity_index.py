"""The entity index at scale: what an HNSW build costs and finds.

    python -m bench.entity_index --vectors BUILD/entity_encode/entity_vectors.npy \
        --rows 250000 --config 1:200 --config 2:200 --config 2:80 --queries 1000

Above ``entity_encode.flat_max`` entities the stage builds an ``IndexHNSWFlat`` (inner product,
M = ``hnsw_m``) with ``training.entity_encode.build_index``; at 10⁷ triples (1.7 M entities) that
build took 46 min on one thread. Each ``--config THREADS:EF_CONSTRUCTION`` builds the stage's index
on the first ``--rows`` vectors of a real build's ``entity_vectors.npy`` with that many FAISS
threads and that build beam, and reports its wall and CPU seconds (the process's, every thread)
and its recall against the exact ``IndexFlatIP``: for each of ``--queries`` query vectors, the
share of the exact top ``--k`` the HNSW top ``--k`` holds (recall@k), and whether its first hit is
the exact first (recall@1). A query is an entity's vector with Gaussian noise, renormalised to
cosine ``--query-cosine`` with it (a mention encoded as a question is near, not at, the
entity's text); the entity's own row is then the usual exact first hit. ``efSearch`` is the
stage's ``hnsw_ef_search`` (or ``--ef-search``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bench.common import noisy_queries, recall


def timed_build(vectors: np.ndarray, cfg: dict, threads: int):
    """The stage's HNSW build on ``threads`` FAISS threads: (index, wall s, CPU s)."""
    import faiss

    from lokg.training.entity_encode import build_index

    faiss.omp_set_num_threads(threads)
    wall, cpu = time.perf_counter(), time.process_time()
    index, kind = build_index(vectors, cfg)
    assert kind == "hnsw_ip", kind
    return index, time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> None:
    import faiss

    from lokg.pipeline.config import DEFAULTS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vectors", type=Path, required=True, help="a build's entity_vectors.npy")
    ap.add_argument("--rows", type=int, help="the first ROWS vectors (default: all)")
    ap.add_argument("--config", action="append", required=True, metavar="THREADS:EF_CONSTRUCTION")
    ap.add_argument("--ef-search", type=int, default=DEFAULTS["entity_encode"]["hnsw_ef_search"])
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--query-cosine", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    vectors = np.ascontiguousarray(np.load(args.vectors, mmap_mode="r")[:args.rows], np.float32)
    queries = noisy_queries(vectors, args.queries, args.query_cosine, args.seed)
    exact = faiss.IndexFlatIP(vectors.shape[1])
    exact.add(vectors)
    _, truth = exact.search(queries, args.k)
    for spec in args.config:
        threads, ef_construction = (int(x) for x in spec.split(":"))
        cfg = {**DEFAULTS["entity_encode"], "flat_max": 0, "hnsw_ef_construction": ef_construction,
               "hnsw_ef_search": args.ef_search}
        index, wall, cpu = timed_build(vectors, cfg, threads)
        _, found = index.search(queries, args.k)
        print(json.dumps({"rows": len(vectors), "threads": threads, "hnsw_m": cfg["hnsw_m"],
                          "ef_construction": ef_construction, "ef_search": args.ef_search,
                          "build_wall_s": round(wall, 1), "build_cpu_s": round(cpu, 1),
                          **recall(found, truth)}), flush=True)


if __name__ == "__main__":
    main()

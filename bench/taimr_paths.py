"""Per-head cost of the TAIMR beam search (runtime/taimr.py top_paths).

    python -m bench.taimr_paths                                    # synthetic, 10^5 triples
    python -m bench.taimr_paths --triples 1000000 --heads 2000
    python -m bench.taimr_paths --fb15k237 ../shared/data/fb15k237 --stage

The graph is built the way a build builds it, minus SCOS and GAT: ``ingest`` (Spark) of the
dump, the ``node_gain`` stage on its tables, and uniform attention (``uniform_edges``, what GAT's
``uniform`` ablation exports). Then ``top_paths`` runs for a random sample of heads with
out-edges (``--heads 0``: all of them) and the per-head wall times are summarised (p50, p90,
p99, max, mean; on a shared machine the thread CPU times cpu_p50/cpu_p99 are the steadier
figures) together with the paths per head. The search is what the runtime runs for a cold
head and what each path_cache worker runs per head; one CPU thread. ``--stage`` also runs the
``path_cache`` stage over every head and reports its seconds. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from bench.common import build_graph  # noqa: E402  (after the thread setting: it imports numpy)


def measure(inputs: dict, n_heads: int, seed: int, search: dict) -> dict:
    import numpy as np

    from lokg.runtime.taimr import EdgeGraph, top_paths

    started = time.perf_counter()
    graph = EdgeGraph.from_paths(inputs["edges"], inputs["node_gain"])
    graph.view(search["lambda_topo"])
    load_s = time.perf_counter() - started
    degree = graph.out_degree()
    heads = np.flatnonzero(degree > 0)
    if n_heads and n_heads < len(heads):
        heads = np.random.default_rng(seed).choice(heads, n_heads, replace=False)
    times, cpu = np.empty(len(heads)), np.empty(len(heads))
    paths = np.empty(len(heads), dtype=np.int64)
    for i, head in enumerate(heads.tolist()):
        started, started_cpu = time.perf_counter(), time.thread_time()
        paths[i] = len(top_paths(graph, head, **search))
        times[i] = time.perf_counter() - started
        cpu[i] = time.thread_time() - started_cpu
    ms, cpu_ms = times * 1000, cpu * 1000
    return {
        "entities": graph.n_nodes, "edges": graph.n_edges,
        "mean_out_degree": round(float(degree[degree > 0].mean()), 1),
        "max_out_degree": int(degree.max()), "graph_load_s": round(load_s, 2),
        "heads_timed": len(heads),
        **{f"p{q}_ms": round(float(np.percentile(ms, q)), 2) for q in (50, 90, 99)},
        "max_ms": round(float(ms.max()), 2), "mean_ms": round(float(ms.mean()), 2),
        **{f"cpu_p{q}_ms": round(float(np.percentile(cpu_ms, q)), 2) for q in (50, 99)},
        "paths_per_head": round(float(paths.mean()), 1),
        "all_heads_estimate_s": round(float(times.mean()) * int((degree > 0).sum()), 1),
    }


def run_stage(inputs: dict, workdir: Path, search: dict) -> dict:
    from lokg.spark_jobs import path_cache
    from lokg.spark_jobs.engine import with_engine

    config = with_engine({"path_cache": search}, None)  # auto, no dump: DuckDB
    result = path_cache.run(config, inputs, str(workdir / "path_cache"))
    report = result["report"]
    return {"stage_s": report["seconds"], "stage_step_seconds": report["step_seconds"],
            "stage_paths": report["paths"], "stage_heads": report["heads"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triples", type=int, default=100_000, help="synthetic graph size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fb15k237", type=Path, help="FB15k-237 directory instead of synthetic")
    parser.add_argument("--heads", type=int, default=1000, help="heads to time (0 = all)")
    parser.add_argument("--max-hops", type=int, default=3)
    parser.add_argument("--k-top", type=int, default=20)
    parser.add_argument("--beam-width", type=int, default=64)
    parser.add_argument("--lambda-topo", type=float, default=1.0)
    parser.add_argument("--stage", action="store_true", help="also run the path_cache stage")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    search = {"max_hops": args.max_hops, "k_top": args.k_top, "beam_width": args.beam_width,
              "lambda_topo": args.lambda_topo}

    with tempfile.TemporaryDirectory(prefix="taimr-bench-") as tmp:
        workdir = Path(tmp)
        if args.fb15k237:
            dump, fmt, label = args.fb15k237, "fb15k237", "FB15k-237"
        else:
            from lokg.pipeline.synth import generate

            dump, fmt, label = workdir / "dump", "synth", f"synthetic {args.triples:,}"
            generate(dump, n_triples=args.triples, seed=args.seed, n_questions=0)
        inputs, facts = build_graph(dump, fmt, workdir)
        result = {"graph": label, **search, **facts, **measure(inputs, args.heads, args.seed, search)}
        if args.stage:
            result.update(run_stage(inputs, workdir, search))

    print("| " + " | ".join(result) + " |")
    print("|" + "---|" * len(result))
    print("| " + " | ".join(str(v) for v in result.values()) + " |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

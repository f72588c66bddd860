"""Path cache for a hot set: build time and size against the hot set's size,
and the share of query-time lookups the cache serves.

    python -m bench.path_cache_hot                                  # synthetic, 10^5 triples
    python -m bench.path_cache_hot --triples 100000 --shares 0.05,0.1,0.2,0.4,1 --repeats 2

The graph is built as bench/taimr_paths.py builds it (``ingest`` of a ``pipeline.synth`` dump,
the ``node_gain`` stage, uniform attention), then:

1. Spark's session is started and timed on its own; a warm-up run of the stage (one head)
   loads the graph into the Python workers, so that no hot-set size pays for it.
2. The ``path_cache`` stage runs for hot sets of each share of all heads chosen by degree
   (``path_cache.heads=degree``, ``hot_share``; share 1 is every head, as ``heads: all``),
   default settings otherwise (256 buckets); ``--repeats`` passes over all sizes, the fastest
   run of each size counts (wall and CPU apart).
   Build seconds are the stage's own (its report, Spark's session start excluded), wall and
   CPU (this process, the JVM and Spark's Python workers: steadier on a shared machine); bytes
   are the bucket files'. Least-squares lines through (heads, ·) and (paths, ·) give the cost
   per head and per path, the fixed part (intercept) and R².
3. Lookups as the runtime makes them (runtime/query.py ``Runtime.paths``: the cache's bucket,
   else ``taimr.top_paths`` now): for the generated questions' topic entities (the heads a
   question links when linking is right) and for heads drawn uniformly, the share served from
   the cache and the mean milliseconds per lookup, cache and cold together.
4. Selectors compared at each share on the questions: degree, μ, and a query log made of the
   train split's answers (``details.linked[].key`` records, as ``lokg eval`` writes them)
   looked up by the dev and test questions.

Prints Markdown tables; ``--json`` writes every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from bench.common import build_graph  # noqa: E402

SPARK = {"master": "local[2]", "shuffle_partitions": 8}


def fit(x: list[float], y: list[float]) -> dict:
    """Least-squares line y = slope·x + intercept and its R²."""
    import numpy as np

    xs, ys = np.asarray(x, float), np.asarray(y, float)
    slope, intercept = np.polyfit(xs, ys, 1)
    residual = ys - (slope * xs + intercept)
    total = ((ys - ys.mean()) ** 2).sum()
    return {"slope": float(slope), "intercept": float(intercept),
            "r2": float(1 - (residual ** 2).sum() / total) if total else 1.0}


def tree_cpu_s() -> float:
    """CPU seconds of this process and everything below it (the JVM, Spark's Python workers),
    including exited children their parents reaped: a build's cost that other jobs on a
    shared machine do not inflate the way they inflate wall time."""
    import psutil

    total = 0.0
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:  # exited meanwhile
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def run_stage(inputs: dict, out: Path, **path_cache) -> dict:
    from lokg.spark_jobs import path_cache as stage

    cpu = tree_cpu_s()
    report = stage.run({"spark": SPARK, "path_cache": path_cache}, inputs, str(out))["report"]
    report["cpu_s"] = round(tree_cpu_s() - cpu, 2)
    report["build_s"] = round(report["seconds"] - report["step_seconds"]["session"], 3)
    return report


def questions(dump: Path, splits: tuple[str, ...]) -> list[str]:
    """The topic entity keys of the generated questions of ``splits``, in file order."""
    keys = []
    for split in splits:
        for line in (dump / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
            keys.extend(json.loads(line)["topic_entities"])
    return keys


def lookups(cache_dir: Path, buckets: int, graph, heads: list[int]) -> dict:
    """What Runtime.paths does for each head: served by the cache, else computed cold. Every
    bucket is read first (a long-running service holds them: ``query.cached_buckets`` = 256),
    then hits and cold searches are timed apart."""
    from lokg.runtime.path_cache import PathCache
    from lokg.runtime.taimr import top_paths

    cache = PathCache(cache_dir, buckets)
    hit = [cache.get(h) is not None for h in heads]  # also loads the buckets
    hit_s = cold_s = 0.0
    for head, cached in zip(heads, hit):
        started = time.perf_counter()
        if cached:
            cache.get(head)
            hit_s += time.perf_counter() - started
        else:
            top_paths(graph, head)
            cold_s += time.perf_counter() - started
    served, n = sum(hit), max(len(heads), 1)
    return {"lookups": len(heads), "served": served, "served_share": round(served / n, 4),
            "hit_ms": round(hit_s * 1000 / max(served, 1), 3),
            "cold_ms": round(cold_s * 1000 / max(len(heads) - served, 1), 3),
            "mean_ms": round((hit_s + cold_s) * 1000 / n, 3)}


def selector_shares(inputs: dict, shares: list[float], log: Path, asked: list[int]) -> list[dict]:
    """Share of ``asked`` lookups each selector's hot set serves, at each share."""
    from lokg.spark_jobs import path_cache as stage
    from lokg.spark_jobs.session import get_spark

    spark = get_spark({"spark": SPARK}, "bench-path_cache_hot")
    rows = []
    for share in shares:
        row = {"share": share}
        for by in ("degree", "mu", "query_log"):
            cfg = stage.settings({"path_cache": {"heads": by, "hot_share": share,
                                                 "query_log": str(log) if by == "query_log"
                                                 else None}})
            heads, info, _ = stage.select_heads(spark, cfg, Path(inputs["edges"]),
                                                Path(inputs["node_gain"]), Path(inputs["entities"]))
            hot = {r["head"] for r in heads.collect()}
            row[by] = round(sum(h in hot for h in asked) / max(len(asked), 1), 4)
            row[f"{by}_heads"] = len(hot)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triples", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--questions", type=int, default=1000, help="generated questions")
    parser.add_argument("--shares", default="0.05,0.1,0.2,0.4,1")
    parser.add_argument("--repeats", type=int, default=1, help="stage runs per size (fastest)")
    parser.add_argument("--lookups", type=int, default=500, help="random heads looked up")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    shares = [float(s) for s in args.shares.split(",")]

    import numpy as np

    from lokg.pipeline.synth import generate
    from lokg.runtime.contract import read_table
    from lokg.runtime.taimr import EdgeGraph
    from lokg.spark_jobs.session import get_spark

    result: dict = {"triples": args.triples, "seed": args.seed, "shares": shares}
    with tempfile.TemporaryDirectory(prefix="path-cache-hot-") as tmp:
        work = Path(tmp)
        dump = work / "dump"
        generate(dump, n_triples=args.triples, seed=args.seed, n_questions=args.questions)
        started = time.perf_counter()
        get_spark({"spark": SPARK}, "bench-path_cache_hot")
        result["spark_session_s"] = round(time.perf_counter() - started, 2)
        inputs, facts = build_graph(dump, "synth", work)
        result.update(facts)
        warm = run_stage(inputs, work / "warm", heads="degree", hot_count=1)
        result["warmup_build_s"] = warm["build_s"]

        graph = EdgeGraph.from_paths(inputs["edges"], inputs["node_gain"])
        ents = read_table(Path(inputs["entities"]), "entities")
        key_id = dict(zip(ents.column("key").to_pylist(), ents.column("id").to_pylist()))
        asked_keys = questions(dump, ("train", "dev", "test"))
        asked = [key_id[k] for k in asked_keys if k in key_id]
        heads_all = np.flatnonzero(graph.out_degree() > 0)
        drawn = [int(h) for h in random.Random(args.seed).sample(list(heads_all), args.lookups)]
        result.update(entities=graph.n_nodes, edges=graph.n_edges, heads_all=len(heads_all),
                      question_heads=len(asked),
                      question_keys_unmatched=len(asked_keys) - len(asked))

        runs_of: dict[float, list[dict]] = {share: [] for share in shares}
        for i in range(args.repeats):  # passes over every size: JIT warm-up spreads over all
            for share in shares:
                runs_of[share].append(run_stage(inputs, work / f"hot-{share}-{i}",
                                                heads="degree", hot_share=share))
        rows = []
        for share, runs in runs_of.items():
            best = min(runs, key=lambda r: r["build_s"])
            cache_dir = work / f"hot-{share}-{runs.index(best)}" / "path_cache"
            rows.append({
                "share": share, "heads": best["heads"], "heads_share": best["heads_share"],
                "paths": best["paths"], "build_s": best["build_s"],
                "build_s_runs": [r["build_s"] for r in runs], "steps": best["step_seconds"],
                "cpu_s": min(r["cpu_s"] for r in runs), "cpu_s_runs": [r["cpu_s"] for r in runs],
                "bytes": best["bytes"],
                "questions": lookups(cache_dir, best["buckets"], graph, asked),
                "random": lookups(cache_dir, best["buckets"], graph, drawn)})
        result["rows"] = rows
        heads = [r["heads"] for r in rows]
        paths = [r["paths"] for r in rows]
        for name in ("build_s", "cpu_s", "bytes"):
            result[f"fit_{name}"] = fit(heads, [r[name] for r in rows])
            result[f"fit_{name}_paths"] = fit(paths, [r[name] for r in rows])

        log = work / "query_log.jsonl"  # the train split's answers, as lokg eval records them
        log.write_text("".join(json.dumps({"details": {"linked": [{"key": k}]}}) + "\n"
                               for k in questions(dump, ("train",))))
        held_out = [key_id[k] for k in questions(dump, ("dev", "test")) if k in key_id]
        result["selectors"] = selector_shares(inputs, shares, log, held_out)
        result["selector_lookups"] = len(held_out)

    print(f"synthetic {args.triples:,} triples: {result['entities']:,} entities, "
          f"{result['heads_all']:,} heads, {result['edges']:,} edges; Spark session "
          f"{result['spark_session_s']} s (apart), warm-up run {result['warmup_build_s']} s\n")
    print("| hot set (degree) | heads | paths | build s (wall) | CPU s | cache MB "
          "| questions served | random heads served | ms per hit / cold lookup |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        q, d = r["questions"], r["random"]
        print(f"| {r['share']:.0%} | {r['heads']:,} | {r['paths']:,} | {r['build_s']:.1f} "
              f"| {r['cpu_s']:.1f} | {r['bytes'] / 1e6:.2f} | {q['served_share']:.1%} "
              f"| {d['served_share']:.1%} | {d['hit_ms']:.3f} / {d['cold_ms']:.2f} |")
    print()
    for name, unit, scale in (("build_s", "ms", 1000), ("cpu_s", "ms", 1000), ("bytes", "B", 1)):
        for per in ("", "_paths"):
            f = result[f"fit_{name}{per}"]
            print(f"{name} = {f['slope'] * scale:.4g} {unit} per {'path' if per else 'head'} "
                  f"+ {f['intercept']:.4g} (R² {f['r2']:.4f})")
    print()
    print(f"| hot set | served by degree | by μ | by query log (train) |  "
          f"({result['selector_lookups']} dev+test question lookups)")
    print("|---|---|---|---|")
    for r in result["selectors"]:
        print(f"| {r['share']:.0%} | {r['degree']:.1%} | {r['mu']:.1%} | {r['query_log']:.1%} "
              f"({r['query_log_heads']:,} heads) |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

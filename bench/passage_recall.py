"""Passage recall@2 / @5 of the graph-guided passage ranking (runtime/passage_rank.py) beside
dense chunk retrieval with the same encoder, on a multi-hop reading set of ../shared/data.

    python -m bench.eval_documents --dataset musique-200 --work W     # writes the corpus
    lokg build --dump W/musique-200/corpus.jsonl --format docs --store W/musique-200/store
    python -m bench.passage_recall --dataset musique-200 --work W [--tile 4] [--json]

Gold: the question's supporting passages (MuSiQue ``is_supporting``; HotpotQA the titles of
its ``supporting_facts``), as the corpus's document ids (evaluation/text_datasets.py gives a
document the id a build gives it). Both rankings run over every chunk of the store (the union of
all questions' paragraphs, as HippoRAG 2 measures); a document ranks where its best chunk does,
and recall@k is the share of a question's gold documents among the first k, averaged over
questions. The question is embedded once by the store's encoder (not timed); ``dense`` is the
chunk vectors' dot products with it, ``ppr`` the personalized PageRank seeded by the entities
the runtime links in the question and those dense scores. The times are the ranking's own (dense
scores included, the embedding not); the graph is built once, before the first question, and its
build time is reported apart. ``--tile N`` times the ranking again on N disjoint copies of the
graph (a store N times larger: 4 copies of MuSiQue dev-200's 3,144 passages are 12,576).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from lokg.evaluation.text_datasets import READING_SETS
from lokg.testing import SHARED_DATA

KS = (2, 5)
#: Chunks ranked per question: enough for the top 5 documents when a document has several.
DEPTH = 50


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, choices=list(READING_SETS))
    parser.add_argument("--data", type=Path, default=SHARED_DATA)
    parser.add_argument("--work", type=Path, default=Path("/tmp/lokg-docs"))
    parser.add_argument("--store", type=Path, help="default WORK/<dataset>/store")
    parser.add_argument("--limit", type=int, help="only the first N questions")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tile", type=int, default=1,
                        help="also time the ranking on the graph tiled this many times")
    return parser.parse_args(argv)


def gold_documents(dataset: str, data: Path) -> dict[str, set[str]]:
    """question id → the document ids of its supporting passages."""
    from lokg.text.chunking import content_id

    shape, relative = READING_SETS[dataset]
    path = data / relative
    text = path.read_text(encoding="utf-8")
    records = [json.loads(line) for line in text.splitlines() if line.strip()] \
        if path.suffix == ".jsonl" else json.loads(text)
    gold = {}
    for r in records:
        if shape == "musique":
            gold[str(r["id"])] = {content_id(p["title"].strip(), p["paragraph_text"].strip())
                                  for p in r["paragraphs"] if p.get("is_supporting")}
        else:
            titles = {t for t, _ in r["supporting_facts"]}
            gold[str(r["_id"])] = {content_id(t.strip(), "".join(s).strip())
                                   for t, s in r["context"] if t in titles}
    return gold


def documents_ranked(rows: list[int], chunk_docs: list[str]) -> list[str]:
    """The documents of ranked chunk rows, each once, where its best chunk ranks."""
    return list(dict.fromkeys(chunk_docs[i] for i in rows))


def recall(ranked: list[str], gold: set[str], k: int) -> float:
    return len(gold.intersection(ranked[:k])) / len(gold)


def measure(rt, questions, gold: dict[str, set[str]]) -> dict:
    """method → R@k and ranking times over the questions that have gold passages."""
    prov = rt.provenance
    chunks = rt.build.read("chunks", columns=["doc_id"]).column("doc_id").to_pylist()
    start = time.perf_counter()
    graph = prov.passage_graph()
    build_ms = (time.perf_counter() - start) * 1e3
    hits = {m: {k: [] for k in KS} for m in ("dense", "ppr")}
    times = {m: [] for m in hits}
    for q in questions:
        if not gold.get(q.id):
            continue
        vec = rt.embed(None, q.question)[1]
        entities = [link.id for link in rt.link(q.question)]
        t0 = time.perf_counter()
        dense = prov.dense_scores(vec)
        dense_rows = np.argsort(-dense, kind="stable")[:DEPTH].tolist()
        t1 = time.perf_counter()
        ppr_rows = prov.ranked_rows(vec, entities, DEPTH)
        t2 = time.perf_counter()
        times["dense"].append((t1 - t0) * 1e3)
        times["ppr"].append((t2 - t1 + t1 - t0) * 1e3)
        for method, rows in (("dense", dense_rows), ("ppr", ppr_rows)):
            ranked = documents_ranked(rows, chunks)
            for k in KS:
                hits[method][k].append(recall(ranked, gold[q.id], k))
    return {"graph": {"nodes": graph.n_entities + graph.n_passages,
                      "passages": graph.n_passages, "edges": int(graph.transition.nnz),
                      "build_ms": round(build_ms, 1)},
            "methods": {m: {**{f"R@{k}": float(np.mean(hits[m][k])) for k in KS},
                            "p50_ms": float(np.percentile(times[m], 50)),
                            "p99_ms": float(np.percentile(times[m], 99)),
                            "n": len(times[m])} for m in hits}}


def tiled_times(rt, questions, copies: int) -> dict:
    """The ranking's times on the store's graph tiled ``copies`` times (disjoint copies, entity
    ids shifted): a store ``copies`` times larger with the same structure, for the latency
    target on 10k passages. Seeds: each question's links and dense scores in the first copy,
    the dense scores repeated in the others."""
    from lokg.runtime.passage_rank import PassageGraph

    prov = rt.provenance
    base = prov.passage_graph()
    shift = base.n_entities
    passages = [[(s + c * shift, r, o + c * shift) for s, r, o in triples]
                for c in range(copies) for triples in prov.chunk_triples]
    start = time.perf_counter()
    graph = PassageGraph(passages, shift * copies)
    build_ms = (time.perf_counter() - start) * 1e3
    times = []
    for q in questions:
        vec = rt.embed(None, q.question)[1]
        entities = [link.id for link in rt.link(q.question)]
        t0 = time.perf_counter()
        dense = np.tile(prov.dense_scores(vec), copies)
        graph.top(entities, dense, DEPTH)
        times.append((time.perf_counter() - t0) * 1e3)
    return {"passages": graph.n_passages, "edges": int(graph.transition.nnz),
            "build_ms": round(build_ms, 1), "p50_ms": float(np.percentile(times, 50)),
            "p99_ms": float(np.percentile(times, 99)), "n": len(times)}


def table(result: dict) -> str:
    rows = ["| ranking | R@2 | R@5 | p50 ms | p99 ms | n |", "|---|--:|--:|--:|--:|--:|"]
    for method, v in result["methods"].items():
        rows.append(f"| {method} | {v['R@2']:.3f} | {v['R@5']:.3f} | {v['p50_ms']:.2f} | "
                    f"{v['p99_ms']:.2f} | {v['n']} |")
    g = result["graph"]
    rows.append(f"\ngraph: {g['passages']} passages, {g['nodes']} nodes, {g['edges']} "
                f"transition entries, built in {g['build_ms']} ms")
    if "tiled" in result:
        t = result["tiled"]
        rows.append(f"tiled: {t['passages']} passages, {t['edges']} transition entries, built "
                    f"in {t['build_ms']} ms; ppr p50 {t['p50_ms']:.2f} ms, p99 "
                    f"{t['p99_ms']:.2f} ms ({t['n']} questions)")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    from lokg.evaluation.text_datasets import load_reading_set
    from lokg.runtime.query import Runtime

    args = parse_args(argv)
    reading = load_reading_set(args.dataset, args.data)
    questions = reading.dataset.questions[:args.limit] if args.limit else \
        reading.dataset.questions
    gold = gold_documents(args.dataset, args.data)
    with Runtime.open(args.store or args.work / args.dataset / "store") as rt:
        if rt.provenance.chunk_vectors is None or rt.encoder() is None:
            print("the store has no chunk vectors or no encoder", file=sys.stderr)
            return 1
        result = {"dataset": args.dataset, "build_id": rt.build_id,
                  **measure(rt, questions, gold)}
        if args.tile > 1:
            result["tiled"] = tiled_times(rt, questions, args.tile)
    print(json.dumps(result, indent=2) if args.json else table(result), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Why a question of a feedback-rounds run has no gold in its context: for every
such question of one round, where its gold entity is from what the question linked.

    python -m bench.recall_misses --work /tmp/recall2-after --arm feedback-precomputed --round 0

Per miss: *no gold entity* (no entity of the build has a gold answer's folded name), else the
hops from the linked entities to the nearest gold entity in the build's undirected graph
(*beyond 4*: farther or not connected), and the gold's rank among **all** the candidates the
linked entities' paths reach (``Retriever.rank`` with no ``max_candidates`` cut; *not reached*:
no path of ``path_cache.max_hops`` ends there) — a gold that paths reach but the budget drops
is a ranking miss, one they never reach is a linking or graph miss. Then the counts.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, deque
from pathlib import Path

from lokg.runtime.planning import RelationPlan
from lokg.runtime.retrieval import Retriever


MAX_HOPS = 4


def hops(adjacent: dict[int, set[int]], sources: list[int], targets: set[int]) -> int | None:
    """Fewest undirected hops from any source to any target, None past MAX_HOPS."""
    seen = dict.fromkeys(sources, 0)
    queue = deque(sources)
    while queue:
        node = queue.popleft()
        if node in targets:
            return seen[node]
        if seen[node] < MAX_HOPS:
            for nxt in adjacent.get(node, ()):
                if nxt not in seen:
                    seen[nxt] = seen[node] + 1
                    queue.append(nxt)
    return None


def misses(work: Path, arm: str, number: int) -> list[dict]:
    """One row per question of the round without the gold in its context."""
    from lokg.runtime.query import Runtime
    from lokg.text.triple_extract import entity_key

    build_id = json.loads((work / arm / f"round-{number}" / "build.json").read_text())["build_id"]
    rt = Runtime.open(work / arm / "store", build_id=build_id, feedback=False,
                      max_candidates=10 ** 9)
    by_key: dict[str, list[int]] = {}
    for i, name in enumerate(rt.names):
        by_key.setdefault(entity_key(name), []).append(i)
    triples = rt.build.read("triples", columns=["s", "o"])
    adjacent: dict[int, set[int]] = {}
    for s, o in zip(triples["s"].to_pylist(), triples["o"].to_pylist()):
        adjacent.setdefault(s, set()).add(o)
        adjacent.setdefault(o, set()).add(s)
    rows = []
    predictions = work / arm / f"round-{number}" / "run" / "lokg" / "predictions.jsonl"
    for line in predictions.open(encoding="utf-8"):
        p = json.loads(line)
        if p["reading"]["context_recall"]:
            continue
        gold = {i for g in p["gold"] for i in by_key.get(entity_key(g), ())}
        heads = list(dict.fromkeys(link["id"] for link in p["details"]["linked"]))
        row = {"question": p["question"], "linked": [link["name"] for link in p["details"]["linked"]],
               "hops": None, "rank": None, "gold_entity": bool(gold)}
        if gold:
            row["hops"] = hops(adjacent, heads, gold)
            q_vec = rt.embed(None, p["question"])[1]
            # a plan without the query-relation term: the gold's rank by paths and cosine
            ranked, _ = Retriever(rt).rank(heads, q_vec, "taimr", RelationPlan())
            row["rank"] = next((k for k, c in enumerate(ranked) if c.id in gold), None)
        rows.append(row)
    rt.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--arm", default="feedback-precomputed")
    parser.add_argument("--round", type=int, default=0)
    args = parser.parse_args(argv)
    rows = misses(args.work, args.arm, args.round)
    where = Counter()
    for r in rows:
        hop = "no gold entity" if not r["gold_entity"] else \
            f"{r['hops']} hops" if r["hops"] is not None else f"beyond {MAX_HOPS} hops"
        rank = "—" if not r["gold_entity"] else \
            "not reached" if r["rank"] is None else f"rank {r['rank']}"
        where[hop] += 1
        print(f"{hop:15} | {rank:11} | {r['question'][:80]} | linked {r['linked']}")
    reached = sum(r["rank"] is not None for r in rows)
    print(f"{len(rows)} misses: {dict(where)}; gold among the ranked candidates: {reached}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

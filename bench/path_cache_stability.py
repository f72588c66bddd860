"""Could a refresh keep path_cache entries whose paths barely moved? Measured on two
published builds of consecutive dumps: the before build and a refresh whose path_cache ran in
full (so its cache is the full search on the refresh's α and μ).

    python -m bench.path_cache_stability --store STORE --before B1 --after B2

Ids moved by key (entities) and by name (relations), as ``common.stage.id_translation`` does.
Reported, over the after build's heads:

* ``same_paths`` — heads whose full-search path set (relations, directions, nodes) equals the
  before build's: what any rule that copies a head's previous entry can copy without error;
* per ``--tolerances`` value, the rule "search a head anew when its own out-edges were added or
  removed, or one of its cached paths is gone or moved its score (Σ log α + λ·log μ(target))
  by more than the tolerance; else copy its previous paths": ``kept`` heads, and ``kept_differ``
  — kept heads whose previous path set is not the full search's on the same α (the error the
  copy makes). ``inf`` keeps every head whose paths all still exist;
* ``rewired_reach`` — heads within 0, 1, … ``max_hops`` − 1 hops (walked back) of a node whose
  own out-edges were added or removed: what an exact partial path_cache searches anew even
  where α and μ kept every other edge's weight. ``--reach-only`` gives only the counts (at 10⁶
  triples the path sets are too large to compare in Python).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


EDGE_KEY = ["s", "r", "inverse", "o"]


def weighted_edges(build, entities: np.ndarray | None, relations: np.ndarray | None,
                   lambda_topo: float) -> pa.Table:
    """(s, r, inverse, o, weight) of a build's edges, ids moved where translations are given."""
    edges = build.read("edges")
    gain = build.read("node_gain")
    mu = np.zeros(gain.num_rows)
    mu[gain["id"].to_numpy()] = gain["mu"].to_numpy()
    s, r, o = (edges[c].to_numpy() for c in "sro")
    weight = np.log(edges["attention"].to_numpy()) + lambda_topo * np.log(mu[o])
    if entities is not None:
        s, o, r = entities[s], entities[o], relations[r]
    return pa.table({"s": s, "r": r, "inverse": edges["inverse"], "o": o, "weight": weight})


def path_edges(rows: pa.Table) -> pa.Table:
    """One row per edge of every path (row, hop, s, r, inverse, o): hop 0 leaves the head."""
    lengths = pc.list_value_length(rows["nodes"]).to_numpy()
    row = np.repeat(np.arange(rows.num_rows), lengths)
    nodes = pc.list_flatten(rows["nodes"]).to_numpy()
    first = np.r_[0, np.cumsum(lengths)[:-1]]
    hop = np.arange(len(nodes)) - first[row]
    source = np.r_[-1, nodes[:-1]]
    source[hop == 0] = rows["head"].to_numpy()[row[hop == 0]]
    return pa.table({"row": row, "hop": hop, "s": source, "r": pc.list_flatten(rows["relations"]),
                     "inverse": pc.list_flatten(rows["inverses"]), "o": nodes})


def rescored(rows: pa.Table, weights: pa.Table) -> np.ndarray:
    """Each path's score on ``weights``' edges, added in hop order as the search adds them
    (NaN where an edge is missing)."""
    edges = path_edges(rows)
    joined = edges.join(weights, keys=EDGE_KEY, join_type="left outer")
    row, hop = joined["row"].to_numpy(), joined["hop"].to_numpy()
    weight = joined["weight"].to_numpy(zero_copy_only=False)
    score = np.zeros(rows.num_rows)
    for h in range(int(hop.max(initial=-1)) + 1):
        score[row[hop == h]] += weight[hop == h]
    return score


def path_sets(rows: pa.Table) -> dict[int, set]:
    """{head: {(relations, inverses, nodes)}}."""
    found: dict[int, set] = {}
    for head, rel, inv, nodes in zip(*(rows[c].to_pylist()
                                       for c in ("head", "relations", "inverses", "nodes"))):
        found.setdefault(head, set()).add((tuple(rel), tuple(inv), tuple(nodes)))
    return found


def translated(build, entities: np.ndarray, relations: np.ndarray) -> pa.Table:
    """The before build's path_cache rows in the after build's ids."""
    rows = build.read("path_cache")
    nodes = rows["nodes"].combine_chunks()
    rel = rows["relations"].combine_chunks()
    return pa.table({
        "head": entities[rows["head"].to_numpy()], "score": rows["score"],
        "relations": pa.ListArray.from_arrays(rel.offsets, relations[rel.values.to_numpy()]),
        "inverses": rows["inverses"],
        "nodes": pa.ListArray.from_arrays(nodes.offsets, entities[nodes.values.to_numpy()])})


def rewired_reach(now_key: np.ndarray, then_key: np.ndarray, hops: int) -> list[int]:
    """Heads (nodes with an out-edge in ``now_key``) within 0..``hops`` hops of a node whose
    (s, r, inverse, o) out-edges differ between the two key tables."""
    heads = np.unique(now_key[:, 0])
    from bench.common import touched_heads

    return [int(np.isin(touched_heads(now_key, then_key, h), heads).sum())
            for h in range(hops + 1)]


def measure(store: Path, before_id: str, after_id: str, tolerances: list[float],
            lambda_topo: float, max_hops: int, reach_only: bool = False) -> dict:
    from lokg.common.stage import changed_rows, id_translation
    from lokg.runtime.contract import Store

    before, after = Store(store).build(before_id), Store(store).build(after_id)
    entities, relations = (id_translation(*(b.read(t, columns=["id", k]) for b in (after, before)))
                           for t, k in (("entities", "key"), ("relations", "name")))
    now = weighted_edges(after, None, None, lambda_topo)
    then = weighted_edges(before, entities, relations, lambda_topo)
    key = [np.column_stack([t[c].to_numpy().astype(np.int64) for c in EDGE_KEY])
           for t in (now, then)]
    rewired = set(changed_rows(*key)[:, 0].tolist())
    heads = set(np.unique(key[0][:, 0]).tolist())
    found = {"store": str(store), "before": before_id, "after": after_id, "heads": len(heads),
             "rewired_heads": len(rewired & heads),
             "rewired_reach": rewired_reach(*key, max_hops - 1)}
    if reach_only:
        return found
    previous = translated(before, entities, relations)
    delta = np.abs(rescored(previous, now) - previous["score"].to_numpy())
    full, kept_before = path_sets(after.read("path_cache")), path_sets(previous)
    same = [h for h in heads if kept_before.get(h) == full.get(h)]
    rules = {}
    for tol in tolerances:
        moved = set(previous["head"].to_numpy()[~(delta <= tol)].tolist())
        kept = [h for h in heads if h in kept_before and h not in rewired and h not in moved]
        rules[str(tol)] = {"kept": len(kept), "kept_differ": sum(
            kept_before[h] != full.get(h) for h in kept)}
    return {**found, "same_paths": len(same),
            "path_score_change_quantiles": dict(zip(
                ("50%", "90%", "99%"), np.round(np.nanquantile(delta, [0.5, 0.9, 0.99]), 4)
                .tolist())), "tolerance_rule": rules}


def main() -> None:
    from lokg.pipeline.config import DEFAULTS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--before", required=True, help="id of the earlier published build")
    ap.add_argument("--after", required=True, help="id of the refresh (path_cache in full)")
    ap.add_argument("--tolerances", default="0.01,0.1,0.5,inf")
    ap.add_argument("--reach-only", action="store_true", help="only the rewired heads' reach")
    args = ap.parse_args()
    tolerances = [float(t) for t in args.tolerances.split(",")]
    settings = DEFAULTS["path_cache"]
    print(json.dumps(measure(args.store, args.before, args.after, tolerances,
                             float(settings["lambda_topo"]), int(settings["max_hops"]),
                             args.reach_only), indent=2))


if __name__ == "__main__":
    main()

"""How local a refresh's change is for path_cache: which heads a partial path_cache
would search anew, by which rule, for two published builds of consecutive dumps.

    python -m bench.path_cache_locality --store STORE --before B1 --after B2

A head's cached paths depend on the out-edges of the nodes within ``max_hops`` − 1 hops of it.
Counted over the after-build's heads (entities with an out-edge), with the before-build's ids
moved to the after-build's by key (``common.stage.id_translation``) and relations compared by
canonical name:

* ``weights`` — the stage's rule (``bench.common.touched_heads`` over its weighted
  edges): a node is changed when an out-edge was added or removed or its α or μ(target) moved;
* ``structure`` — only out-edges added or removed (what a copy that keeps slightly moved α would
  search: "within L hops of a structurally changed entity");
* ``endpoints`` — the nodes of the added or removed edges themselves (0 hops), the floor of any
  rule. A partial path_cache runs only while its share stays ≤ ``PARTIAL_MAX_SHARE``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pyarrow as pa


def structural_edges(build, names: pa.Array, entities: np.ndarray | None) -> np.ndarray:
    """(s, relation name index, inverse, o) of every edge; ids through ``entities`` if given."""
    import pyarrow.compute as pc

    edges = build.read("edges", columns=["s", "r", "inverse", "o"])
    relations = build.read("relations")
    by_id = np.full(int(pc.max(relations["id"]).as_py()) + 1, -1, np.int64)
    by_id[relations["id"].to_numpy()] = pc.index_in(relations["name"], value_set=names).to_numpy()
    rows = np.column_stack([edges["s"].to_numpy(), by_id[edges["r"].to_numpy()],
                            edges["inverse"].to_numpy().astype(np.int64), edges["o"].to_numpy()])
    if entities is not None:
        rows[:, [0, 3]] = entities[rows[:, [0, 3]]]
    return rows


def weighted_edges(build) -> np.ndarray:
    """Rows (s, r, inverse, o, bits of α, bits of μ(o)) of a build's edges: what a search sees."""
    edges, gain = build.read("edges"), build.read("node_gain")
    mu = np.zeros(gain.num_rows, np.float64)
    mu[gain["id"].to_numpy()] = gain["mu"].to_numpy()
    o = edges["o"].to_numpy()
    return np.column_stack([edges["s"].to_numpy(), edges["r"].to_numpy(),
                            edges["inverse"].to_numpy().astype(np.int64), o,
                            edges["attention"].to_numpy().astype(np.float64).view(np.int64),
                            mu[o].view(np.int64)])


def measure(store: Path, before_id: str, after_id: str, hops: int) -> dict:
    import pyarrow.compute as pc

    from lokg.common.stage import PARTIAL_MAX_SHARE, changed_rows, id_translation
    from lokg.runtime.contract import Store
    from bench.common import touched_heads

    before, after = Store(store).build(before_id), Store(store).build(after_id)
    entities = id_translation(*(b.read("entities", columns=["id", "key"])
                                for b in (after, before)))
    names = pc.unique(pa.chunked_array([b.read("relations")["name"] for b in (after, before)]))
    now, then = (structural_edges(after, names, None),
                 structural_edges(before, names, entities))
    weighted_now, weighted_then = weighted_edges(after), weighted_edges(before)
    weighted_then[:, [0, 3]] = entities[weighted_then[:, [0, 3]]]
    heads = np.unique(now[:, 0])
    changed = changed_rows(now, then)
    ends = np.unique(changed[:, [0, 3]])
    counts = {"weights": touched_heads(weighted_now, weighted_then, hops - 1),
              "structure": touched_heads(now, then, hops - 1),
              "endpoints": ends[ends >= 0]}
    touched = {rule: int(np.isin(heads, nodes).sum()) for rule, nodes in counts.items()}
    return {"store": str(store), "before": before_id, "after": after_id, "max_hops": hops,
            "heads": len(heads), "changed_edges": len(changed),
            "touched_heads": touched,
            "touched_share": {rule: round(n / len(heads), 4) for rule, n in touched.items()},
            "partial_max_share": PARTIAL_MAX_SHARE}


def main() -> None:
    from lokg.pipeline.config import DEFAULTS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--before", required=True, help="id of the earlier published build")
    ap.add_argument("--after", required=True, help="id of the next build (the refresh)")
    ap.add_argument("--max-hops", type=int, default=DEFAULTS["path_cache"]["max_hops"])
    args = ap.parse_args()
    print(json.dumps(measure(args.store, args.before, args.after, args.max_hops), indent=2))


if __name__ == "__main__":
    main()

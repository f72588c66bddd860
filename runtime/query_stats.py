"""The statistics of a build's triples that the query runtime needs: σ* and H(O|R).

Both are functions of the whole ``triples`` table, seconds to compute on a large store, and the
same for every question, so the build computes them once: its publish step writes
:func:`query_stats` to the build file :data:`QUERY_STATS_FILE`, and ``Runtime.open`` reads that
file (:func:`read_query_stats`), computing the statistics itself only for builds published
before the file existed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from lokg.runtime import ittc
from lokg.runtime.contract import StoreError, to_numpy

#: Where a build keeps them, relative to the build directory.
QUERY_STATS_FILE = "reports/query_stats.json"


def tail_entropy_bits(triples: pa.Table, n_relations: int) -> np.ndarray:
    """H(O|R=r) in bits per canonical relation, from the store's triples."""
    r = to_numpy(triples.column("r"))
    o = to_numpy(triples.column("o"))
    out = np.zeros(n_relations, dtype=np.float64)
    if not len(r):
        return out
    span = int(o.max()) + 1
    keys, counts = np.unique(r.astype(np.int64) * span + o, return_counts=True)  # 1-D: fast
    rel = keys // span
    totals = np.bincount(rel, weights=counts, minlength=n_relations)
    p = counts / totals[rel]
    np.add.at(out, rel, -p * np.log2(p))
    return np.maximum(out, 0.0)


def query_stats(triples: pa.Table, n_relations: int) -> dict:
    """σ* (ITTC's component order) and H(O|R) per relation, as JSON-able values (floats
    round-trip exactly through ``json``); ``n_relations`` is the largest canonical relation id
    + 1, as the runtime counts them."""
    sro = np.stack([to_numpy(triples.column(c)) for c in ("s", "r", "o")], axis=1)
    return {"component_order": list(ittc.component_order(sro)),
            "tail_entropy_bits": tail_entropy_bits(triples, n_relations).tolist()}


def read_query_stats(path: Path, n_relations: int) -> tuple[tuple[str, ...], np.ndarray]:
    """(σ*, H(O|R) per relation) from a build's stats file; StoreError naming the file when it
    is unreadable or does not fit the build's relations."""
    try:
        stats = json.loads(path.read_text(encoding="utf-8"))
        order = tuple(stats["component_order"])
        entropy = np.asarray(stats["tail_entropy_bits"], dtype=np.float64)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"{path}: unreadable query statistics ({exc})") from None
    if sorted(order) != sorted(ittc.COMPONENTS) or entropy.shape != (n_relations,):
        raise StoreError(f"{path}: query statistics do not fit this build (order {order!r}, "
                         f"{entropy.size} tail entropies for {n_relations} relations)")
    return order, entropy

"""Each relation's nearest other relations by the cosine of their vectors: TransE's relation
embeddings give relation_stats its ``transe`` candidate pairs, and the benchmarks read the same
neighbours."""

from __future__ import annotations

import numpy as np

from lokg.common.stage import StageError


def nearest_relations(embeddings: np.ndarray, k: int, block: int = 1024
                      ) -> list[tuple[int, int, float]]:
    """Each relation's ``k`` nearest other relations by cosine: ``[(i, j, cos)]``.

    Row index = relation id. Self is excluded; relations with a zero vector (untrained) neither
    get nor are neighbours. Sorted by ``i``, then by decreasing cosine (ties by ``j``). Computed
    ``block`` rows at a time, so memory is O(block·R), never R².
    """
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2:
        raise StageError(f"embeddings must be a 2-d array, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1)
    ids = np.flatnonzero(norms > 0)
    if k <= 0 or len(ids) < 2:
        return []
    unit = x[ids] / norms[ids, None]
    k = min(int(k), len(ids) - 1)
    out: list[tuple[int, int, float]] = []
    for start in range(0, len(ids), block):
        sims = unit[start:start + block] @ unit.T
        rows = np.arange(sims.shape[0])
        sims[rows, rows + start] = -np.inf
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        for row in range(sims.shape[0]):
            cols = sorted(top[row], key=lambda c: (-sims[row, c], ids[c]))
            i = int(ids[start + row])
            out.extend((i, int(ids[c]), float(np.clip(sims[row, c], -1.0, 1.0))) for c in cols)
    return out

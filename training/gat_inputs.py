"""The GAT stage's inputs as arrays: the walk graph, the node features and the relation
vectors (numpy / pyarrow only).

Graph. Every canonical triple (s, r, o) is walked forward s→o and backward o→s (``inverse``);
``runtime.taimr.with_inverses`` builds the edge list, sorted by source, so node u's out-edges
are one CSR slice. Node inputs h_v are the entity vectors of ``entity_encode``; the relation
input of an edge is the canonical relation's TransE vector e_r (the mean of its members' rows of
``relation_embeddings``), and −e_r on an inverse edge (TransE: h + r ≈ t, so walking r backwards
is −r).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lokg.common.stage import StageError
from lokg.runtime.contract import read_table
from lokg.runtime.taimr import with_inverses


@dataclass
class Graph:
    """Directed edges (inverses included) sorted by source; ``indptr`` is the CSR over sources."""

    num_nodes: int
    src: np.ndarray
    rel: np.ndarray
    dst: np.ndarray
    inverse: np.ndarray
    indptr: np.ndarray = field(init=False)

    def __post_init__(self):
        self.indptr = np.concatenate(
            [[0], np.cumsum(np.bincount(self.src, minlength=self.num_nodes))]).astype(np.int64)

    @classmethod
    def from_triples(cls, triples: np.ndarray, num_nodes: int) -> Graph:
        return cls(num_nodes, *with_inverses(triples[:, 0], triples[:, 1], triples[:, 2]))

    @property
    def num_edges(self) -> int:
        return len(self.src)

    def out_degree(self) -> np.ndarray:
        return np.diff(self.indptr)


def read_triples(path: str | Path) -> np.ndarray:
    tri = read_table(Path(path), "triples")
    return np.stack([tri.column(c).to_numpy() for c in ("s", "r", "o")], axis=1).astype(np.int64)


def node_features(vectors_path: str | Path, ids_path: str | Path, num_nodes: int) -> np.ndarray:
    """Entity vectors indexed by entity id (``entity_vectors`` rows follow ``entity_ids``)."""
    vectors = np.load(vectors_path)
    table = read_table(Path(ids_path), "entity_ids")
    rows, ids = table.column("row").to_numpy(), table.column("id").to_numpy()
    if vectors.ndim != 2 or len(vectors) != len(rows):
        raise StageError(f"{vectors_path}: shape {vectors.shape} does not match the {len(rows)} "
                         f"rows of {ids_path}")
    if len(ids) and (ids.min() < 0 or len(np.unique(ids)) != len(ids)):
        raise StageError(f"{ids_path}: entity ids must be distinct and >= 0")
    n = max(num_nodes, int(ids.max()) + 1 if len(ids) else 0)
    x = np.zeros((n, vectors.shape[1]), dtype=np.float32)
    present = np.zeros(n, dtype=bool)
    x[ids], present[ids] = vectors[rows], True
    if not present[:num_nodes].all():
        missing = np.flatnonzero(~present[:num_nodes])
        raise StageError(f"{ids_path}: {len(missing)} entities of the triples have no vector "
                         f"(e.g. id {int(missing[0])}); entity_encode must cover every entity")
    return x


def relation_vectors(embeddings_path: str | Path, relation_map_path: str | Path,
                     num_relations: int) -> np.ndarray:
    """Canonical relation c's vector = mean of the TransE rows of its original members."""
    emb = np.load(embeddings_path).astype(np.float32)
    rmap = read_table(Path(relation_map_path), "relation_map")
    ids, canon = rmap.column("id").to_numpy(), rmap.column("canonical_id").to_numpy()
    if emb.ndim != 2 or (len(ids) and ids.max() >= len(emb)):
        raise StageError(f"{embeddings_path}: shape {emb.shape} has no row for every original "
                         f"relation of {relation_map_path} (ids up to {int(ids.max())})")
    if len(canon) and (canon.min() < 0 or canon.max() >= num_relations):
        raise StageError(f"{relation_map_path}: canonical ids outside the {num_relations} "
                         f"canonical relations")
    sums = np.zeros((num_relations, emb.shape[1]), dtype=np.float64)
    np.add.at(sums, canon, emb[ids])
    counts = np.bincount(canon, minlength=num_relations)
    if (counts == 0).any():
        raise StageError(f"{relation_map_path}: canonical relation {int(np.argmin(counts))} "
                         f"has no member, so no TransE vector")
    return (sums / counts[:, None]).astype(np.float32)

"""The GAT stage's inputs as arrays: the walk graph, the node features and the relation
vectors (numpy / pyarrow only).

Graph. Every canonical triple (s, r, o) is walked forward s→o and backward o→s (``inverse``);
``runtime.taimr.with_inverses`` builds the edge list, sorted by source, so node u's out-edges
are one CSR slice; past its share of ``build.memory_gb`` a block of source nodes at a time
(``Graph.from_triples``), so that only a block's sort is in memory beside the graph. Node inputs h_v are the entity vectors of ``entity_encode``; the relation
input of an edge is the canonical relation's TransE vector e_r (the mean of its members' rows of
``relation_embeddings``), and −e_r on an inverse edge (TransE: h + r ≈ t, so walking r backwards
is −r).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from lokg.common.stage import StageError
from lokg.runtime.contract import read_table
from lokg.runtime.taimr import with_inverses
from lokg.training.gat_rows import gather

#: the graph build's share of ``build.memory_gb`` (``Graph.from_triples``' blocks)
BUILD_SHARE = 0.25
#: transient bytes per edge of a block being built: its columns before and after sorting, the
#: sort's order and the source masks' picks
BUILD_BYTES_PER_EDGE = 48


@dataclass
class Graph:
    """Directed edges (inverses included) sorted by source; ``indptr`` is the CSR over sources.
    Ids are int32 where nodes, relations and edges fit (``id_dtype``), else int64: 13 bytes an
    edge, the graph's whole resident share."""

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
    def from_triples(cls, triples: np.ndarray, num_nodes: int,
                     block_edges: int | None = None) -> Graph:
        """The graph of [T, 3] (s, r, o) ``triples``, built a block of source nodes at a time,
        each block's ≤ ``block_edges`` edges sorted on their own (``build_block_edges``; None:
        the whole list at once): the same graph whatever the blocks, its transient memory a
        block's."""
        s, r, o = triples[:, 0], triples[:, 1], triples[:, 2]
        dtype = id_dtype(num_nodes, int(r.max(initial=0)) + 1, 2 * len(triples))
        indptr = np.concatenate([[0], np.cumsum(np.bincount(s, minlength=num_nodes)
                                                + np.bincount(o, minlength=num_nodes))])
        if block_edges is None or indptr[-1] <= block_edges:
            return cls(num_nodes, *with_inverses(s, r, o, dtype))
        columns = [np.empty(indptr[-1], dtype) for _ in range(3)] + [np.empty(indptr[-1], bool)]
        for u0, u1 in node_chunks(indptr, block_edges):
            for column, block in zip(columns, with_inverses(s, r, o, dtype, sources=(u0, u1))):
                column[indptr[u0]:indptr[u1]] = block
        return cls(num_nodes, *columns)

    @property
    def num_edges(self) -> int:
        return len(self.src)

    def out_degree(self) -> np.ndarray:
        return np.diff(self.indptr)


def build_block_edges(memory_gb: float | None) -> int | None:
    """Edges per block of ``Graph.from_triples``: ``BUILD_SHARE`` of ``memory_gb`` over
    ``BUILD_BYTES_PER_EDGE`` (None: no bound, one block)."""
    return None if memory_gb is None else max(1, int(memory_gb * 1e9 * BUILD_SHARE
                                                      / BUILD_BYTES_PER_EDGE))


def node_chunks(indptr: np.ndarray, max_edges: int) -> list[tuple[int, int]]:
    """Consecutive source-node ranges holding ≤ max_edges out-edges (one hub may hold more)."""
    n, chunks, u0 = len(indptr) - 1, [], 0
    while u0 < n:
        u1 = int(np.searchsorted(indptr, indptr[u0] + max_edges, side="right")) - 1
        u1 = min(max(u1, u0 + 1), n)
        chunks.append((u0, u1))
        u0 = u1
    return chunks


def id_dtype(*counts: int) -> type:
    """int32 when every id below these counts fits it, else int64."""
    return np.int32 if max(counts) < 2**31 else np.int64


def read_triples(path: str | Path) -> np.ndarray:
    """The triples as one [T, 3] (s, r, o) array, int32 where the ids fit."""
    tri = read_table(Path(path), "triples")
    top = max((pc.max(tri.column(c)).as_py() or 0 for c in ("s", "r", "o")), default=0)
    dtype = id_dtype(top + 1, 2 * tri.num_rows)
    out = np.empty((tri.num_rows, 3), dtype=dtype)
    for i, c in enumerate(("s", "r", "o")):
        out[:, i] = tri.column(c).to_numpy()
    return out


class NodeFeatures:
    """The nodes' entity vectors (rows of ``entity_vectors`` follow ``entity_ids``), read from the
    memory-mapped ``.npy`` a block of nodes at a time (``take``, ``gat_rows.gather``): the file's
    pages stay in the OS page cache, and this process holds only the rows a block asked for, as
    float32, and one gather group's mapped pages."""

    def __init__(self, vectors_path: str | Path, ids_path: str | Path, num_nodes: int):
        vectors = np.load(vectors_path, mmap_mode="r")
        table = read_table(Path(ids_path), "entity_ids")
        rows, ids = table.column("row").to_numpy(), table.column("id").to_numpy()
        if vectors.ndim != 2 or len(vectors) != len(rows):
            raise StageError(f"{vectors_path}: shape {vectors.shape} does not match the "
                             f"{len(rows)} rows of {ids_path}")
        if len(ids) and (ids.min() < 0 or len(np.unique(ids)) != len(ids)):
            raise StageError(f"{ids_path}: entity ids must be distinct and >= 0")
        row_of = np.full(max(num_nodes, int(ids.max()) + 1 if len(ids) else 0), -1, np.int64)
        row_of[ids] = rows
        if (row_of[:num_nodes] < 0).any():
            missing = np.flatnonzero(row_of[:num_nodes] < 0)
            raise StageError(f"{ids_path}: {len(missing)} entities of the triples have no vector "
                             f"(e.g. id {int(missing[0])}); entity_encode must cover every entity")
        self.path, self.row_of = Path(vectors_path), row_of[:num_nodes]
        self.shape = (num_nodes, int(vectors.shape[1]))

    def take(self, nodes: np.ndarray) -> np.ndarray:
        """float32 [len(nodes), dim]: the vectors of these node ids."""
        rows = self.row_of[np.asarray(nodes)]
        if not len(rows):
            return np.zeros((0, self.shape[1]), np.float32)
        return gather(lambda: np.load(self.path, mmap_mode="r"), rows, np.float32)

    def read(self, start: int, stop: int) -> np.ndarray:
        """float32 rows of nodes start..stop-1."""
        return self.take(np.arange(start, stop))


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

"""Reading the published ``path_cache`` table (written by spark_jobs/path_cache.py, DESIGN §2.9).

The cache holds each hot head's top paths; a path is handed to the query runtime as one
:data:`PathRow`, the same shape :func:`path_rows` gives a head the runtime computes itself
(a cold head), so retrieval never knows which of the two it got.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from runtime import taimr
from runtime.contract import StoreError

#: One path: (S_topo, relations, inverses, nodes) hop by hop, the head excluded from nodes.
PathRow = tuple[float, Sequence[int], Sequence[bool], Sequence[int]]


class PathCache:
    """The published path_cache: one bucket file per ``head % buckets``, a few kept in memory."""

    def __init__(self, directory: Path, buckets: int, keep: int = 256):
        self.directory = directory
        self.buckets = buckets
        self.keep = keep
        self._loaded: OrderedDict[int, tuple[pa.Table, dict[int, tuple[int, int]]]] = OrderedDict()
        self._lock = threading.Lock()

    def _bucket(self, b: int) -> tuple[pa.Table, dict[int, tuple[int, int]]]:
        with self._lock:
            if b in self._loaded:
                self._loaded.move_to_end(b)
                return self._loaded[b]
        path = self.directory / f"bucket-{b:05d}.parquet"
        try:
            table = pq.read_table(path, memory_map=True).combine_chunks()
        except (OSError, pa.ArrowException) as exc:  # the build was deleted or damaged
            raise StoreError(f"{path}: cannot read path-cache bucket ({exc})") from None
        heads = table.column("head").to_numpy()
        starts = np.flatnonzero(np.r_[True, heads[1:] != heads[:-1]]) if len(heads) else []
        ends = list(starts[1:]) + [len(heads)] if len(heads) else []
        offsets = {int(heads[s]): (int(s), int(e)) for s, e in zip(starts, ends)}
        # Flat numpy columns: slicing them per head is ~10x cheaper than Arrow's to_pydict.
        lists = {c: table.column(c).chunk(0) if table.num_rows else None
                 for c in ("relations", "inverses", "nodes")}
        flat = (table.column("score").to_numpy(),
                lists["relations"].offsets.to_numpy() if table.num_rows else np.zeros(1, np.int32),
                *(lists[c].values.to_numpy(zero_copy_only=False) if table.num_rows
                  else np.zeros(0) for c in ("relations", "inverses", "nodes")))
        with self._lock:
            self._loaded[b] = (flat, offsets)
            while len(self._loaded) > self.keep:
                self._loaded.popitem(last=False)
        return flat, offsets

    def get(self, head: int) -> list[PathRow] | None:
        """The cached paths of ``head``, or None when the head is not in the cache (cold)."""
        (score, offs, rel, inv, nodes), offsets = self._bucket(head % self.buckets)
        if head not in offsets:
            return None
        start, end = offsets[head]
        lo, hi = int(offs[start]), int(offs[end])
        rel_l, inv_l, nodes_l = (rel[lo:hi].tolist(), inv[lo:hi].tolist(), nodes[lo:hi].tolist())
        bounds = (offs[start:end + 1] - lo).tolist()
        return [(sc, rel_l[a:b], inv_l[a:b], nodes_l[a:b])
                for sc, a, b in zip(score[start:end].tolist(), bounds[:-1], bounds[1:])]


def path_rows(paths: taimr.Paths) -> list[PathRow]:
    """taimr's flat per-head result as one tuple per path (the cache's row shape)."""
    ends = np.cumsum(paths.lengths)
    rel, inv, nodes = paths.relations.tolist(), paths.inverses.tolist(), paths.nodes.tolist()
    out, start = [], 0
    for score, end in zip(paths.score.tolist(), ends.tolist()):
        out.append((score, rel[start:end], inv[start:end], nodes[start:end]))
        start = end
    return out


def path_triples(head: int, path: PathRow) -> list[tuple[int, int, int]]:
    """The KG triples a path walks (an inverse hop u -r⁻¹-> v is the triple (v, r, u))."""
    out, here = [], head
    for rel, inv, there in zip(path[1], path[2], path[3]):
        out.append((there, rel, here) if inv else (here, rel, there))
        here = there
    return out

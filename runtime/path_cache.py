"""Reading the published ``path_cache`` table (written by spark_jobs/path_cache.py).

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

from lokg.runtime import taimr
from lokg.runtime.contract import StoreError, read_parquet, to_numpy

#: One path: (S_topo, relations, inverses, nodes) hop by hop, the head excluded from nodes.
PathRow = tuple[float, Sequence[int], Sequence[bool], Sequence[int]]
#: One bucket in memory: its flat columns (:func:`_read_bucket`) and each head's row range.
_Bucket = tuple[tuple[np.ndarray, ...], dict[int, tuple[int, int]]]


class PathCache:
    """The published path_cache: one bucket file per ``head % buckets``, a few kept in memory."""

    def __init__(self, directory: Path, buckets: int, keep: int = 256):
        self.directory = directory
        self.buckets = buckets
        self.keep = keep
        self._loaded: OrderedDict[int, _Bucket] = OrderedDict()
        self._lock = threading.Lock()

    def _bucket(self, b: int) -> _Bucket:
        with self._lock:
            if b in self._loaded:
                self._loaded.move_to_end(b)
                return self._loaded[b]
        loaded = _read_bucket(self.directory / f"bucket-{b:05d}.parquet")
        with self._lock:
            self._loaded[b] = loaded
            while len(self._loaded) > self.keep:
                self._loaded.popitem(last=False)
        return loaded

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


def _read_bucket(path: Path) -> _Bucket:
    """One bucket as flat numpy columns (score, hop offsets, relations, inverses, nodes) and
    each head's row range: slicing them per head is ~10x cheaper than Arrow's to_pydict. Hop
    ids are held in the narrowest integer type that fits them (a quarter or less of the int64
    the table stores); scores and offsets are views of the decoded Arrow buffers."""
    try:
        table = read_parquet(path, memory_map=True).combine_chunks()
    except (OSError, pa.ArrowException) as exc:  # the build was deleted or damaged
        raise StoreError(f"{path}: cannot read path-cache bucket ({exc})") from None
    if not table.num_rows:
        return (np.zeros(0), np.zeros(1, np.int32), *(np.zeros(0, np.int8),) * 3), {}
    heads = to_numpy(table.column("head"))
    starts = np.flatnonzero(np.r_[True, heads[1:] != heads[:-1]])
    ends = np.append(starts[1:], len(heads))
    offsets = {int(heads[s]): (int(s), int(e)) for s, e in zip(starts, ends)}
    lists = {c: table.column(c).chunk(0) for c in ("relations", "inverses", "nodes")}
    flat = (to_numpy(table.column("score")), to_numpy(lists["relations"].offsets),
            *(_narrow(to_numpy(lists[c].values)) for c in ("relations", "inverses", "nodes")))
    return flat, offsets


def _narrow(values: np.ndarray) -> np.ndarray:
    """``values`` in the smallest integer dtype that holds their range (booleans as they are)."""
    if values.dtype == bool or not len(values):
        return values
    dtype = np.promote_types(np.min_scalar_type(values.min()), np.min_scalar_type(values.max()))
    return values.astype(dtype)


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

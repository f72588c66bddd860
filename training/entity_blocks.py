"""entity_encode in bounded memory: the vectors encoded block by block into a memory-mapped
``entity_vectors.npy``, and the ANN index built from that file block by block, both sized by
``build.memory_gb`` (lokg/common/resources.py) whatever the number of entities.

Blocks. ``block_rows`` vectors (``VECTOR_SHARE`` of the budget, a whole number of encoder
batches) are in memory at a time. Encoding goes in two passes over files, so that no pass holds
every vector:

1. the distinct texts, shortest first (``runtime.encoder.length_order``), are
   encoded a block at a time and appended to a scratch file in that order. A block is a whole
   number of batches, so the batches — and so the int8 vectors, whose activations are scaled
   per batch — are those of one pass over all texts: the vectors do not depend on the budget;
2. ``entity_vectors.npy`` (``np.lib.format.open_memmap``) is filled in row order, a block of
   rows at a time gathered from the scratch file (and, in a refresh, from the previous build's
   vectors) by reads of single rows: mapped, random reads would count every cached page around
   each row resident (the kernel maps 64 kB around a fault), the whole file in the end. The
   output is mapped afresh for each block and unmapped after, so its pages leave the process's
   resident set with the block; the index reads it in slices the same way.

Index (``build_index``), inner product on unit vectors, its estimated size against
``INDEX_SHARE`` of the budget:

* ``flat_ip`` — ``IndexFlatIP`` (exact) up to ``flat_max`` entities, when it fits;
* ``hnsw_ip`` — ``IndexHNSWFlat`` (M = ``hnsw_m``) above, when it fits (every vector and the
  graph are held: ~1.8 kB an entity at M = 32);
* ``ivf_sq8_ip`` — beyond the budget: ``IndexIVFScalarQuantizer`` (8-bit codes, 392 bytes an
  entity, ``ivf_nprobe`` lists searched, stored in the file), its coarse centroids trained on a
  sample of at most one block, the vectors added one block at a time;
* ``ivf_pq_ip`` — where even the 8-bit codes exceed the budget: ``IndexIVFPQ`` with the most
  code bytes an entity that fit (a divisor of ``dim``, 8 to 192).

Every kind is added to in blocks read from the file, so the vectors are held once, inside the
index, where they are held at all. docs/measurements/entity_encode_memory.md gives the peaks
and recall@10 against the exact search of each kind (bench/stage_memory.py).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np

from lokg.common.stage import StageError

#: The share of ``build.memory_gb`` one block of vectors may take (the encoder's outputs, the
#: workers' copies and the gathered rows each hold a block).
VECTOR_SHARE = 1 / 16
#: The share of ``build.memory_gb`` the index may take while it is built and written.
INDEX_SHARE = 1 / 2
#: Coarse lists of an IVF index: about the square root of the entities, within these bounds.
IVF_LISTS = (16, 65536)
#: Training vectors per coarse list, and the fewest FAISS takes without a warning.
IVF_TRAIN_PER_LIST, IVF_TRAIN_LEAST = 64, 39
PQ_BYTES = (192, 128, 96, 64, 48, 32, 24, 16, 8)


def budget_bytes(memory_gb: float) -> int:
    return int(float(memory_gb) * (1 << 30))


def block_rows(memory_gb: float, dim: int, batch: int) -> int:
    """Rows of one block: ``VECTOR_SHARE`` of the budget in float32 vectors, a whole number of
    ``batch``-text batches (one batch at least)."""
    rows = int(budget_bytes(memory_gb) * VECTOR_SHARE) // (4 * int(dim))
    return max(int(batch), rows // int(batch) * int(batch))


def encode_sorted_blocks(encode: Callable[[list[str], int], np.ndarray], ordered: list[str],
                         batch: int, rows: int, scratch: Path) -> None:
    """``encode(texts, batch)`` over ``ordered`` ``rows`` texts at a time (a multiple of
    ``batch``), the float32 vectors appended to the raw file ``scratch`` in that order."""
    with open(scratch, "wb") as sink:
        for start in range(0, len(ordered), rows):
            block = np.ascontiguousarray(encode(ordered[start:start + rows], batch), np.float32)
            sink.write(memoryview(block))  # no bytes copy of the block
            del block


def fill_vectors(path: Path, shape: tuple[int, int], rows: int,
                 sources: Callable[[int, int], np.ndarray]) -> None:
    """``entity_vectors.npy`` (float32 ``shape``) written ``rows`` rows at a time:
    ``sources(start, stop)`` gives those rows' vectors; the file is mapped per block."""
    np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape).flush()
    for start in range(0, shape[0], rows):
        stop = min(start + rows, shape[0])
        out = np.load(path, mmap_mode="r+")
        out[start:stop] = sources(start, stop)
        out.flush()
        del out


def gather(path: Path, rows: np.ndarray, dim: int | None = None) -> np.ndarray:
    """Rows ``rows`` of a float32 file (``.npy``, or raw with ``dim`` columns), read row by row
    (``pread``): a map read at random would count the whole file resident, since each fault
    maps the cached pages around it."""
    with open(path, "rb", buffering=0) as source:
        offset = 0
        if dim is None:
            version = np.lib.format.read_magic(source)
            shape, _, _ = (np.lib.format.read_array_header_1_0(source) if version == (1, 0)
                           else np.lib.format.read_array_header_2_0(source))
            dim, offset = shape[1], source.tell()
        taken = np.empty((len(rows), dim), np.float32)
        if not taken.size:
            return taken
        view, size = memoryview(taken).cast("B"), 4 * dim
        for i, row in enumerate(rows.tolist()):
            if os.preadv(source.fileno(), [view[i * size:(i + 1) * size]],
                         offset + row * size) != size:
                raise StageError(f"{path}: row {row} is past the end of the file")
    return taken


def vector_blocks(vectors: np.ndarray | Path, rows: int) -> Iterator[np.ndarray]:
    """``rows`` rows at a time, float32 and contiguous: of an array, or of an ``.npy`` file
    mapped afresh for each block."""
    n = len(vectors) if not isinstance(vectors, Path) else np.load(vectors, mmap_mode="r").shape[0]
    for start in range(0, n, rows):
        source = np.load(vectors, mmap_mode="r") if isinstance(vectors, Path) else vectors
        block = np.array(source[start:start + rows], np.float32, order="C")  # a copy
        del source  # a file's map goes with it
        yield block


def index_kind(n: int, dim: int, cfg: Mapping, memory_gb: float | None) -> str:
    """The index kind for ``n`` vectors: flat or HNSW as configured where their estimated size
    fits ``INDEX_SHARE`` of the budget (no budget: always), else 8-bit IVF, else IVF-PQ."""
    room = math.inf if memory_gb is None else budget_bytes(memory_gb) * INDEX_SHARE
    flat, hnsw = n * 4 * dim, n * (4 * dim + 10 * int(cfg["hnsw_m"]) + 32)
    if n <= int(cfg["flat_max"]) and flat <= room:
        return "flat_ip"
    if hnsw <= room:
        return "hnsw_ip"
    return "ivf_sq8_ip" if n * (dim + 8) + ivf_lists(n) * dim * 4 <= room else "ivf_pq_ip"


def ivf_lists(n: int) -> int:
    """About the square root of ``n`` within ``IVF_LISTS``, and never more lists than vectors."""
    return int(max(1, min(max(round(math.sqrt(n)), IVF_LISTS[0]), IVF_LISTS[1], n)))


def build_index(vectors: np.ndarray | Path, cfg: Mapping, memory_gb: float | None = None,
                rows: int | None = None):
    """(index, kind) of ``vectors`` (an array, or the ``.npy`` file, read in blocks of ``rows``):
    the kind by ``index_kind``, the vectors added a block at a time."""
    import faiss

    shape = np.load(vectors, mmap_mode="r").shape if isinstance(vectors, Path) else vectors.shape
    n, dim = shape
    rows = rows or max(1, n)
    kind = index_kind(n, dim, cfg, memory_gb)
    if kind == "flat_ip":
        index = faiss.IndexFlatIP(dim)
    elif kind == "hnsw_ip":
        index = faiss.IndexHNSWFlat(dim, int(cfg["hnsw_m"]), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(cfg["hnsw_ef_construction"])
        index.hnsw.efSearch = int(cfg["hnsw_ef_search"])  # stored in the index file
    else:
        index = _trained_ivf(kind, vectors, n, dim, cfg, memory_gb, rows)
    for block in vector_blocks(vectors, rows):
        index.add(block)
    return index, kind


def _trained_ivf(kind: str, vectors: np.ndarray | Path, n: int, dim: int, cfg: Mapping,
                 memory_gb: float, rows: int):
    """An IVF index (8-bit or PQ codes) trained on a sample of at most ``rows`` vectors."""
    import faiss

    lists = min(ivf_lists(n), max(1, rows // IVF_TRAIN_LEAST))  # trained on one block at most
    quantizer = faiss.IndexFlatIP(dim)
    if kind == "ivf_sq8_ip":
        index = faiss.IndexIVFScalarQuantizer(quantizer, dim, lists, faiss.ScalarQuantizer.QT_8bit,
                                              faiss.METRIC_INNER_PRODUCT)
    else:
        index = faiss.IndexIVFPQ(quantizer, dim, lists, pq_bytes(n, dim, memory_gb), 8,
                                 faiss.METRIC_INNER_PRODUCT)
    sample = np.sort(np.random.default_rng(0).choice(n, min(n, rows, lists * IVF_TRAIN_PER_LIST),
                                                     replace=False))
    index.train(gather(vectors, sample) if isinstance(vectors, Path)
                else np.ascontiguousarray(vectors[sample], np.float32))
    index.nprobe = min(int(cfg["ivf_nprobe"]), lists)  # stored in the index file
    return index


def pq_bytes(n: int, dim: int, memory_gb: float) -> int:
    """The most PQ code bytes an entity (dividing ``dim``) whose codes fit ``INDEX_SHARE``."""
    room = budget_bytes(memory_gb) * INDEX_SHARE - ivf_lists(n) * dim * 4
    fitting = [m for m in PQ_BYTES if dim % m == 0 and n * (m + 8) <= room]
    if not fitting:
        raise StageError(f"entity_encode: {n} vectors of {dim} dims fit no IVF-PQ index in build.memory_gb="
                         f"{memory_gb} (raise it)")
    return fitting[0]


def index_spec(kind: str, index, rows: int, cfg: Mapping) -> dict:
    """encoder.json's ``index`` entry: type, metric, rows and the search settings stored."""
    spec = {"type": kind, "metric": "inner_product", "rows": rows}
    if kind == "hnsw_ip":
        spec.update(hnsw_m=int(cfg["hnsw_m"]), ef_search=int(cfg["hnsw_ef_search"]))
    elif kind.startswith("ivf"):
        spec.update(lists=int(index.nlist), nprobe=int(index.nprobe))
    return spec

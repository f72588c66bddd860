"""Row arrays for the GAT's layer-wise inference whose size follows the graph: node rows (the
entity vectors, each layer's output) and per-edge α, kept on disk and touched a block at a time.

Every such array answers ``take(ids)`` (the rows of these ids, in memory) and ``read(start,
stop)`` (a range), and has ``shape``. ``DiskRows`` is one on disk: written by row ranges
(``pwrite``), read by ranges (``pread``) or gathered through mappings opened and closed per
``GATHER_ROWS`` rows (``gather``), so the process holds only the rows a block asked for while
the file's pages stay in the OS page cache, and the α and layer outputs of a graph of any size do not count towards a stage's
resident memory. ``MemoryRows`` wraps an array already in memory (a small graph's features, a
test's tensor) so that the same code reads both.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


#: rows gathered under one mapping (``gather``): reading a row maps the cached pages around it
#: (the kernel's fault-around, 64 KiB), and they count towards the process's resident memory
#: until it unmaps them; a gather of rows spread over the whole file under one mapping would
#: hold the whole file
GATHER_ROWS = 2048


def gather(open_map, ids: np.ndarray, dtype) -> np.ndarray:
    """The rows ``ids`` of the array that ``open_map()`` maps, as ``dtype``, ``GATHER_ROWS`` at
    a time, each group under a mapping of its own: the process holds the rows it asked for and
    at most one group's mapped pages (~``GATHER_ROWS`` × 64 KiB), whatever the file's size."""
    out = None
    for start in range(0, len(ids), GATHER_ROWS):
        mapped = open_map()
        if out is None:
            out = np.empty((len(ids), *mapped.shape[1:]), dtype)
        out[start:start + GATHER_ROWS] = mapped[ids[start:start + GATHER_ROWS]]
        del mapped  # unmapped: the pages it touched leave this process
    return out


class DiskRows:
    """A [rows] or [rows, width] array of ``dtype`` in the raw file ``path`` (created, zeros;
    its owner removes it when done: ``path.unlink()``)."""

    def __init__(self, path: str | Path, rows: int, width: int | None, dtype):
        self.path, self.dtype = Path(path), np.dtype(dtype)
        self.shape = (rows,) if width is None else (rows, width)
        self.row_bytes = self.dtype.itemsize * (width or 1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "wb") as fh:
            fh.truncate(rows * self.row_bytes)

    def __len__(self) -> int:
        return self.shape[0]

    def write(self, start: int, block: np.ndarray) -> None:
        """Rows start..start+len(block)-1 set to ``block``."""
        data = memoryview(np.ascontiguousarray(block, dtype=self.dtype)).cast("B")
        offset, fd = start * self.row_bytes, os.open(self.path, os.O_WRONLY)
        try:
            while len(data):
                written = os.pwrite(fd, data, offset)
                data, offset = data[written:], offset + written
        finally:
            os.close(fd)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows start..stop-1."""
        count = (stop - start) * (self.row_bytes // self.dtype.itemsize)
        block = np.fromfile(self.path, self.dtype, count=count, offset=start * self.row_bytes)
        return block.reshape((stop - start, *self.shape[1:]))

    def take(self, ids) -> np.ndarray:
        """The rows of ``ids`` (any integer array), in memory."""
        ids = np.asarray(ids)
        if not len(ids) or not self.shape[0]:
            return np.zeros((len(ids), *self.shape[1:]), self.dtype)
        return gather(lambda: np.memmap(self.path, self.dtype, "r", shape=self.shape), ids,
                      self.dtype)

    __getitem__ = take

    def __array__(self, dtype=None, copy=None):
        whole = self.read(0, len(self))
        return whole if dtype is None else whole.astype(dtype)


class MemoryRows:
    """An in-memory [rows, width] numpy array or torch tensor read as ``DiskRows`` are."""

    def __init__(self, array):
        self.array = array.numpy() if hasattr(array, "numpy") else np.asarray(array)
        self.shape = self.array.shape

    def take(self, ids) -> np.ndarray:
        return self.array[np.asarray(ids)]

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.array[start:stop]


def as_rows(x):
    """``x`` itself when it reads as rows (``take``/``read``), else ``MemoryRows(x)``."""
    return x if isinstance(x, (DiskRows, MemoryRows)) or (
        hasattr(x, "take") and hasattr(x, "read") and not hasattr(x, "dtype")) else MemoryRows(x)

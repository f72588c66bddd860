"""Row arrays for the GAT's layer-wise inference whose size follows the graph: node rows (the
entity vectors, each layer's output) and per-edge α, kept on disk and touched a block at a time.

Every such array answers ``take(ids)`` (the rows of these ids, in memory) and ``read(start,
stop)`` (a range), and has ``shape``. ``DiskRows`` is one on disk: written by row ranges
(``pwrite``), read by ranges (``pread``) or gathered through a mapping opened and closed per
call, so the process holds only the rows a block asked for while the file's pages stay in the OS
page cache, and the α and layer outputs of a graph of any size do not count towards a stage's
resident memory. ``MemoryRows`` wraps an array already in memory (a small graph's features, a
test's tensor) so that the same code reads both.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


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
        mapped = np.memmap(self.path, self.dtype, "r", shape=self.shape)
        rows = np.array(mapped[ids])
        del mapped  # unmapped: the pages it touched leave this process
        return rows

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

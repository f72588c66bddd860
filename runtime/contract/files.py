"""Files of a build: checksums, atomic small writes, and contract tables read and written as
Parquet without pandas."""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lokg.runtime.contract.layout import StoreError
from lokg.runtime.contract.schemas import TABLE_SCHEMAS

def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: str) -> None:
    """Write a small text file so that readers see the old or the new content, never a mix."""
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def table_files(path: Path) -> list[Path]:
    """The Parquet files of a table: the file itself, or the part files of a dataset directory."""
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(p for p in path.rglob("*.parquet") if p.is_file())
    raise StoreError(f"table path does not exist: {path}")


def table_rows(path: Path) -> int:
    """The rows of a table (a file or a dataset directory), from its files' footers."""
    return sum(pq.ParquetFile(f).metadata.num_rows for f in table_files(Path(path)))


def check_schema(table: str, schema: pa.Schema, where: Path) -> None:
    """Refuse a table whose columns or types differ from the contract."""
    expected = TABLE_SCHEMAS[table]
    got = pa.schema([schema.field(n) for n in schema.names if not n.startswith("__")])
    if [f.name for f in got] != expected.names:
        raise StoreError(
            f"{where}: table '{table}' has columns {got.names}, contract expects {expected.names}"
        )
    for field in expected:
        if not got.field(field.name).type.equals(field.type):
            raise StoreError(
                f"{where}: column '{table}.{field.name}' has type {got.field(field.name).type}, "
                f"contract expects {field.type}"
            )


def write_table(table: str, data: pa.Table, path: Path, schema: pa.Schema | None = None) -> None:
    """Write a contract table from Arrow (driver-side writers; Spark writers use spark_jobs);
    ``schema``: the contract's with other nullability, where a Spark path writes that."""
    schema = schema or TABLE_SCHEMAS[table]
    data = data.select(schema.names).cast(schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, path)


def read_parquet(path: Path, columns: list[str] | None = None, *,
                 memory_map: bool = False) -> pa.Table:
    """One Parquet file as a table. ``pq.ParquetFile`` rather than ``pq.read_table``: the
    latter goes through ``pyarrow.dataset``, whose import pulls in pandas (~0.9 s and ~45 MiB
    resident in the query service) for a single file it reads the same way. Decoded on the
    calling thread: buffers a decoding worker thread frees stay in that idle thread's
    allocator heap, out of reach of ``release_unused`` (~30 MiB when a store opens)."""
    with pq.ParquetFile(path, memory_map=memory_map) as handle:
        return handle.read(columns=columns, use_threads=False)


def to_numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A null-free numeric or boolean Arrow column as numpy, read from its buffers: a view of
    a single chunk's values (booleans unpacked from their bitmap). pyarrow's own ``to_numpy``
    goes through its pandas bridge, which imports pandas (see :func:`read_parquet`)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    dtype = np.dtype(column.type.to_pandas_dtype())
    if any(c.null_count for c in chunks) or dtype.kind not in "iufb":
        raise TypeError(f"to_numpy: a null-free numeric column, not {column.type} "
                        f"with {sum(c.null_count for c in chunks)} nulls")
    parts = [_chunk_numpy(c, dtype) for c in chunks if len(c)]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def _chunk_numpy(chunk: pa.Array, dtype: np.dtype) -> np.ndarray:
    data = chunk.buffers()[1]
    if dtype.kind == "b":
        bits = np.unpackbits(np.frombuffer(data, np.uint8), count=chunk.offset + len(chunk),
                             bitorder="little")
        return bits[chunk.offset:].view(bool)
    return np.frombuffer(data, dtype, count=len(chunk), offset=chunk.offset * dtype.itemsize)


def read_table(path: Path, table: str | None = None, columns: list[str] | None = None) -> pa.Table:
    files = table_files(path)
    if not files:
        raise StoreError(f"table has no Parquet files: {path}")
    data = pa.concat_tables(read_parquet(f, columns) for f in files)
    if table is not None and columns is None:
        check_schema(table, data.schema, path)
    return data

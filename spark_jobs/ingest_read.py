"""A dump's lines as one Parquet table, the input of ingest's SQL (``spark_jobs.ingest_sql``).

Each file of a plan is read in blocks of whole lines (``BLOCK_BYTES``: memory does not grow with
the dump), split as Spark's text reader splits them (``\\n``, ``\\r\\n`` or ``\\r``; gzip read
through), and written as rows of ``LINE_SCHEMA``:

* ``source``, ``parser``, ``graph`` — the plan's source of the file (``formats.Source``);
* ``file_idx``, ``line`` — the file's index in ``plan.files`` and the 1-based line number;
* ``value`` — the text, a leading byte-order mark dropped; ``valid`` — whether the bytes were
  UTF-8 (else ``value`` shows the bad bytes as U+FFFD, so that it always reads back);
* ``hash`` — a 64-bit hash of the line's bytes, for the line parsers (``formats.LINE_PARSERS``,
  the line store of a refresh), else null;
* ``j_ok``, ``j_key``, ``j_name``, ``j_description``, ``j_aliases`` — an entities file's JSON
  record decoded (what SQL cannot say portably), for the ``entities`` parser's lines only.

A file that cannot be read (a truncated ``.gz``) fails the stage with ``IngestError`` naming it.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lokg.spark_jobs import formats as fm
from lokg.spark_jobs.ingest_checks import IngestError

#: Bytes of a file read at once (``file_blocks``).
BLOCK_BYTES = 128 << 20

LINE_SCHEMA = pa.schema([
    ("source", pa.int32()), ("parser", pa.string()), ("graph", pa.bool_()),
    ("file_idx", pa.int32()), ("line", pa.int64()), ("value", pa.string()),
    ("valid", pa.bool_()), ("hash", pa.int64()), ("j_ok", pa.bool_()), ("j_key", pa.string()),
    ("j_name", pa.string()), ("j_description", pa.string()),
    ("j_aliases", pa.list_(pa.string()))])


def file_blocks(path: Path, block_bytes: int | None = None) -> Iterator[pa.LargeBinaryArray]:
    """The lines of a file without their ends, in blocks of whole lines of about
    ``block_bytes`` (a block ends after a ``\\n``, so a ``\\r\\n`` is never split); gzip read
    through (None: ``BLOCK_BYTES``)."""
    block_bytes = block_bytes or BLOCK_BYTES
    try:
        with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as file:
            carry = b""
            while data := file.read(block_bytes):
                data = carry + data
                cut = data.rfind(b"\n") + 1
                carry = data[cut:]
                if cut:
                    yield _lines(data[:cut])
            if carry:
                yield _lines(carry)
    except (OSError, EOFError, zlib.error) as exc:
        raise IngestError(f"ingest: cannot read {path}: {exc} (truncated or corrupt file?)"
                          ) from None


def _lines(data: bytes) -> pa.LargeBinaryArray:
    """``data``'s lines without their ends, as one array (no Python object per line)."""
    if data.endswith(b"\n") and b"\r" not in data:  # \n ends only: each line, then its \n
        ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
        offsets = np.concatenate([[0], ends + 1]).astype(np.int64)
        whole = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(ends), [
            None, pa.py_buffer(offsets), pa.py_buffer(data)])
        return pc.binary_slice(whole, 0, -1).cast(pa.large_binary())
    raw = np.frombuffer(data, np.uint8)
    cut = np.flatnonzero((raw == 10) | (raw == 13))  # every \r and \n ends a line or is dropped
    crlf = np.zeros(len(cut), bool)  # a \r directly before a \n: the \n ends the line
    crlf[:-1] = (raw[cut[:-1]] == 13) & (cut[1:] == cut[:-1] + 1) & (raw[cut[1:]] == 10)
    ends = np.flatnonzero(~crlf)
    ends = cut[ends] - ends  # where each line ends once the \r and \n bytes are removed
    keep = np.ones(len(raw), bool)
    keep[cut] = False
    kept = raw[keep]
    last = [len(kept)] if len(kept) > (ends[-1] if len(ends) else 0) else []
    offsets = np.concatenate([[0], ends, last]).astype(np.int64)
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(offsets) - 1,
                                            [None, pa.py_buffer(offsets), pa.py_buffer(kept)])


def decode(lines: pa.LargeBinaryArray) -> tuple[pa.Array, np.ndarray]:
    """The lines as text, a leading byte-order mark dropped, and which were valid UTF-8 (the
    others' bad bytes shown as U+FFFD)."""
    bad = _invalid_utf8(lines, 0)
    invalid = np.zeros(len(lines), bool)
    invalid[bad] = True
    if bad:
        fixed = [lines[i].as_py().decode("utf-8", "replace").encode() for i in bad]
        lines = pc.replace_with_mask(lines, pa.array(invalid), pa.array(fixed, pa.large_binary()))
    text = lines.cast(pa.large_string())
    bom = pc.starts_with(text, "\ufeff")
    if pc.any(bom).as_py():
        text = pc.if_else(bom, pc.utf8_slice_codeunits(text, 1), text)
    return text, ~invalid


def _invalid_utf8(lines: pa.Array, base: int) -> list[int]:
    """Indices (from ``base``) of the lines that are not UTF-8: halves of the array are cast
    until the bad lines are found, so valid text costs one cast."""
    try:
        lines.cast(pa.large_string())
        return []
    except pa.ArrowInvalid:
        pass
    if len(lines) <= 64:
        return [base + i for i, raw in enumerate(lines.to_pylist()) if not _is_utf8(raw)]
    half = len(lines) // 2
    return _invalid_utf8(lines[:half], base) + _invalid_utf8(lines[half:], base + half)


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def line_hashes(lines: pa.LargeBinaryArray) -> np.ndarray:
    """64-bit hash of each line's bytes (the line store's key)."""
    from pandas.util import hash_array

    if not len(lines):
        return np.zeros(0, np.int64)
    return hash_array(np.array(lines.to_pylist(), dtype=object)).view(np.int64)


def _record(value: str) -> tuple:
    """(ok, key, name, description, aliases) of an entities file's JSON line: ok when it is an
    object with a string key (its emptiness is the SQL's to judge)."""
    try:
        record = json.loads(value)
    except ValueError:
        return False, None, None, None, None
    if not isinstance(record, dict) or not isinstance(record.get("key"), str):
        return False, None, None, None, None
    aliases = record.get("aliases")
    aliases = [_text(a) for a in aliases] if isinstance(aliases, list) else None
    return (True, record["key"], _text(record.get("name")), _text(record.get("description")),
            aliases)


def _text(value) -> str | None:
    return value if value is None or isinstance(value, str) else json.dumps(value)


def _block(source: int, spec: fm.Source, file_idx: int, before: int,
           lines: pa.LargeBinaryArray) -> pa.Table:
    """One block of a file as rows of ``LINE_SCHEMA``."""
    n = len(lines)
    text, valid = decode(lines)
    hashes = pa.array(line_hashes(lines), pa.int64()) if spec.parser in fm.LINE_PARSERS \
        else pa.nulls(n, pa.int64())
    if spec.parser == "entities":
        records = [_record(v) if v.lstrip(" ").startswith("{") else (False,) + (None,) * 4
                   for v in text.to_pylist()]
        ok, key, name, description, aliases = (list(c) for c in zip(*records)) if records \
            else ([], [], [], [], [])
    else:
        ok = key = name = description = aliases = pa.nulls(n)
    return pa.table({
        "source": pa.array(np.full(n, source, np.int32)),
        "parser": pa.repeat(pa.scalar(spec.parser), n),
        "graph": pa.array(np.full(n, spec.graph, bool)),
        "file_idx": pa.array(np.full(n, file_idx, np.int32)),
        "line": pa.array(np.arange(before + 1, before + n + 1, dtype=np.int64)),
        "value": text.cast(pa.string()), "valid": pa.array(valid), "hash": hashes,
        "j_ok": ok, "j_key": key, "j_name": name, "j_description": description,
        "j_aliases": aliases}).cast(LINE_SCHEMA)


def write_lines(plan: fm.Plan, path: Path) -> int:
    """Every line of ``plan``'s files written at ``path`` (one Parquet file, ``LINE_SCHEMA``),
    block by block; returns how many lines."""
    total, file_idx = 0, 0
    with pq.ParquetWriter(str(path), LINE_SCHEMA, compression="lz4") as writer:
        writer.write_table(LINE_SCHEMA.empty_table())
        for source, spec in enumerate(plan.sources):
            for file in spec.files:
                before = 0
                for lines in file_blocks(file):
                    writer.write_table(_block(source, spec, file_idx, before, lines))
                    before += len(lines)
                total += before
                file_idx += 1
    return total

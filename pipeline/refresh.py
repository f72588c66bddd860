"""Incremental refresh: input fingerprints, and reuse of the previous build's
stage outputs from the store's refresh cache (``<store>/refresh/<build_id>/``, the staging
directory of the latest published build; ``runtime.contract.Store.keep_for_refresh``).

A stage rerun in a refresh whose output table holds the same rows as the cached build's
keeps the cached content hash for it (an **early cut-off**, ``same_rows``): its readers'
fingerprints then equal the cached ones, and they are reused.

A stage's **fingerprint** is what its outputs are a function of: the code of the build
packages, its config sections (with the content of any file a setting names) and the content
hash of every input artefact (the dump's files included). Its ``digest`` is the sha256 of that
record as canonical JSON. A refresh reuses a stage whose digest equals the cached record's,
and gives a ``partial`` stage the cached outputs (``previous:<artefact>`` inputs) when only
its input data changed (``common.stage.PREVIOUS``; ``pipeline.registry`` says how each
stage refreshes).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path

from lokg.pipeline.config import section
from lokg.runtime.contract import STAGING_DIR, sha256_file

FINGERPRINT_VERSION = 1
#: Packages whose code a stage's outputs depend on: any change there refreshes in full.
CODE_PACKAGES = ("pipeline", "spark_jobs", "training", "text", "common", "runtime")
#: Spark's part files carry a random job UUID in their names; content hashes ignore it.
_SPARK_PART = re.compile(r"^(part-\d+)-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}")
#: An input whose content cannot be hashed (the store itself): never equal, never reused.
UNHASHABLE = "unhashable"
#: Published tables of the deterministic stages, which a refresh must give row for row as a
#: full build of the same final dump does (tests/test_refresh_build.py, bench/refresh_scale.py);
#: the learned stages' (transe, gat and what reads them) are held to a quality tolerance.
DETERMINISTIC_TABLES = ("entities", "relations", "triples", "relation_map", "relation_stats",
                        "relation_pairs", "node_gain", "entity_ids")
#: Columns of those tables that follow a learned stage once it is warm-started: compared only
#: in a cold refresh. ``relation_pairs.source`` says whether TransE's neighbours also proposed
#: the pair, which follows the warm-started vectors.
LEARNED_COLUMNS = {"relation_pairs": ("source",)}
#: Rows of those tables that only a learned stage put there (column, value): a relation_pairs
#: row whose one source is TransE's neighbours exists only because the (warm-started) vectors
#: proposed it — on FB15k-237 with 1 % changed, 147 vs 175 such rows of 22,473.
LEARNED_ROWS = {"relation_pairs": ("source", "transe")}


def content_hash(path: str | os.PathLike) -> str:
    """sha256 of a file, or of a directory's files (relative names, Spark's part-file UUIDs
    left out, hidden files and ``_SUCCESS`` skipped) with their sha256s."""
    root = Path(path)
    if root.is_file():
        return _file_hash(root)
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = file.relative_to(root).as_posix()
        if file.name.startswith(".") or file.name == "_SUCCESS":
            continue
        name = _SPARK_PART.sub(r"\1", rel)
        digest.update(f"{name}\0{_file_hash(file)}\n".encode())
    return digest.hexdigest()


def _file_hash(path: Path) -> str:
    """sha256 of a file, hashed once per process while its size and mtime stay (the dump is
    an input of four stages)."""
    stat = path.stat()
    return _sha256_of(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=4096)
def _sha256_of(path: str, size: int, mtime_ns: int) -> str:
    return sha256_file(Path(path))


@lru_cache(maxsize=1)
def code_hash() -> str:
    """sha256 of the build packages' Python sources (names and contents)."""
    digest = hashlib.sha256()
    for package in CODE_PACKAGES:  # lokg.<package>'s folder, wherever the install put it
        folder = Path(find_spec(f"lokg.{package}").submodule_search_locations[0]).resolve()
        for file in sorted(folder.rglob("*.py")):
            name = file.relative_to(folder.parent).as_posix()
            digest.update(f"{name}\0{sha256_file(file)}\n".encode())
    return digest.hexdigest()


def config_hash(config: Mapping, sections: tuple[str, ...]) -> str:
    """sha256 of the named config sections over their defaults, with the content hash of
    every existing file or directory a setting names (an entities file, a question set)."""
    chosen = {name: section(config, name) for name in sections}
    named = {value: content_hash(value) for cfg in chosen.values() for value in cfg.values()
             if isinstance(value, str) and value and Path(value).exists()}
    return _digest({"sections": chosen, "files": named})


def fingerprint(config: Mapping, sections: tuple[str, ...], inputs: Mapping[str, str]) -> dict:
    """A stage's fingerprint: code, config and input hashes, and their ``digest``."""
    parts = {"version": FINGERPRINT_VERSION, "code": code_hash(),
             "config": config_hash(config, sections), "inputs": dict(sorted(inputs.items()))}
    return {**parts, "digest": _digest(parts)}


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def same_settings(one: Mapping, other: Mapping) -> bool:
    """Two fingerprints of the same code and config: only input data may differ."""
    return all(one.get(k) == other.get(k) for k in ("version", "code", "config"))


def same_rows(path: str | os.PathLike, other: str | os.PathLike) -> bool:
    """Whether two Parquet tables (a file, or a directory of part files) hold the same rows
    with the same schema, in any order and however split into files: equal row counts (file
    metadata), schemas and ``row_digest``s — one pass over each table, no sort. Anything that
    is not such a table (a model, a directory of tables) is never the same: no cut-off."""
    return table_difference(path, other) is None


def table_difference(path: str | os.PathLike, other: str | os.PathLike) -> str | None:
    """The first way two Parquet tables differ, None when they do not (:func:`same_rows`):
    "not a table" (either, :func:`parquet_parts`), "rows" (counts), "column types", "row
    digest", or "nullability" alone — the digest is compared first, so that a table written
    with other nullable fields but the same rows says so (bench/cluster_equality.py)."""
    import pyarrow.parquet as pq

    parts = [parquet_parts(Path(p)) for p in (path, other)]
    if not all(parts):
        return "not a table"
    if len({sum(pq.ParquetFile(f).metadata.num_rows for f in files) for files in parts}) > 1:
        return "rows"
    schemas = [pq.ParquetDataset(files).schema for files in parts]
    if [(f.name, f.type) for f in schemas[0]] != [(f.name, f.type) for f in schemas[1]]:
        return "column types"
    if row_digest(parts[0]) != row_digest(parts[1]):
        return "row digest"
    return None if schemas[0].equals(schemas[1], check_metadata=False) else "nullability"


def parquet_parts(path: Path) -> list[str]:
    """The Parquet files of a table written as one file or as a directory of part files;
    [] for anything else."""
    if path.is_file():
        return [str(path)] if path.suffix == ".parquet" else []
    files = [p for p in path.glob("*") if not p.name.startswith((".", "_"))] if path.is_dir() else []
    return sorted(map(str, files)) if files and all(p.suffix == ".parquet" and p.is_file()
                                                     for p in files) else []


def row_digest(files: list[str]) -> int:
    """Order-independent digest of a table's rows: the sum mod 2⁶⁴ of a 64-bit hash per row
    (a sum, not a xor, so a duplicated row counts), read one row group at a time. Equal
    multisets of rows give equal digests; unequal ones collide with odds of about 2⁻⁶⁴."""
    import numpy as np
    import pyarrow.parquet as pq

    total = 0
    for file in files:
        for batch in pq.ParquetFile(file).iter_batches(batch_size=1 << 20):
            row = np.zeros(batch.num_rows, np.uint64)
            for column in batch.columns:  # chained in column order: a row is a sequence
                row = _mix(row * np.uint64(_ODD) + _value_hashes(column))
            total = (total + int(np.add.reduce(_mix(row), dtype=np.uint64))) % (1 << 64)
    return total


_ODD = 0x9E3779B97F4A7C15  # 2⁶⁴ / golden ratio: an odd multiplier that spreads bits
_NULL = 0x5851F42D4C957F2D  # the hash of a null cell (of any type)


def _mix(values):
    """splitmix64's finaliser over uint64 values (wrapping arithmetic)."""
    import numpy as np

    z = np.asarray(values, np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _value_hashes(array):
    """A 64-bit hash of each cell of an Arrow array: numbers by their bits, strings through
    pandas' hash_array, lists by their elements' hashes and positions, structs by their
    fields' in order; a null cell hashes to ``_NULL``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from pandas.util import hash_array

    kind = array.type
    if pa.types.is_dictionary(kind):
        return _value_hashes(array.dictionary_decode())
    if pa.types.is_struct(kind):
        hashed = np.zeros(len(array), np.uint64)
        for field in array.flatten():
            hashed = _mix(hashed * np.uint64(_ODD) + _value_hashes(field))
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        offsets = array.offsets.to_numpy().astype(np.int64)
        offsets -= offsets[0]
        position = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1],
                                                                      np.diff(offsets))
        element = _mix(_value_hashes(array.flatten()) ^ _mix(position.astype(np.uint64)))
        summed = np.concatenate([[np.uint64(0)], np.cumsum(element, dtype=np.uint64)])
        hashed = _mix(summed[offsets[1:]] - summed[offsets[:-1]]
                      + np.diff(offsets).astype(np.uint64) * np.uint64(_ODD))
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind):
        hashed = hash_array(pc.fill_null(array, "").to_numpy(zero_copy_only=False)
                            ).astype(np.uint64)
    else:
        bits = pc.fill_null(array, False if pa.types.is_boolean(kind) else 0)
        if pa.types.is_floating(kind):
            bits = bits.cast(pa.float64()).to_numpy().view(np.uint64)
        else:
            bits = bits.cast(pa.int64()).to_numpy().view(np.uint64)
        hashed = _mix(bits)
    if array.null_count:
        hashed = np.where(pc.is_valid(array).to_numpy(zero_copy_only=False), hashed,
                          np.uint64(_NULL))
    return hashed


def link_tree(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> None:
    """Hard-link every file of ``src`` (but those named in ``skip``) under ``dst``, at the
    same relative paths, copying where a link cannot be made (another filesystem). Outputs
    are never written in place, so a link shared with the cache is safe."""
    for path in sorted(p for p in src.rglob("*") if p.name not in skip):
        target = dst / path.relative_to(src)
        if path.is_dir():  # empty directories too: an output may be one
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)


def staged_location(path: str, build_id: str) -> tuple[str, Path] | None:
    """(stage, path inside its directory) of an output recorded as
    ``.../staging/<build_id>/<stage>/<rel>``, wherever the store root was — the stage that
    recorded it, or an earlier one whose output it passes on —; None for any other path."""
    parts = Path(path).parts
    for i in range(len(parts) - 3):
        if parts[i:i + 2] == (STAGING_DIR, build_id):
            return parts[i + 2], Path(*parts[i + 3:])
    return None

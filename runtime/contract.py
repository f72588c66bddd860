"""The artefact store contract: layout, table schemas, manifest, atomic publish, verify, rollback.

Every writer (Spark jobs, training jobs, the publish task) and every reader (the runtime, the
CLI) imports this module; nothing about the store layout is repeated anywhere else.

Layout (DESIGN §3)::

    <store_root>/
      CURRENT                     the published build id, swapped with os.replace
      builds/<build_id>/          one complete build: manifest.json + tables + reports
      builds/.partial-<build_id>/ a build being assembled (never read, garbage-collected)
      staging/<build_id>/<stage>/ per-stage outputs of a build in progress
      refresh/<build_id>/<stage>/ the stage outputs of the latest published build, kept for
                                  the next build to refresh from (never read by the runtime)
      pins/<build_id>/<reader>    a process reading that build (runtime/pins.py)
      .publish.lock               flock held by the one publisher, rollback or retention run

A table is a Parquet dataset: either one file ``<name>.parquet`` or a directory of that name
holding ``*.parquet`` part files (as Spark writes them). The manifest records the sha256, size
and row count of every file, so any corruption is caught and named.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lokg.runtime import pins
from lokg.runtime.errors import LokgError

SCHEMA_VERSION = 1
KNOWN_SCHEMA_VERSIONS = frozenset({1})

CURRENT_FILE = "CURRENT"
MANIFEST_FILE = "manifest.json"
BUILDS_DIR = "builds"
STAGING_DIR = "staging"
REFRESH_DIR = "refresh"
PARTIAL_PREFIX = ".partial-"
LOCK_FILE = ".publish.lock"
#: Written into a build by retention before it deletes it: a reader that pins the build after
#: retention looked at the pins sees it and refuses the build instead of losing files mid-read.
DOOMED_FILE = ".doomed"
#: A build id: a file name that cannot be a path ("..", "/") or hidden; new_build_id's fit.
BUILD_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: How long a publish, rollback or retention run waits for another one to finish.
LOCK_TIMEOUT_S = 600.0

_ATTRIBUTE = pa.struct([("key", pa.string()), ("value", pa.string())])

#: Table name -> Arrow schema. Columns are required in this order; writers may not add others.
TABLE_SCHEMAS: dict[str, pa.Schema] = {
    "entities": pa.schema(
        [
            ("id", pa.int64()),
            ("key", pa.string()),  # the identifier in the source dump (mid, IRI local name, label)
            ("name", pa.string()),
            ("aliases", pa.list_(pa.string())),
            ("description", pa.string()),
            ("types", pa.list_(pa.string())),
            ("attributes", pa.list_(_ATTRIBUTE)),  # literal facts that are not names/aliases
        ]
    ),
    "relations": pa.schema([("id", pa.int64()), ("name", pa.string())]),
    # Distinct rows: ingest (every dump, document graph and feedback delta goes through it) and
    # scos_merge de-duplicate what they write; relation_stats counts rows and relies on it.
    "triples": pa.schema([("s", pa.int64()), ("r", pa.int64()), ("o", pa.int64())]),
    "quarantine": pa.schema(
        [
            ("file", pa.string()),
            ("line", pa.int64()),
            ("reason", pa.string()),
            ("text", pa.string()),
        ]
    ),
    # SCOS signals (spark_jobs/relation_stats.py, DESIGN §2.3). One row per relation of R0.
    "relation_stats": pa.schema(
        [
            ("r", pa.int64()),
            ("name", pa.string()),
            ("triples", pa.int64()),  # distinct (s, o) pairs
            ("heads", pa.int64()),  # distinct subjects
            ("tails", pa.int64()),  # distinct objects
            ("entities", pa.int64()),  # |heads ∪ tails|
            ("entropy", pa.float64()),  # tail conditional entropy H(r), nats
            (
                "type_pairs",  # P_r over (head type, tail type), sorted by (head_type, tail_type)
                pa.list_(
                    pa.struct(
                        [("head_type", pa.string()), ("tail_type", pa.string()), ("p", pa.float64())]
                    )
                ),
            ),
        ]
    ),
    # Candidate relation pairs with their signals (r_i < r_j).
    "relation_pairs": pa.schema(
        [
            ("r_i", pa.int64()),
            ("r_j", pa.int64()),
            ("shared_entities", pa.int64()),  # |E_i ∩ E_j|, exact
            ("jaccard", pa.float64()),
            ("nmi", pa.float64()),  # 1 − JSD_bits of the type-pair distributions
            ("source", pa.string()),  # generators, comma-separated: entity,transe,type
        ]
    ),
    # SCOS canonical mapping φ: R0 → R* (spark_jobs/scos_merge.py, DESIGN §2.5).
    "relation_map": pa.schema(
        [
            ("id", pa.int64()),  # original relation id (R0)
            ("name", pa.string()),
            ("canonical_id", pa.int64()),  # id in the rewritten relations table (R*)
            ("canonical_name", pa.string()),
        ]
    ),
    # One row per SCOS merge, in merge order.
    "merge_log": pa.schema(
        [
            ("step", pa.int64()),
            ("left", pa.string()),  # cluster names (most frequent member) before the merge
            ("right", pa.string()),
            ("sim", pa.float64()),
            ("nmi", pa.float64()),
            ("jaccard", pa.float64()),
            ("cos", pa.float64()),
            ("theta", pa.float64()),
            ("loss", pa.float64()),  # (1 − sim)·min(H_left, H_right), nats
            ("members", pa.list_(pa.string())),  # members of the merged cluster, sorted
        ]
    ),
    # TAIMR offline (DESIGN §2.6–§2.9).
    # μ(v) = (1 + ln(deg_in + 1))·div, div = in_relations / |R*| on the graph with inverse edges.
    "node_gain": pa.schema(
        [
            ("id", pa.int64()),
            ("deg_in", pa.int64()),  # incoming edges, inverse edges included
            ("in_relations", pa.int64()),  # distinct incoming (relation, direction) labels
            ("mu", pa.float64()),
        ]
    ),
    # Canonical triples plus their inverses (inverse = true: s/o swapped, relation r⁻¹), with the
    # GAT attention α(s→o|r), normalised over each node's out-edges (sums to 1 per s).
    "edges": pa.schema(
        [
            ("s", pa.int64()),
            ("r", pa.int64()),
            ("o", pa.int64()),
            ("inverse", pa.bool_()),
            ("attention", pa.float64()),
        ]
    ),
    # FAISS row → entity id for entity.faiss (and the rows of entity_vectors.npy).
    "entity_ids": pa.schema([("row", pa.int64()), ("id", pa.int64())]),
    # Top-K paths per (head, first relation) by S_topo; files bucket-NNNNN.parquet, head % buckets.
    "path_cache": pa.schema(
        [
            ("head", pa.int64()),
            ("rank", pa.int32()),  # 0-based rank within (head, first relation, direction)
            ("score", pa.float64()),  # S_topo
            ("relations", pa.list_(pa.int64())),  # canonical relation ids, hop by hop
            ("inverses", pa.list_(pa.bool_())),  # hop i walks r_i backwards
            ("nodes", pa.list_(pa.int64())),  # entities reached, hop by hop (last = answer)
        ]
    ),
    # Knowledge from documents (DESIGN §8); empty in builds from triple dumps. Ids are content
    # hashes (16 hex): doc_id of (title, text), chunk_id of (doc_id, start, text), sentence_id
    # of (doc_id, start, end); offsets are characters of the document's text, end exclusive.
    "documents": pa.schema([("doc_id", pa.string()), ("title", pa.string()),
                            ("source", pa.string()),  # file (and record) it was read from
                            ("chars", pa.int64())]),
    "chunks": pa.schema([("chunk_id", pa.string()), ("doc_id", pa.string()),
                         ("ordinal", pa.int32()), ("start", pa.int64()), ("end", pa.int64()),
                         ("tokens", pa.int32()), ("text", pa.string())]),
    "sentences": pa.schema([("sentence_id", pa.string()), ("doc_id", pa.string()),
                            ("chunk_id", pa.string()),  # the first chunk holding it
                            ("ordinal", pa.int32()), ("start", pa.int64()), ("end", pa.int64()),
                            ("text", pa.string())]),
    # Provenance: a canonical triple -> a chunk and sentence it was extracted from (many a triple).
    "triple_sources": pa.schema([("s", pa.int64()), ("r", pa.int64()), ("o", pa.int64()),
                                 ("chunk_id", pa.string()), ("sentence_id", pa.string())]),
    # Query-driven feedback (DESIGN §9): a canonical triple a feedback delta added -> the
    # delta, the feedback record it answers and its passage (many rows a triple).
    "feedback_lineage": pa.schema([("s", pa.int64()), ("r", pa.int64()), ("o", pa.int64()),
                                   ("delta_id", pa.string()), ("feedback_id", pa.string()),
                                   ("chunk_id", pa.string()), ("sentence_id", pa.string())]),
    # Context restoration: a triple's best candidate sentence above triple_context.floor.
    "triple_context": pa.schema([("s", pa.int64()), ("r", pa.int64()), ("o", pa.int64()),
                                 ("sentence_id", pa.string()), ("score", pa.float32()),
                                 ("text", pa.string())]),
}

#: Tables every build must contain.
REQUIRED_TABLES = ("entities", "relations", "triples")
#: An entity type written ``~<relation>`` was derived from the entity's most frequent incoming
#: relation (spark_jobs/entity_types.py), not read from a schema.
INCOMING_TYPE_PREFIX = "~"


class StoreError(LokgError):
    """A store, build or file violates the contract. The message names the offending path."""


# --------------------------------------------------------------------------------------------
# small helpers


def new_build_id(now: _dt.datetime | None = None) -> str:
    """Sortable, unique build id: UTC timestamp plus random suffix."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def check_build_id(build_id: str, where: str = "build id") -> str:
    """Refuse anything but a plain build id (a path would point CURRENT outside the store)."""
    if not isinstance(build_id, str) or not BUILD_ID_PATTERN.fullmatch(build_id):
        raise StoreError(f"{where}: {build_id!r} is not a build id (letters, digits, '.', '_', "
                         f"'-'; no path)")
    return build_id


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: str) -> None:
    """Write a small text file so that readers see the old or the new content, never a mix."""
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def table_files(path: Path) -> list[Path]:
    """The Parquet files of a table: the file itself, or the part files of a dataset directory."""
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(p for p in path.rglob("*.parquet") if p.is_file())
    raise StoreError(f"table path does not exist: {path}")


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


# --------------------------------------------------------------------------------------------
# manifest and builds


@dataclass(frozen=True)
class Build:
    """One complete, published-or-publishable build on disk."""

    root: Path
    build_id: str
    manifest: dict

    @property
    def path(self) -> Path:
        return self.root / BUILDS_DIR / self.build_id

    def table_path(self, table: str) -> Path:
        try:
            rel = self.manifest["tables"][table]["path"]
        except KeyError:
            raise StoreError(f"{self.path / MANIFEST_FILE}: build has no table '{table}'") from None
        return self.path / rel

    def read(self, table: str, columns: list[str] | None = None) -> pa.Table:
        return read_table(self.table_path(table), table, columns)

    def rows(self, table: str) -> int:
        return int(self.manifest["tables"][table]["rows"])


def _parquet_rows(path: Path) -> int:
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except Exception as exc:  # pyarrow raises several types for damaged files
        raise StoreError(f"{path}: not a readable Parquet file ({exc})") from exc


def describe_files(build_dir: Path) -> dict[str, dict]:
    """sha256, size and (for Parquet) row count of every file under a build, by relative path."""
    files: dict[str, dict] = {}
    for path in sorted(p for p in build_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(build_dir).as_posix()
        if rel == MANIFEST_FILE or path.name.startswith(".") or path.name == "_SUCCESS":
            continue
        entry = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
        if path.suffix == ".parquet":
            entry["rows"] = _parquet_rows(path)
        files[rel] = entry
    return files


def load_manifest(build_dir: Path) -> dict:
    path = build_dir / MANIFEST_FILE
    try:
        return parse_manifest(path.read_bytes(), path)
    except FileNotFoundError:
        raise StoreError(f"{path}: manifest missing — not a complete build") from None


def parse_manifest(data: bytes, path) -> dict:
    """A manifest's content, refused (naming ``path``) unless JSON of a known schema version."""
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreError(f"{path}: manifest is not valid JSON ({exc})") from None
    version = manifest.get("schema_version")
    if version not in KNOWN_SCHEMA_VERSIONS:
        raise StoreError(
            f"{path}: unknown schema version {version!r} "
            f"(this lokg reads {sorted(KNOWN_SCHEMA_VERSIONS)})"
        )
    return manifest


def verify_build(build: Build, *, checksums: bool = True) -> None:
    """Check every file the manifest lists (presence, size, sha256) and every table's schema.

    Raises StoreError naming the first offending file.
    """
    for rel, entry in sorted(build.manifest.get("files", {}).items()):
        path = build.path / rel
        if not path.is_file():
            raise StoreError(f"{path}: listed in the manifest but missing")
        if path.stat().st_size != entry["bytes"]:
            raise StoreError(
                f"{path}: size {path.stat().st_size} differs from manifest ({entry['bytes']})"
            )
        if checksums and sha256_file(path) != entry["sha256"]:
            raise StoreError(f"{path}: sha256 mismatch — file is corrupted or was modified")
    check_required_tables(build)
    for table, entry in build.manifest.get("tables", {}).items():
        if table in TABLE_SCHEMAS:
            first = table_files(build.path / entry["path"])
            if first:
                check_schema(table, pq.read_schema(first[0]), first[0])


def check_required_tables(build: Build) -> None:
    for table in REQUIRED_TABLES:
        if table not in build.manifest.get("tables", {}):
            raise StoreError(f"{build.path / MANIFEST_FILE}: required table '{table}' missing")


# --------------------------------------------------------------------------------------------
# the store


def is_url(root) -> bool:
    """A store root given as a URL (``s3://bucket/prefix``) rather than a local path."""
    return isinstance(root, str) and "://" in root


PublishHook = Callable[[str], None]


class Store:
    """A store root on the local filesystem.

    Writers of CURRENT and deleters of builds (publish, rollback, retention) hold one
    exclusive lock, so CURRENT only ever moves to a build that exists and nothing deletes a
    build another writer is about to make CURRENT; readers take no lock, they pin
    (:meth:`pin`). The lock is ``flock`` on :data:`LOCK_FILE`: reliable on a local disk,
    not on every network filesystem.
    """

    def __init__(self, root: str | os.PathLike):
        if is_url(root):  # Path("s3://b/p") would quietly be the local directory "s3:/b/p"
            raise StoreError(f"{root}: builds are assembled in a local store; publish there, "
                             "then `lokg store push LOCAL_STORE URL` (runtime/object_store.py)")
        self.root = Path(root)

    # -- paths
    @property
    def builds_dir(self) -> Path:
        return self.root / BUILDS_DIR

    def staging_dir(self, build_id: str) -> Path:
        return self.root / STAGING_DIR / check_build_id(build_id)

    def refresh_dir(self, build_id: str) -> Path:
        return self.root / REFRESH_DIR / check_build_id(build_id)

    def refresh_base(self) -> str | None:
        """The build whose stage outputs the refresh cache holds: CURRENT's when cached,
        else the newest cached one (a crash between caching and pruning leaves two), else
        None. What is reused from it is decided by fingerprints, so any cached build is safe."""
        cached = sorted(p.name for p in (self.root / REFRESH_DIR).glob("*")
                        if p.is_dir() and BUILD_ID_PATTERN.fullmatch(p.name))
        if not cached:
            return None
        current = self.current_id()
        return current if current in cached else cached[-1]

    def keep_for_refresh(self, build_id: str) -> Path:
        """Move a published build's staging directory into the refresh cache in one rename,
        then delete every other cached build. A retry after a crash finds the move done; a
        rerun of an already published and cached build drops its new staging."""
        cached = self.refresh_dir(build_id)
        staging = self.staging_dir(build_id)
        if staging.is_dir() and not cached.exists():
            cached.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staging, cached)
        elif staging.is_dir():  # the same build staged again: its cache is there already
            _delete_out_of_sight(staging)
        for other in cached.parent.iterdir():
            if other.name != build_id:
                _delete_out_of_sight(other)
        return cached

    # -- reading
    def current_id(self) -> str | None:
        path = self.root / CURRENT_FILE
        if not path.exists():
            return None
        try:
            build_id = path.read_text(encoding="utf-8").strip()
        except UnicodeDecodeError as exc:
            raise StoreError(f"{path}: CURRENT pointer is not UTF-8 text (byte "
                             f"{exc.object[exc.start]:#04x} at offset {exc.start}); it must "
                             "hold a build id") from None
        if not build_id:
            raise StoreError(f"{path}: empty CURRENT pointer")
        return check_build_id(build_id, str(path))

    def build_ids(self) -> list[str]:
        """Ids of complete builds (those with a manifest), oldest first."""
        if not self.builds_dir.is_dir():
            return []
        return sorted(
            p.name
            for p in self.builds_dir.iterdir()
            if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST_FILE).is_file()
        )

    def build(self, build_id: str | None = None, *, verify: bool = False) -> Build:
        """Open a build (default: the one CURRENT names). ``verify`` checks every checksum."""
        if not self.root.is_dir():
            raise StoreError(f"{self.root}: store root does not exist")
        if build_id is None:
            build_id = self.current_id()
            if build_id is None:
                raise StoreError(f"{self.root / CURRENT_FILE}: no published build in this store")
        path = self.builds_dir / check_build_id(build_id)
        if not path.is_dir() or (path / DOOMED_FILE).exists():
            raise StoreError(f"{path}: build '{build_id}' does not exist")
        build = Build(self.root, build_id, load_manifest(path))
        if verify:
            verify_build(build)
        return build

    def pin(self, build_id: str) -> Path | None:
        """Protect ``build_id`` from retention while this process reads it; release with
        ``pins.release``. Raises StoreError when retention is deleting the build already."""
        held = pins.pin(self.root, check_build_id(build_id))
        if (self.builds_dir / build_id / DOOMED_FILE).exists() \
                or not (self.builds_dir / build_id).is_dir():
            pins.release(held)
            raise StoreError(f"{self.builds_dir / build_id}: build '{build_id}' does not exist")
        return held

    # -- writing
    @contextmanager
    def locked(self, what: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        """Hold the store's writer lock for ``what``; waits up to ``timeout`` s, then refuses
        naming the holder. Only publish creates a store root; the others refuse a missing one."""
        if not self.root.is_dir():
            raise StoreError(f"{self.root}: store root does not exist")
        path = self.root / LOCK_FILE
        with open(path, "a+", encoding="utf-8") as fh:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        fh.seek(0)
                        raise StoreError(f"{path}: {what} refused: the store is locked by "
                                         f"{fh.read().strip() or 'another writer'} "
                                         f"for more than {timeout:.0f} s") from None
                    time.sleep(0.05)
            fh.seek(0)
            fh.truncate()
            fh.write(f"{what} (pid {os.getpid()} on {socket.gethostname()})\n")
            fh.flush()
            try:
                yield
            finally:
                fh.truncate(0)
                fcntl.flock(fh, fcntl.LOCK_UN)

    def publish(
        self,
        build_id: str,
        tables: Mapping[str, Path],
        *,
        extra_files: Mapping[str, Path] | None = None,
        info: Mapping | None = None,
        keep: int = 3,
        hook: PublishHook | None = None,
        expect_current: str | None | object = ...,
    ) -> Build:
        """Assemble a build from stage outputs and make it CURRENT, atomically.

        Steps, under the writer lock: copy into ``builds/.partial-<id>`` → write the manifest
        → rename to ``builds/<id>`` → swap CURRENT → retention. A crash before the CURRENT
        swap leaves the previous build published; ``hook(step)`` runs after each step (fault
        injection). A retry after a crash past the rename finds ``builds/<id>`` already there:
        when it verifies and holds exactly the same tables and files, the retry finishes the
        swap; anything else under that id is refused.

        Compare-and-swap: CURRENT must still be ``expect_current`` (default: what it was when
        this call began) once the lock is held — a publisher that waited while another one
        moved CURRENT is refused, naming both, instead of silently replacing its build.
        """
        hook = hook or (lambda step: None)
        check_build_id(build_id)
        check_keep(keep)
        expected = self.current_id() if expect_current is ... else expect_current
        missing = [t for t in REQUIRED_TABLES if t not in tables]
        if missing:
            raise StoreError(f"publish of {build_id}: required tables missing: {missing}")
        self.root.mkdir(parents=True, exist_ok=True)
        with self.locked(f"publish of {build_id}"):
            current = self.current_id()
            if current != expected:
                raise StoreError(f"publish of {build_id} refused: CURRENT moved from "
                                 f"{expected} to {current} while it waited for the store lock; "
                                 f"publish again to replace {current}")
            manifest = self._assemble(build_id, tables, extra_files, info, hook)
            _write_atomic(self.root / CURRENT_FILE, build_id + "\n")
            hook("current")
            self._retain(keep)
        return Build(self.root, build_id, manifest)

    def _assemble(self, build_id: str, tables: Mapping[str, Path],
                  extra_files: Mapping[str, Path] | None, info: Mapping | None,
                  hook: PublishHook) -> dict:
        """Copy a build into ``builds/<id>`` with its manifest; the manifest it ends with."""
        final = self.builds_dir / build_id
        partial = self.builds_dir / f"{PARTIAL_PREFIX}{build_id}"
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
        table_entries = {table: _copy_table(table, Path(src), partial)
                         for table, src in tables.items()}
        for rel, src in (extra_files or {}).items():
            _copy_tree_or_file(Path(src), partial / rel)
        hook("copied")

        manifest = {
            "schema_version": SCHEMA_VERSION,
            "build_id": build_id,
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "tables": table_entries,
            "files": describe_files(partial),
            **dict(info or {}),
        }
        _write_atomic(partial / MANIFEST_FILE, json.dumps(manifest, indent=2, sort_keys=True))
        hook("manifest")

        if final.exists():
            manifest = self._same_build(final, partial, manifest)
        else:
            os.rename(partial, final)
            _fsync_dir(self.builds_dir)
        hook("renamed")
        return manifest

    def _same_build(self, final: Path, partial: Path, manifest: dict) -> dict:
        """The manifest of published ``final`` if it is the build assembled in ``partial``.

        ``partial`` is deleted either way; a published build that fails verification or holds
        other content is refused, naming what differs.
        """
        try:
            published = self.build(final.name, verify=True).manifest
        except StoreError as exc:
            shutil.rmtree(partial)
            raise StoreError(f"{final}: build already published and it does not verify, "
                             f"refusing to publish over it ({exc})") from None
        shutil.rmtree(partial)
        for key in ("tables", "files"):
            if published[key] != manifest[key]:
                differ = sorted(k for k in {*published[key], *manifest[key]}
                                if published[key].get(k) != manifest[key].get(k))
                raise StoreError(f"{final}: build already published with different content "
                                 f"({key} differ: {', '.join(differ[:5])})")
        return published

    def rollback(self, build_id: str) -> Build:
        """Point CURRENT at an older complete build after verifying it (under the lock, so
        retention cannot delete it between the check and the swap)."""
        check_build_id(build_id)
        with self.locked(f"rollback to {build_id}"):
            build = self.build(build_id, verify=True)
            _write_atomic(self.root / CURRENT_FILE, build_id + "\n")
        return build

    def collect_garbage(self, keep: int = 3) -> list[str]:
        """Retention under the writer lock: see :meth:`_retain`."""
        check_keep(keep)
        with self.locked("retention"):
            return self._retain(keep)

    def _retain(self, keep: int) -> list[str]:
        """Delete complete builds beyond the newest ``keep`` previous ones, and stale partials.

        Never deleted: the CURRENT build and builds a live reader pins (runtime/pins.py) —
        those count towards ``keep`` and go at a later run once unpinned. The caller holds
        the lock.
        """
        current = self.current_id()
        others = [b for b in self.build_ids() if b != current]
        doomed = [b for b in others[: max(0, len(others) - keep)] if self._delete_unpinned(b)]
        if self.builds_dir.is_dir():
            for stale in self.builds_dir.glob(f"{PARTIAL_PREFIX}*"):
                shutil.rmtree(stale)
        return doomed

    def _delete_unpinned(self, build_id: str) -> bool:
        """Delete a build unless a reader pins it. The tombstone goes first and the pins are
        read after it, so a reader pinning concurrently either is seen here or sees the
        tombstone (:meth:`pin`)."""
        path = self.builds_dir / build_id
        (path / DOOMED_FILE).touch()
        if pins.live_pins(self.root, build_id):
            (path / DOOMED_FILE).unlink()
            return False
        gone = self.builds_dir / f"{PARTIAL_PREFIX}{build_id}.deleted-{secrets.token_hex(4)}"
        os.rename(path, gone)
        shutil.rmtree(gone)
        shutil.rmtree(pins.pins_dir(self.root, build_id), ignore_errors=True)
        return True

    def collect_staging(self, older_than_s: float, *, now: float | None = None) -> list[str]:
        """Delete the staging directories in which nothing changed for ``older_than_s`` seconds.

        Publish deletes its own build's staging; what is left belongs to killed, failed or
        abandoned runs (or a publish that died before its clean-up). Age is the newest mtime of
        anything inside, so a stage still writing keeps its build alive. Returns the build ids.
        """
        if not self.root.is_dir():
            raise StoreError(f"{self.root}: store root does not exist")
        staging = self.root / STAGING_DIR
        now = time.time() if now is None else now
        doomed = [d for d in sorted(staging.iterdir()) if d.is_dir()
                  and now - _newest_mtime(d) >= older_than_s] if staging.is_dir() else []
        for path in doomed:
            shutil.rmtree(path)
        return [d.name for d in doomed]


def _delete_out_of_sight(path: Path) -> None:
    """Rename a file or directory to a hidden name in one step, then delete it: a reader
    never sees half of it, and one left by a crash is hidden from the listings."""
    gone = path.with_name(f".{path.name.lstrip('.')}.deleted-{secrets.token_hex(4)}")
    os.rename(path, gone)
    if gone.is_dir():
        shutil.rmtree(gone)
    else:
        gone.unlink()


def _newest_mtime(root: Path) -> float:
    newest = root.lstat().st_mtime
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            try:
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
            except FileNotFoundError:  # removed meanwhile by the stage writing it
                pass
    return newest


def check_keep(keep) -> int:
    """Retention's ``keep``: a count of previous builds (negative would delete them all)."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise StoreError(f"publish.keep: {keep!r} must be an integer >= 0 (previous builds kept)")
    return keep


def _copy_table(table: str, src: Path, partial: Path) -> dict:
    """Copy one table into a build being assembled (schema checked); its manifest entry."""
    data_files = table_files(src)
    schema = pq.read_schema(data_files[0]) if data_files else None
    if table in TABLE_SCHEMAS and schema is not None:
        check_schema(table, schema, data_files[0])
    rel = f"{table}.parquet"
    _copy_tree_or_file(src, partial / rel)
    return {"path": rel, "rows": sum(_parquet_rows(f) for f in table_files(partial / rel))}


def _copy_tree_or_file(src: Path, dst: Path) -> None:
    """Copy a file or a Parquet dataset directory, skipping Spark's CRC and _SUCCESS markers."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(
            src, dst, ignore=shutil.ignore_patterns(".*", "_SUCCESS", "*.crc"), dirs_exist_ok=False
        )
    elif src.is_file():
        shutil.copy2(src, dst)
    else:
        raise StoreError(f"publish: stage output does not exist: {src}")

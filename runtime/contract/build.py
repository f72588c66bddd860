"""A build on disk: its manifest (the sha256, size and rows of every file) and its verification."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lokg.runtime.contract.files import check_schema, read_table, sha256_file, table_files
from lokg.runtime.contract.layout import (BUILDS_DIR, KNOWN_SCHEMA_VERSIONS, MANIFEST_FILE,
                                          StoreError)
from lokg.runtime.contract.schemas import REQUIRED_TABLES, TABLE_SCHEMAS

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


def parquet_rows(path: Path) -> int:
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except Exception as exc:  # pyarrow raises several types for damaged files
        raise StoreError(f"{path}: not a readable Parquet file ({exc})") from exc


def unlisted_by_design(rel: str) -> bool:
    """A file under a build its manifest does not list: the manifest itself, a writer's
    ``_SUCCESS`` marker and hidden files (checksums, ``.doomed``, a temporary) — but never a
    Parquet file, hidden or not: a table directory's reader takes every ``*.parquet`` in it."""
    name = rel.rsplit("/", 1)[-1]
    return rel == MANIFEST_FILE or name == "_SUCCESS" or (
        name.startswith(".") and not name.endswith(".parquet"))


def build_files(build_dir: Path) -> list[tuple[str, Path]]:
    """Every file under a build the manifest should list, by relative path, sorted."""
    paths = sorted(p for p in build_dir.rglob("*") if p.is_file())
    return [(rel, p) for rel, p in ((p.relative_to(build_dir).as_posix(), p) for p in paths)
            if not unlisted_by_design(rel)]


def describe_files(build_dir: Path) -> dict[str, dict]:
    """sha256, size and (for Parquet) row count of every file under a build, by relative path."""
    files: dict[str, dict] = {}
    for rel, path in build_files(build_dir):
        entry = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
        if path.suffix == ".parquet":
            entry["rows"] = parquet_rows(path)
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
    """Check every file the manifest lists (presence, size, sha256), that the build holds no
    other (a reader would take an extra table part in), and every table's schema.

    Raises StoreError naming the first offending file.
    """
    listed = build.manifest.get("files", {})
    for rel, path in build_files(build.path):
        if rel not in listed:
            raise StoreError(f"{path}: not listed in the manifest — an extra file in the build")
    for rel, entry in sorted(listed.items()):
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

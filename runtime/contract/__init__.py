"""The artefact store contract: layout, table schemas, manifest, atomic publish, verify, rollback.

Every writer (Spark jobs, training jobs, the publish task) and every reader (the runtime, the
CLI) imports this package; nothing about the store layout is repeated anywhere else. Its
modules, one topic each: ``layout`` (names, build ids, StoreError), ``schemas`` (the tables'
Arrow schemas), ``files`` (checksums, atomic writes, Parquet I/O), ``build`` (manifest and
verification), ``store`` (the local store: reading, publish, rollback, retention), ``lease``
(one build at a time).

Layout::

    <store_root>/
      CURRENT                     the published build id, swapped with os.replace
      builds/<build_id>/          one complete build: manifest.json + tables + reports
      builds/.partial-<build_id>/ a build being assembled (never read, garbage-collected)
      staging/<build_id>/<stage>/ per-stage outputs of a build in progress
      refresh/<build_id>/<stage>/ the stage outputs of the latest published build, kept for
                                  the next build to refresh from (never read by the runtime)
      pins/<build_id>/<reader>    a process reading that build (runtime/pins.py)
      .publish.lock               flock held by the one publisher, rollback or retention run
      .build.lease                the one build running on the store (lease.py)

A table is a Parquet dataset: either one file ``<name>.parquet`` or a directory of that name
holding ``*.parquet`` part files (as Spark writes them). The manifest records the sha256, size
and row count of every file, so any corruption is caught and named.
"""

from lokg.runtime.contract.build import (Build, check_required_tables, describe_files,
                                         load_manifest, parse_manifest, verify_build)
from lokg.runtime.contract.files import (check_schema, read_parquet, read_table, sha256_file,
                                         table_files, table_rows, to_numpy, write_atomic,
                                         write_table)
from lokg.runtime.contract.layout import (BUILD_ID_PATTERN, BUILD_LEASE_FILE, BUILDS_DIR,
                                          CURRENT_FILE, DOOMED_FILE, KNOWN_SCHEMA_VERSIONS,
                                          LOCK_FILE, LOCK_TIMEOUT_S, MANIFEST_FILE,
                                          PARTIAL_PREFIX, REFRESH_DIR, SCHEMA_VERSION,
                                          STAGING_DIR, StoreError, check_build_id, is_url,
                                          new_build_id)
from lokg.runtime.contract.lease import build_lease
from lokg.runtime.contract.schemas import INCOMING_TYPE_PREFIX, REQUIRED_TABLES, TABLE_SCHEMAS
from lokg.runtime.contract.store import PublishHook, Store, check_keep, stray_entries

__all__ = ["BUILD_ID_PATTERN", "BUILD_LEASE_FILE", "BUILDS_DIR", "CURRENT_FILE", "DOOMED_FILE",
           "INCOMING_TYPE_PREFIX", "KNOWN_SCHEMA_VERSIONS", "LOCK_FILE", "LOCK_TIMEOUT_S",
           "MANIFEST_FILE", "PARTIAL_PREFIX", "REFRESH_DIR", "REQUIRED_TABLES", "SCHEMA_VERSION",
           "STAGING_DIR", "TABLE_SCHEMAS", "Build", "PublishHook", "Store", "StoreError",
           "build_lease", "check_build_id", "check_keep", "check_required_tables",
           "check_schema", "describe_files", "is_url", "load_manifest", "new_build_id",
           "parse_manifest", "read_parquet", "read_table", "sha256_file", "stray_entries",
           "table_files", "table_rows", "to_numpy", "verify_build", "write_atomic", "write_table"]

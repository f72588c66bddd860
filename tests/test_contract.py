"""The store contract: publish is atomic, verify names corrupted files, rollback and retention."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from lokg.runtime import contract
from lokg.runtime.contract import Store, StoreError
from lokg.testing.stores import publish_stage_tables as _publish
from lokg.testing.stores import stage_tables as _stage_tables


def test_publish_writes_manifest_with_checksums_and_rows(tmp_path):
    store = Store(tmp_path / "store")
    build = _publish(store, tmp_path, "b1")
    assert store.current_id() == "b1"
    manifest = json.loads((build.path / "manifest.json").read_text())
    assert manifest["schema_version"] == contract.SCHEMA_VERSION
    assert manifest["tables"]["triples"] == {"path": "triples.parquet", "rows": 2}
    part = "triples.parquet/part-00000.parquet"
    assert manifest["files"][part]["sha256"] == contract.sha256_file(build.path / part)
    assert manifest["files"][part]["rows"] == 2
    assert store.build(verify=True).read("entities").num_rows == 3


@pytest.mark.parametrize("step", ["copied", "manifest", "renamed"])
def test_crash_during_publish_leaves_previous_build_current(tmp_path, step):
    store = Store(tmp_path / "store")
    _publish(store, tmp_path, "b1")

    def crash(at):
        if at == step:
            raise KeyboardInterrupt(f"injected crash after {at}")

    with pytest.raises(KeyboardInterrupt):
        _publish(store, tmp_path, "b2", hook=crash)
    assert store.current_id() == "b1"
    assert store.build(verify=True).build_id == "b1"
    # the next publish cleans up whatever the crash left behind
    _publish(store, tmp_path, "b3")
    assert store.current_id() == "b3"
    assert not list(store.builds_dir.glob(".partial-*"))


def test_crash_after_current_swap_publishes_the_complete_new_build(tmp_path):
    store = Store(tmp_path / "store")
    _publish(store, tmp_path, "b1")

    def crash(at):
        if at == "current":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _publish(store, tmp_path, "b2", hook=crash)
    assert store.build(verify=True).build_id == "b2"


def test_verify_names_the_corrupted_file(tmp_path):
    store = Store(tmp_path / "store")
    build = _publish(store, tmp_path, "b1")
    target = build.path / "entities.parquet"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"entities\.parquet: sha256 mismatch"):
        store.build(verify=True)


def test_missing_file_and_unknown_schema_version_are_refused(tmp_path):
    store = Store(tmp_path / "store")
    build = _publish(store, tmp_path, "b1")
    (build.path / "relations.parquet").unlink()
    with pytest.raises(StoreError, match=r"relations\.parquet: listed in the manifest but missing"):
        store.build(verify=True)

    build = _publish(store, tmp_path, "b2")
    manifest_path = build.path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["schema_version"] = 99
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(StoreError, match=r"manifest\.json: unknown schema version 99"):
        store.build()


def test_schema_mismatch_is_refused_at_publish(tmp_path):
    tables = _stage_tables(tmp_path / "stage")
    bad = tmp_path / "bad.parquet"
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"s": [0], "o": [1]}), bad)
    tables["triples"] = bad
    with pytest.raises(StoreError, match=r"bad\.parquet: table 'triples' has columns"):
        Store(tmp_path / "store").publish("b1", tables)


def test_rollback_and_retention(tmp_path):
    store = Store(tmp_path / "store")
    for i in range(1, 6):
        _publish(store, tmp_path, f"b{i}", keep=2)
    # CURRENT plus the two newest previous builds survive
    assert store.build_ids() == ["b3", "b4", "b5"]
    store.rollback("b3")
    assert store.current_id() == "b3"
    _publish(store, tmp_path, "b6", keep=1)
    assert store.build_ids() == ["b5", "b6"]  # b3 was CURRENT until b6; b5 is the newest previous
    with pytest.raises(StoreError, match="b1.*does not exist"):
        store.rollback("b1")


def test_rollback_refuses_a_corrupted_build(tmp_path):
    store = Store(tmp_path / "store")
    old = _publish(store, tmp_path, "b1")
    _publish(store, tmp_path, "b2")
    (old.path / "triples.parquet" / "part-00000.parquet").write_bytes(b"garbage")
    with pytest.raises(StoreError, match="part-00000.parquet"):
        store.rollback("b1")
    assert store.current_id() == "b2"


def test_empty_or_missing_store_is_a_clear_error(tmp_path):
    with pytest.raises(StoreError, match="store root does not exist"):
        Store(tmp_path / "nowhere").build()
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="no published build"):
        Store(tmp_path / "empty").build()


def test_build_ids_are_sortable_by_time():
    import datetime as dt

    early = contract.new_build_id(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    late = contract.new_build_id(dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc))
    assert early < late


@pytest.mark.parametrize("column", [
    pa.chunked_array([pa.array(np.arange(10, dtype=np.int64)).slice(3, 5),
                      pa.array(np.arange(3, dtype=np.int64))]),
    pa.array([True, False, True, True, False, False, True, False, True, True, False]).slice(3, 7),
    pa.chunked_array([pa.array([True] * 9).slice(1), pa.array([False, True])]),
    pa.array(np.linspace(0.0, 1.0, 7)).slice(2),
    pa.array(np.arange(5, dtype=np.int32)),
    pa.chunked_array([], type=pa.int64()),
])
def test_to_numpy_equals_pyarrows_conversion(column):
    got = contract.to_numpy(column)
    want = column.to_numpy() if isinstance(column, pa.ChunkedArray) else \
        column.to_numpy(zero_copy_only=False)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_to_numpy_refuses_nulls_and_non_numeric_columns():
    for column in (pa.array([1, None]), pa.array(["a"])):
        with pytest.raises(TypeError, match="null-free numeric"):
            contract.to_numpy(column)


def test_verify_refuses_a_file_the_manifest_does_not_list(tmp_path):
    """Issue 51 D1: an extra table part verified "ok" though the runtime reads every part of
    a table directory; verify, the runtime's open and rollback now refuse the build, naming it."""
    import shutil

    from click.testing import CliRunner

    from lokg.runtime.cli import cli
    from lokg.runtime.query import Runtime
    from lokg.testing.cli import assert_clean_error
    from lokg.testing.stores import make_store

    store = make_store(tmp_path)
    old = store.build()
    _publish(store, tmp_path, "b2")
    parts = old.path / "path_cache.parquet"
    extra = parts / "bucket-99999.parquet"
    shutil.copy(parts / "bucket-00000.parquet", extra)
    with pytest.raises(StoreError, match=r"bucket-99999\.parquet: not listed in the manifest"):
        store.rollback("toy")
    assert store.current_id() == "b2"
    with pytest.raises(StoreError, match=r"bucket-99999\.parquet: not listed"):
        Runtime.open(store.root, build_id="toy")
    extra.rename(parts / ".hidden.parquet")  # a hidden part is read all the same
    with pytest.raises(StoreError, match=r"\.hidden\.parquet: not listed in the manifest"):
        store.build("toy", verify=True)
    (parts / ".hidden.parquet").unlink()
    (parts / ".bucket-00000.parquet.crc").write_bytes(b"x")  # a writer's checksum: no part
    assert store.build("toy", verify=True).build_id == "toy"

    b2 = store.build()
    shutil.copy(b2.path / "triples.parquet" / "part-00000.parquet",
                b2.path / "triples.parquet" / "part-99999.parquet")
    result = CliRunner().invoke(cli, ["store", "verify", "--store", str(store.root)])
    assert_clean_error(result.output, result.exit_code, 1, "part-99999.parquet", "not listed")
    assert len(result.output.strip().splitlines()) == 1, result.output

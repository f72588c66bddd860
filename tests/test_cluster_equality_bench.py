"""bench/cluster_equality.py without Spark: a cached stage staged into a scratch store, and
the table comparison that decides whether a rerun gave the build's tables."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.cluster_equality import compared, markdown, masters, stage_from_cache, table_check
from lokg.pipeline.driver import STAGE_RECORD

BASE = "scale-100"


def write(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows if isinstance(rows, pa.Table) else pa.table(rows), path)


def cached_stage(cache, stage: str, outputs: dict[str, str], seconds: float = 3.0) -> dict:
    """A cached stage directory and its record, recorded paths under the old staging area."""
    record = {"stage": stage, "seconds": seconds, "report": {"path": "driver"},
              "fingerprint": {"config": "c1", "inputs": {"triples": "h1"}},
              "outputs": {a: f"/gone/store/staging/{BASE}/{rel}" for a, rel in outputs.items()}}
    (cache / stage).mkdir(parents=True, exist_ok=True)
    (cache / stage / STAGE_RECORD).write_text(json.dumps(record))
    return record


def test_a_cached_stage_is_linked_with_its_outputs_pointing_into_staging(tmp_path):
    cache, staging = tmp_path / "refresh" / BASE, tmp_path / "store" / "staging" / "rerun-0"
    write(cache / "scos_merge" / "relation_map.parquet", {"a": [1, 2]})
    cached_stage(cache, "scos_merge", {"relation_map": "scos_merge/relation_map.parquet",
                                       "triples": "ingest/triples.parquet"})
    stage_from_cache(cache, BASE, "scos_merge", staging)
    record = json.loads((staging / "scos_merge" / STAGE_RECORD).read_text())
    assert record["outputs"] == {
        "relation_map": str(staging / "scos_merge" / "relation_map.parquet"),
        "triples": str(staging / "ingest" / "triples.parquet")}  # passed on: the writer's place
    linked = staging / "scos_merge" / "relation_map.parquet"
    assert linked.stat().st_ino == (cache / "scos_merge" / "relation_map.parquet").stat().st_ino


def test_a_missing_cached_stage_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no finished 'path_cache' stage"):
        stage_from_cache(tmp_path / "refresh" / BASE, BASE, "path_cache", tmp_path / "staging")


def test_same_rows_in_another_order_and_split_are_identical(tmp_path):
    write(tmp_path / "ref.parquet", {"id": [1, 2, 3], "w": [0.5, 0.25, 1.0]})
    write(tmp_path / "run" / "part-0.parquet", {"id": [3], "w": [1.0]})
    write(tmp_path / "run" / "part-1.parquet", {"id": [2, 1], "w": [0.25, 0.5]})
    (tmp_path / "run" / "_SUCCESS").write_text("")
    check = table_check(tmp_path / "run", tmp_path / "ref.parquet")
    assert check == {"rows": 3, "reference_rows": 3, "equal": True, "differs_in": None}


@pytest.mark.parametrize("rows, reason", [
    ({"id": [1, 2], "w": [0.5, 0.25]}, "rows"),
    ({"id": [1, 2, 3], "w": [0.5, 0.25, 1.0 + 2 ** -52]}, "row digest"),  # one ulp
    ({"id": [1, 2, 3], "w": [1, 2, 3]}, "column types"),
    (pa.table({"id": [1, 2, 3], "w": [0.5, 0.25, 1.0]},
              pa.schema([pa.field("id", pa.int64(), nullable=False), ("w", pa.float64())])),
     "nullability"),
])
def test_a_different_table_says_how(tmp_path, rows, reason):
    write(tmp_path / "ref.parquet", {"id": [1, 2, 3], "w": [0.5, 0.25, 1.0]})
    write(tmp_path / "run.parquet", rows)
    check = table_check(tmp_path / "run.parquet", tmp_path / "ref.parquet")
    assert not check["equal"] and check["differs_in"] == reason


def test_a_rerun_row_compares_every_table_with_the_cached_one(tmp_path):
    cache = tmp_path / "refresh" / BASE
    write(cache / "node_gain" / "node_gain.parquet", {"e": [1, 2], "mu": [0.1, 0.2]})
    reference = cached_stage(cache, "node_gain", {"node_gain": "node_gain/node_gain.parquet"})
    write(tmp_path / "run" / "node_gain.parquet", {"e": [2, 1], "mu": [0.2, 0.1]})
    record = {"seconds": 9.5, "report": {"path": "spark"},
              "fingerprint": {"config": "c2", "inputs": {"triples": "h1"}},
              "outputs": {"node_gain": str(tmp_path / "run" / "node_gain.parquet"),
                          "model": str(tmp_path / "run" / "model.json")}}
    row = compared("node_gain", record, reference, cache, BASE) | {"master": "spark://x:1",
                                                                    "paths": "spark"}
    assert (row["path"], row["reference_path"]) == ("spark", "driver")
    assert (row["same_config"], row["same_input_bytes"]) == (False, True)
    assert list(row["tables"]) == ["node_gain"] and row["tables"]["node_gain"]["equal"]
    assert "| node_gain | spark://x:1 (spark) | spark (driver) | node_gain | 2 | yes |  | " \
        "9.5 (3.0) |" in markdown([row])
    row["first"] = {"node_gain": {**row["tables"]["node_gain"], "equal": False,
                                  "differs_in": "row digest"}}
    assert "| 2 | yes | **no** (row digest) | 9.5 (3.0) |" in markdown([row])


def test_each_rerun_names_its_master_and_paths():
    assert masters("local[2]=product,cluster", "spark") == [("local[2]", "product"),
                                                            ("cluster", "spark")]
    with pytest.raises(SystemExit, match="paths must be one of"):
        masters("cluster=driver", "spark")


@pytest.mark.parametrize("stage, report, path", [
    ("ingest", {"engine": "spark", "refresh": {"ingest": "full"}}, "spark"),
    ("relation_stats", {"engine": "duckdb"}, "duckdb"),
    ("scos_merge", {"rewrite": "driver"}, "driver"),
    ("path_cache", {"engine": "spark"}, "spark"),
])
def test_the_row_names_where_each_stage_ran(stage, report, path):
    from bench.cluster_equality import stage_path

    assert stage_path(stage, report) == path

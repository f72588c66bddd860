"""spark_jobs/engine.py: one SQL text, DuckDB or Spark SQL, the same rows; the engine resolved
once from the config and the dump's size."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lokg.common.stage import StageError
from lokg.spark_jobs.engine import open_engine, resolve, spark_sql, with_engine

TRIPLES = pa.table({"s": [1, 1, 1, 2, 3], "r": [0, 1, 1, 0, 0], "o": [2, 3, 4, 3, 1]})
NAMES = pa.table({"r": pa.array([0, 1], pa.int64()), "name": ["b", "a"]})


@pytest.fixture
def triples_file(tmp_path):
    path = tmp_path / "triples.parquet"
    pq.write_table(TRIPLES, path)
    return path


@pytest.mark.parametrize("name, size, expected", [
    ("auto", 10, "duckdb"), ("auto", 3_000, "spark"), ("duckdb", 3_000, "duckdb"),
    ("spark", 10, "spark")])
def test_the_engine_is_resolved_from_the_name_and_the_dumps_size(tmp_path, name, size, expected):
    dump = tmp_path / "dump.tsv"
    dump.write_bytes(b"x" * size)
    config = {"engine": {"name": name, "spark_above_gb": 1e-6}}  # 1 kB
    assert resolve(config, dump) == expected
    resolved = with_engine(config, dump)
    assert resolved["engine"]["name"] == expected and config["engine"]["name"] == name


def test_an_unresolved_engine_is_refused_in_one_line():
    with pytest.raises(StageError, match="engine.name: 'auto' is not resolved"):
        with open_engine({"engine": {"name": "auto"}}):
            pass


def test_duckdb_sql_is_written_in_spark_sqls_dialect():
    assert "MIN_BY" in spark_sql("SELECT arg_min(a, b) FROM t")
    assert "ROW_NUMBER" in spark_sql("SELECT a FROM t QUALIFY row_number() OVER (ORDER BY a) = 1")


def test_one_sql_text_gives_the_same_rows_on_either_engine(engine_config, triples_file, tmp_path):
    with open_engine(engine_config, tmp_path) as engine:
        engine.register("triples", triples_file)
        engine.register_arrow("names", NAMES)
        engine.function("marked", lambda x: "~" + x, ["VARCHAR"], "VARCHAR")
        engine.view("counts", "SELECT s, name, count(*) AS n FROM triples JOIN names USING (r) "
                              "GROUP BY s, name", materialise=True)
        best = engine.fetch("SELECT s, arg_min(marked(name), (-n, name)) AS frequent, "
                            "list_sort(list(name)) AS names FROM counts GROUP BY s ORDER BY s")
        engine.write("SELECT s, o FROM triples QUALIFY row_number() OVER "
                     "(PARTITION BY s ORDER BY o DESC) = 1", tmp_path / "out", order_by=["s"])
    assert best.to_pylist() == [{"s": 1, "frequent": "~a", "names": ["a", "b"]},
                                {"s": 2, "frequent": "~b", "names": ["b"]},
                                {"s": 3, "frequent": "~b", "names": ["b"]}]
    written = pq.read_table(tmp_path / "out")
    assert written.to_pydict() == {"s": [1, 2, 3], "o": [4, 3, 1]}


def test_an_ordered_sum_has_the_same_bits_in_any_row_order(engine_config, tmp_path):
    """``ordered_sum`` adds a group's values in ascending order, nulls skipped: rows written in
    another order give the same bits, where a plain float sum may not; an all-null group is 0."""
    from lokg.spark_jobs.engine import ordered_sum

    values = [0.1, 1e16, -1e16, 0.2, 0.3, 1e-3, 7.0, None]
    rows = [(g, v) for g in range(3) for v in values] + [(3, None)]
    with open_engine(engine_config, tmp_path) as engine:
        for name, order in (("forward", rows), ("backward", rows[::-1])):
            engine.register_arrow(name, pa.table({"g": pa.array([g for g, _ in order], pa.int64()),
                                                  "v": pa.array([v for _, v in order], pa.float64())}))
        sums = [engine.fetch(f"SELECT g, {ordered_sum('v')} AS s FROM {name} GROUP BY g ORDER BY g")
                .column("s").to_pylist() for name in ("forward", "backward")]
    ascending = 0.0
    for v in sorted(v for v in values if v is not None):
        ascending += v
    assert sums[0] == sums[1] == [ascending] * 3 + [0.0]


def test_a_declared_schema_is_written_nullability_included(engine_config, triples_file, tmp_path):
    """``write(schema=)``: the files carry the declared schema (a not-null field from a
    ``coalesce``, nullable ones as declared), rows in the asked order, on either engine."""
    schema = pa.schema([pa.field("s", pa.int64()), pa.field("n", pa.int64(), nullable=False),
                        pa.field("names", pa.list_(pa.string()), nullable=False)])
    with open_engine(engine_config, tmp_path) as engine:
        engine.register("triples", triples_file)
        engine.register_arrow("names", NAMES)
        engine.write("SELECT t.s, coalesce(max(names.r), CAST(-1 AS BIGINT)) AS n, "
                     "coalesce(list_sort(list(names.name) FILTER (WHERE names.name IS NOT NULL)), "
                     "CAST([] AS VARCHAR[])) AS names "
                     "FROM triples t LEFT JOIN names ON t.o = names.r GROUP BY t.s",
                     tmp_path / "out", order_by=["s"], schema=schema)
    written = pq.ParquetDataset(tmp_path / "out")
    assert written.schema.equals(schema)
    assert written.read().to_pylist() == [{"s": 1, "n": -1, "names": []},
                                          {"s": 2, "n": -1, "names": []},
                                          {"s": 3, "n": 1, "names": ["a"]}]

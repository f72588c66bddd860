"""bench/duckdb_reference.py's ``--paths``: ``spark`` puts every relational stage on Spark SQL,
``product`` leaves the engine to the build's resolution (what a build of that size runs), and
the table names the engine each step took. No Spark, no DuckDB: the config and the table only."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.common import SPARK_PATHS, bench_config
from bench.duckdb_reference import step_paths, table
from lokg.pipeline.config import load_config

REPO = Path(__file__).resolve().parents[1]
ARGS = SimpleNamespace(driver_memory="1g", extra=[])


def test_spark_paths_put_the_stages_on_spark_sql():
    assert SPARK_PATHS == ("engine.name=spark",)
    assert bench_config(ARGS, "spark")["engine"]["name"] == "spark"


def test_product_paths_keep_the_default_engine():
    assert bench_config(ARGS, "product")["engine"] == load_config(None, [])["engine"]


def test_an_unknown_paths_value_is_refused():
    with pytest.raises(ValueError, match="paths must be one of"):
        bench_config(ARGS, "driver")


def test_the_table_names_the_path_each_step_took():
    reports = {"ingest": {"engine": "spark", "refresh": {"ingest": "full"}},
               "entity_types": {"engine": "duckdb"}, "relation_stats": {"engine": "duckdb"}}
    spread = {"median": 2.0, "min": 1.0, "max": 3.0}
    row = {"rounds": 3, "triples": 10, "step_paths": step_paths(reports),
           "spark_startup_seconds": 9.0, "ratios": {"ingest": 2.0, "relation_stats": 0.5},
           "seconds": {k: spread for k in ("lokg_ingest", "lokg_relation_stats",
                                           "lokg_entity_types", "duckdb_ingest",
                                           "duckdb_relation_stats")}}
    lines = table(row).splitlines()
    assert "3 rounds" in lines[0]
    assert "| ingest (spark) | 2.0 (1.0–3.0) |" in lines[2]
    assert "| relation_stats (duckdb) |" in lines[3]
    assert "entity_types (duckdb;" in lines[4]


@pytest.mark.parametrize("stage, name", [("ingest", "fm"), ("ingest", "sql"),
                                         ("ingest", "tables")])
def test_a_baseline_runs_its_own_helpers(tmp_path, stage, name):
    """--baseline measures the older tree's code, the helpers a stage spends its time in too."""
    from bench.common import BASELINE_HELPERS, load_baseline

    (tmp_path / "spark_jobs").mkdir()
    for module in (stage, *BASELINE_HELPERS[stage]):
        text = (REPO / "spark_jobs" / f"{module}.py").read_text()
        (tmp_path / "spark_jobs" / f"{module}.py").write_text(text + "\nBASELINE_MARK = 1\n")
    bound = getattr(load_baseline(tmp_path, stage), name)
    marked = bound if name in ("fm", "sql", "tables") else __import__(bound.__module__,
                                                                        fromlist=["x"])
    assert marked.BASELINE_MARK == 1


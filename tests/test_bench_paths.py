"""The benches' ``--paths`` (``bench.common.bench_config``): ``spark`` puts every relational
stage on Spark SQL, ``product`` leaves the engine to the build's resolution (what a build of
that size runs); and ``--baseline`` loads an older tree's helpers. No Spark, no DuckDB: the
config only."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.common import SPARK_PATHS, bench_config
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


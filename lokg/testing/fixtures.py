"""The shared pytest fixtures, registered by tests/conftest.py (``pytest_plugins``): one local
Spark session per run, the optional shared data, a scripted LLM server, and the toy stores
more than one test module reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from lokg.testing import SHARED_DATA

# One profile for every property test: bounded examples, no wall-clock deadline on shared cores.
settings.register_profile(
    "lokg", max_examples=200, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("lokg")


@pytest.fixture(scope="session")
def spark():
    """A local[2] Spark session shared by every Spark test (start-up costs ~8 s)."""
    pytest.importorskip("pyspark")
    from lokg.spark_jobs.session import get_spark

    session = get_spark({"spark": {"master": "local[2]", "shuffle_partitions": 4,
                                   "driver_memory": "2g"}}, app_name="lokg-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(params=("duckdb", "spark"))
def engine_config(request) -> dict:
    """A build config resolved to each SQL engine in turn (spark_jobs/engine.py): a stage test
    taking it checks the stage's one SQL definition on both engines."""
    if request.param == "spark":
        request.getfixturevalue("spark")  # the shared session, which SparkEngine then uses
    return {"engine": {"name": request.param}}


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data, or skip the test when this checkout has none."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared benchmark data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def server():
    """A scripted OpenAI-compatible HTTP server on loopback (lokg.testing.http_fakes)."""
    from lokg.testing.http_fakes import FakeServer

    srv = FakeServer()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def gap_store(tmp_path_factory):
    """The toy family graph (lokg.testing.family) with fabio quist's profession deleted:
    "what is the job of edda quist 's wife ?" walks spouse (edda → fabio), then stops."""
    from lokg.testing.family import REL, family_triples, fitted_store

    fabio = 5
    triples = [t for t in family_triples() if t[:2] != (fabio, REL["profession"])]
    return fitted_store(tmp_path_factory.mktemp("gap"), triples)[0]


@pytest.fixture(scope="module")
def graph_inputs(spark, tmp_path_factory):
    """The inputs path_cache gets in a build, on a synthetic dump (lokg.testing.stages)."""
    from lokg.testing.stages import path_cache_inputs

    return path_cache_inputs(tmp_path_factory.mktemp("path_cache"))

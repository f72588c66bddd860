"""Shared fixtures: one local Spark session per test run, paths to the optional shared data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# One profile for every property test: bounded examples, no wall-clock deadline on shared cores.
settings.register_profile(
    "lokg", max_examples=200, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("lokg")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("LOKG_SHARED_DATA", REPO.parent / "shared" / "data"))


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


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data, or skip the test when this checkout has none."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared benchmark data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def server():
    """A scripted OpenAI-compatible HTTP server on loopback (tests/helpers.py FakeServer)."""
    from tests.helpers import FakeServer

    srv = FakeServer()
    yield srv
    srv.close()

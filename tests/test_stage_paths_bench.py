"""bench/stage_paths.py: each stage's Spark and driver settings."""

from __future__ import annotations

from bench import stage_paths
from lokg.pipeline.config import DEFAULTS


def test_the_driver_run_keeps_the_driver_path_above_the_default_thresholds():
    # a 10⁶-triple dump's path_cache has ≈ 1.8·10⁶ edges: above the default, so the
    # defaults alone would have measured Spark twice
    assert DEFAULTS["path_cache"]["driver_max_edges"] < 1_800_000
    paths = stage_paths.path_settings("path_cache")
    assert paths["spark"] == {"driver_max_edges": 0}
    assert paths["driver"]["driver_max_edges"] >= 10**9

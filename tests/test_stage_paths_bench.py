"""bench/stage_paths.py: each stage's Spark and driver settings."""

from __future__ import annotations

from bench import stage_paths


def test_the_driver_run_keeps_the_driver_path_above_the_default_thresholds():
    assert set(stage_paths.STAGES) == {"relation_stats"}
    assert stage_paths.path_settings("relation_stats") == {
        "spark": {"driver_max_triples": 0},
        "driver": {"driver_max_triples": stage_paths.DRIVER_ALWAYS}}

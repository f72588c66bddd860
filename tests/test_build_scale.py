"""bench/build_scale.py: the growth exponent is the log-log slope, the extrapolation follows it,
a stage's own seconds come from its JSON line, and a process tree's memory is measured."""

from __future__ import annotations

import json
import sys

import pytest

from bench import build_scale as bs


@pytest.mark.parametrize("power", [1.0, 1.5, 0.5])
def test_exponent_is_the_log_log_slope(power):
    sizes = [10**4, 10**5, 10**6]
    assert bs.exponent(sizes, [3.0 * n**power for n in sizes]) == pytest.approx(power)


def test_exponent_needs_two_positive_points():
    assert bs.exponent([10, 100], [5.0, 0.0]) is None


def test_growth_extrapolates_along_the_exponent_and_memory_per_triple():
    runs = {n: [{"stage": "ingest", "wall_s": n / 100.0, "peak_mib": n / 1000.0, "stage_s": None}]
            for n in (1000, 10000)}
    (row,) = bs.growth(runs, estimate=100000)
    assert row["exponent"] == pytest.approx(1.0)
    assert row["estimate_s"] == pytest.approx(1000.0)
    assert row["estimate_mib"] == pytest.approx(100.0)
    table = bs.markdown(runs, [row], 100000)
    assert "| ingest | 10.0 / 1 | 100.0 / 10 | 1.00 | 1,000 / 100 |" in table


def test_stage_seconds_reads_the_last_json_line(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("progress …\n" + json.dumps({"stage": "gat", "seconds": 12.5}) + "\n")
    assert bs.stage_seconds(log) == 12.5
    log.write_text("no record\n")
    assert bs.stage_seconds(log) is None


def test_run_measured_counts_a_child_process_and_fails_loudly(tmp_path):
    grow = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
            "'b = bytearray(200 * 2**20); import time; time.sleep(1.0)'])")
    row = bs.run_measured([sys.executable, "-c", grow], tmp_path / "ok.log")
    assert row["peak_mib"] >= 200  # the grandchild's 200 MiB is in the tree's peak
    with pytest.raises(SystemExit, match="failed"):
        bs.run_measured([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "bad.log")

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


def test_run_measured_counts_a_grandchilds_cpu(tmp_path):
    """A Spark stage's JVM is a grandchild its parent does not reap: its CPU must still count."""
    spin = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
            "'import time\\nend = time.process_time() + 1.0\\nwhile time.process_time() < end: pass'])")
    row = bs.run_measured([sys.executable, "-c", spin], tmp_path / "cpu.log")
    assert 0.8 <= row["cpu_s"] <= row["wall_s"] + 0.5
    assert len(row["load"]) == 2


def test_stage_meter_charges_samples_to_the_stage_the_log_announced():
    import psutil

    meter, me = bs.StageMeter(), psutil.Process()
    meter.sample(me)  # before any stage line: "start" (imports)
    for line in ("[1/2] ingest …", "[1/2] ingest done in 1.5s", "[2/2] gat …"):
        meter.line(line)
    meter.sample(me)
    meter.line("[2/2] gat done in 2.5s")  # the last stage: publish runs from here
    meter.line("published build x")
    rows = meter.finish()
    assert [r["stage"] for r in rows] == ["start", "ingest", "gat", "publish"]
    assert [r["stage_s"] for r in rows] == [None, 1.5, 2.5, None]
    assert rows[1]["peak_mib"] == 0 < rows[0]["peak_mib"] and rows[2]["peak_mib"] > 0
    assert all(r["wall_s"] >= 0 and len(r["load"]) == 2 for r in rows)


def test_dump_markdown_totals_wall_and_cpu_and_shares():
    rows = [{"stage": "ingest", "wall_s": 30.0, "stage_s": 28.0, "cpu_s": 40.0, "peak_mib": 900.0,
             "load": [1.0, 2.0]},
            {"stage": "publish", "wall_s": 10.0, "stage_s": None, "cpu_s": 5.0, "peak_mib": 100.0,
             "load": [2.0, 2.0]}]
    table = bs.dump_markdown(rows)
    assert "| ingest | 30.0 | 28.0 | 40.0 | 900 | 75.0 % | 1.00 → 2.00 |" in table
    assert "| publish | 10.0 | — | 5.0 | 100 | 25.0 % |" in table
    assert "| **total** | **40.0** | | **45.0** | 900 (max) |" in table

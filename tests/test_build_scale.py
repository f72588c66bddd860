"""bench/build_scale.py: the growth exponent is the log-log slope, the extrapolation follows it
(wall and CPU each their own), saved runs give the same tables without a build,
a stage's own seconds come from its JSON line, and a process tree's memory is measured."""

from __future__ import annotations

import json
import sys

import pytest

from bench import build_scale as bs
from bench import common


@pytest.mark.parametrize("power", [1.0, 1.5, 0.5])
def test_exponent_is_the_log_log_slope(power):
    sizes = [10**4, 10**5, 10**6]
    assert bs.exponent(sizes, [3.0 * n**power for n in sizes]) == pytest.approx(power)


def test_exponent_needs_two_positive_points():
    assert bs.exponent([10, 100], [5.0, 0.0]) is None


def _runs(stages: dict[str, tuple[float, float, float]], sizes=(1000, 10000)) -> dict:
    """Rows of runs at ``sizes`` where each stage's wall, CPU and MiB grow as n ** power."""
    return {n: [{"stage": stage, "wall_s": wall * n**w_pow, "cpu_s": 2 * wall * n**c_pow,
                 "peak_mib": n / 1000.0, "stage_s": None}
                for stage, (wall, w_pow, c_pow) in stages.items()] for n in sizes}


def test_growth_extrapolates_wall_and_cpu_along_their_own_exponents():
    runs = _runs({"ingest": (0.01, 1.0, 1.5)})
    (row,) = bs.growth(runs, estimate=100000)
    assert row["exponent_wall_s"] == pytest.approx(1.0)
    assert row["exponent_cpu_s"] == pytest.approx(1.5)
    assert row["estimate_wall_s"] == pytest.approx(0.01 * 100000)
    assert row["estimate_cpu_s"] == pytest.approx(0.02 * 100000**1.5)
    assert row["estimate_mib"] == pytest.approx(100.0)
    assert row["bytes_per_triple"] == pytest.approx(10 * 2**20 / 10000)


def test_estimate_grows_at_least_linearly():
    """A sub-linear exponent (fixed costs) is measured and shown, but not extrapolated."""
    (row,) = bs.growth(_runs({"ingest": (0.01, 0.5, 0.5)}), estimate=100000)
    assert row["exponent_wall_s"] == pytest.approx(0.5)
    assert row["estimate_wall_s"] == pytest.approx(0.01 * 10000**0.5 * 10)


def test_memory_estimate_charges_only_what_a_triple_adds():
    """A fixed 500 MiB (the JVM's heap) is not multiplied by the size: only the slope is."""
    runs = _runs({"ingest": (0.01, 1.0, 1.0)})
    for n, (row,) in runs.items():
        row["peak_mib"] += 500.0
    (row,) = bs.growth(runs, estimate=100000)
    assert row["bytes_per_triple"] == pytest.approx(2**20 / 1000)
    assert row["estimate_mib"] == pytest.approx(510.0 + 90.0)
    assert bs.memory_per_triple([1000], [5.0]) == pytest.approx(0.005)  # one size: peak / n
    assert bs.memory_per_triple([1000, 10000], [900.0, 600.0]) == 0.0  # the heap kept less


def test_growth_skips_a_stage_missing_at_a_size():
    runs = _runs({"ingest": (0.01, 1.0, 1.0)})
    runs[10000].append({"stage": "gat", "wall_s": 5.0, "cpu_s": 5.0, "peak_mib": 1.0,
                        "stage_s": None})
    gat = next(g for g in bs.growth(runs, estimate=100000) if g["stage"] == "gat")
    assert gat["exponent_wall_s"] is None and "estimate_wall_s" not in gat
    assert "| gat | — | 5.0 / 5.0 / 1 |" in bs.markdown(runs, bs.growth(runs, 100000), 100000)


def test_markdown_shows_each_size_and_the_labelled_estimate():
    runs = _runs({"ingest": (0.01, 1.0, 1.0), "gat": (1e-6, 2.0, 2.0)})
    table = bs.markdown(runs, bs.growth(runs, 100000), 100000)
    assert "| ingest | 10.0 / 20.0 / 1 | 100.0 / 200.0 / 10 |" in table
    assert "estimate at 100,000: wall s / CPU s / MiB" in table
    assert "| gat | 2.00 | 2.00 | 1,049 | 10,000 / 20,000 / 100 |" in table
    assert "| **200.0** / **400.0** / 10 (max) |" in table  # the total at 10⁴ triples
    assert "| **total** | 1.26 | 1.26 | | 11,000 / 22,000 / 100 (max) |" in table


def test_from_json_rebuilds_the_tables_without_a_build(tmp_path, capsys):
    saved = tmp_path / "runs.jsonl"
    rows = [{"triples": n, **r} for n, rs in _runs({"ingest": (0.01, 1.0, 1.0)}).items()
            for r in rs]
    stale = {**rows[0], "wall_s": 999.0}  # an earlier run of the same size: the later wins
    saved.write_text("\n".join(json.dumps(r) for r in [stale, *rows, {"dump": "fb"}]) + "\n")
    bs.main(["--from-json", str(saved), "--estimate", "1e5", "--markdown", str(tmp_path / "t.md")])
    table = (tmp_path / "t.md").read_text()
    assert "| ingest | 1.00 | 1.00 | 1,049 | 1,000 / 2,000 / 100 |" in table
    assert table in capsys.readouterr().out


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

    meter, me = common.StageMeter(), psutil.Process()
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


def test_resume_keeps_the_finished_steps_of_the_same_run_and_runs_the_rest(tmp_path,
                                                                          monkeypatch):
    """A 10⁷ build outlasts a session: its finished stages (rows in --json) are not run again."""
    from lokg.pipeline.registry import STAGE_NAMES

    run = {"triples": 10, "one_process": False, "overrides": [], "build_id": "scale-10"}
    saved = tmp_path / "runs.jsonl"
    kept = {**run, "stage": STAGE_NAMES[0], "wall_s": 7.0, "cpu_s": 1.0, "peak_mib": 5.0}
    other = {**run, "overrides": ["gat.epochs=2"], "stage": STAGE_NAMES[1], "wall_s": 1.0}
    saved.write_text(json.dumps(kept) + "\n" + json.dumps(other) + "\n")
    done = bs.finished_steps(saved, run)
    assert list(done) == [STAGE_NAMES[0]]  # another setting's row is not this run's
    ran, recorded = [], []
    monkeypatch.setattr(bs, "run_measured", lambda argv, log: log.write_text("") or ran.append(
        argv[:3]) or {"wall_s": 1.0, "cpu_s": 1.0, "peak_mib": 1.0, "load": [0.0, 0.0]})
    rows = bs.build_measured(tmp_path / "dump", tmp_path / "store", "scale-10", [], tmp_path,
                             done, recorded.append)
    assert [r["stage"] for r in rows] == [*STAGE_NAMES, "publish"] and rows[0] == kept
    assert len(ran) == len(STAGE_NAMES) and ran[0] == ["lokg", "build", "--stage"]
    assert [r["stage"] for r in recorded] == [*STAGE_NAMES[1:], "publish"]

"""node_gain: μ on the graph with inverse edges, against hand-computed values, full and
refreshed, on both engines (DuckDB and Spark SQL: the one SQL text)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lokg.runtime.contract import read_table, write_table
from lokg.common.stage import StageError
from lokg.runtime.taimr import EdgeGraph, uniform_edges
from lokg.testing.stages import SPARK_CONFIG as CONFIG
from lokg.testing.stages import write_inputs


def run_stage(tmp: Path, inputs: dict, config: dict) -> tuple[pa.Table, dict]:
    from lokg.spark_jobs import node_gain

    result = node_gain.run({**CONFIG, **config}, inputs, str(tmp / "out"))
    assert result["report"]["engine"] == config["engine"]["name"]
    return read_table(Path(result["outputs"]["node_gain"]), "node_gain"), result["report"]


# 6 entities, |R*| = 3. Incoming labels with inverses (r, F/T):
#   0: (0,T) (1,T)                      deg 2, labels 2
#   1: (0,F) (0,F) (1,T)                deg 3, labels 2
#   2: (0,T)                            deg 1, labels 1
#   3: (1,F) (1,F) (2,F) (2,T) (0,T)    deg 5, labels 4 — self-loop counted both ways; div 4/3
#   4: nothing                          deg 0, μ 0
#   5: (0,F)                            deg 1, labels 1
HAND_TRIPLES = [(0, 0, 1), (2, 0, 1), (1, 1, 3), (3, 2, 3), (0, 1, 3), (3, 0, 5)]
HAND = {0: (2, 2), 1: (3, 2), 2: (1, 1), 3: (5, 4), 4: (0, 0), 5: (1, 1)}


def test_mu_matches_hand_computed_values(engine_config, tmp_path):
    table, report = run_stage(tmp_path, write_inputs(tmp_path, 6, 3, HAND_TRIPLES), engine_config)
    rows = table.to_pylist()
    assert [r["id"] for r in rows] == list(range(6))
    for row in rows:
        deg, labels = HAND[row["id"]]
        assert (row["deg_in"], row["in_relations"]) == (deg, labels)
        assert row["mu"] == pytest.approx((1 + math.log(deg + 1)) * labels / 3, rel=1e-12)
        assert row["mu"] == (1.0 + np.log1p(float(deg))) * labels / 3  # the bits, either engine
    assert rows[3]["mu"] == pytest.approx((1 + math.log(6)) * 4 / 3)
    assert rows[4]["mu"] == 0.0
    assert report["rows"] == 6 and report["entities_without_edges"] == 1
    assert report["edges"] == 12 and report["relations"] == 3
    assert report["mu_min"] == 0.0
    assert report["mu_min_reached"] == pytest.approx((1 + math.log(2)) / 3)
    assert report["mu_max"] == pytest.approx((1 + math.log(6)) * 4 / 3)
    assert report["mu_mean"] == pytest.approx(np.mean([r["mu"] for r in rows]))
    assert "inverse labels not counted" in report["div_denominator"]


def test_degrees_agree_with_the_edges_table_on_a_random_graph(engine_config, tmp_path):
    """deg_in and the labels are those of the edge list TAIMR walks (uniform_edges), and the
    graph built from both tables gives μ > 0 to every reachable node."""
    rng = np.random.default_rng(5)
    triples = sorted({(int(s), int(r), int(o)) for s, r, o in
                      zip(rng.integers(0, 40, 150), rng.integers(0, 6, 150), rng.integers(0, 40, 150))})
    inputs = write_inputs(tmp_path, 45, 6, triples)
    table, _ = run_stage(tmp_path, inputs, engine_config)
    edges = uniform_edges(read_table(Path(inputs["triples"]), "triples"))
    labels: dict[int, set] = {}
    degree = np.zeros(45, np.int64)
    for row in edges.to_pylist():
        degree[row["o"]] += 1
        labels.setdefault(row["o"], set()).add((row["r"], row["inverse"]))
    assert table.column("deg_in").to_pylist() == degree.tolist()
    assert table.column("in_relations").to_pylist() == [len(labels.get(v, ())) for v in range(45)]
    graph = EdgeGraph.from_tables(edges, table)  # refuses μ = 0 on an edge's target
    assert graph.n_nodes == 45 and graph.n_edges == 2 * len(triples)


def random_triples(rng, n_entities: int, n_relations: int, n: int) -> list[tuple]:
    return sorted({(int(s), int(r), int(o)) for s, r, o in zip(
        rng.integers(0, n_entities, n), rng.integers(0, n_relations, n),
        rng.integers(0, n_entities, n))})


def test_a_refresh_recomputes_the_changed_endpoints_and_equals_a_full_run(engine_config,
                                                                          tmp_path):
    """Changed triples (added, removed, one relabelled as scos_merge would) touch a few
    entities; the partial table equals a full run row for row (μ bit for bit), so a touched
    set without the inverse ends (s) or the removed triples' ends would fail here."""
    rng = np.random.default_rng(11)
    before = random_triples(rng, 60, 5, 200)
    removed = {before[i] for i in rng.choice(len(before), 6, replace=False)}
    relabelled = next(t for t in before if t not in removed)
    after = sorted((set(before) - removed - {relabelled})
                   | {(relabelled[0], (relabelled[1] + 1) % 5, relabelled[2])}
                   | set(random_triples(rng, 60, 5, 6)))
    old_inputs = write_inputs(tmp_path / "old", 60, 5, before)
    run_stage(tmp_path / "old", old_inputs, engine_config)
    new_inputs = write_inputs(tmp_path / "new", 60, 5, after)
    full, full_report = run_stage(tmp_path / "full", new_inputs, engine_config)
    previous = previous_of(tmp_path / "old", old_inputs)
    partial, report = run_stage(tmp_path / "partial", {**new_inputs, **previous}, engine_config)
    assert partial.equals(full)
    changed = set(before) ^ set(after)
    assert report["refresh"] == {"mode": "partial", "changed_triples": len(changed),
                                 "recomputed": len({v for s, _, o in changed for v in (s, o)}),
                                 "ids_moved": 0}
    assert 0 < report["refresh"]["recomputed"] < 60 and full_report["refresh"]["mode"] == "full"
    assert {k: v for k, v in report.items() if k not in ("refresh", "step_seconds", "seconds")} \
        == pytest.approx({k: v for k, v in full_report.items()
                          if k not in ("refresh", "step_seconds", "seconds")})


def previous_of(old: Path, old_inputs: dict) -> dict:
    """The ``previous:`` inputs of a refresh after a run of ``old_inputs`` under ``old``."""
    from lokg.common.stage import PREVIOUS

    previous = {PREVIOUS + n: old_inputs[n] for n in ("entities", "relations", "triples")}
    return {**previous, PREVIOUS + "node_gain": str(old / "out" / "node_gain.parquet")}


def keyed_inputs(tmp: Path, keys: list[str], n_relations: int, keyed_triples) -> dict:
    """``write_inputs`` of triples between entity keys, numbered as ingest does (rank in key
    order)."""
    keys = sorted(keys)
    ids = {k: i for i, k in enumerate(keys)}
    inputs = write_inputs(tmp, len(keys), n_relations,
                          sorted((ids[s], r, ids[o]) for s, r, o in keyed_triples))
    entities = read_table(Path(inputs["entities"]), "entities")
    write_table("entities", entities.set_column(1, "key", pa.array(keys)), Path(inputs["entities"]))
    return inputs


def test_a_refresh_that_shifts_the_ids_moves_the_copied_rows_and_equals_a_full_run(
        engine_config, tmp_path):
    """An entity with a low id removed and one added: every id above it shifts, the previous
    rows are copied under their new ids (copied by old id they would hold another entity's
    counts) and only the changed triples' ends and the new entity are recomputed."""
    rng = np.random.default_rng(5)
    keys = [f"e{i:03d}" for i in range(80)]
    before = {(keys[s], r, keys[o]) for s, r, o in random_triples(rng, 80, 4, 240)}
    after = {t for t in before if "e001" not in (t[0], t[2])} | {("e005", 2, "e999"),
                                                                  ("e999", 0, "e040")}
    old_inputs = keyed_inputs(tmp_path / "old", keys, 4, before)
    run_stage(tmp_path / "old", old_inputs, engine_config)
    new_inputs = keyed_inputs(tmp_path / "new", [k for k in keys if k != "e001"] + ["e999"], 4,
                              after)
    full, _ = run_stage(tmp_path / "full", new_inputs, engine_config)
    partial, report = run_stage(tmp_path / "partial",
                                {**new_inputs, **previous_of(tmp_path / "old", old_inputs)}, engine_config)
    assert partial.equals(full)
    changed = before ^ after
    ends = {k for s, _, o in changed for k in (s, o)} - {"e001"}
    assert report["refresh"] == {"mode": "partial", "changed_triples": len(changed),
                                 "recomputed": len(ends), "ids_moved": 78}  # e002…e079 down one
    assert len(ends) < 40


def test_a_refresh_with_another_relation_count_runs_in_full(engine_config, tmp_path):
    triples = random_triples(np.random.default_rng(2), 20, 3, 40)
    old_inputs = write_inputs(tmp_path / "old", 20, 3, triples)
    run_stage(tmp_path / "old", old_inputs, engine_config)
    new_inputs = write_inputs(tmp_path / "new", 20, 4, triples)  # |R*| enters every μ
    previous = previous_of(tmp_path / "old", old_inputs)
    table, report = run_stage(tmp_path / "partial", {**new_inputs, **previous}, engine_config)
    full, _ = run_stage(tmp_path / "full", new_inputs, engine_config)
    assert report["refresh"] == {"mode": "full",
                                 "reason": "another relation count (|R*| enters every μ)"}
    assert table.equals(full)


def test_out_of_range_ids_are_refused_with_the_file_named(engine_config, tmp_path):
    inputs = write_inputs(tmp_path, 4, 2, [(0, 0, 1), (1, 2, 3)])
    with pytest.raises(StageError, match=r"triples\.parquet: relation ids in \[0, 2\] outside the 2"):
        run_stage(tmp_path, inputs, engine_config)
    inputs = write_inputs(tmp_path / "b", 3, 2, [(0, 0, 1), (1, 1, 3)])
    with pytest.raises(StageError, match=r"entity ids in \[0, 3\] outside the 3 entities"):
        run_stage(tmp_path / "b", inputs, engine_config)
    with pytest.raises(StageError, match="needs input 'relations'"):
        run_stage(tmp_path, {k: v for k, v in inputs.items() if k != "relations"}, engine_config)

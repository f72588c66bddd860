"""bench/refresh_scale.py: per-stage and whole-build ratios, tables compared as multisets of
rows (float noise under the stated places ignored), SCOS merge groups and GAT attention."""

from __future__ import annotations

import pyarrow as pa
import pytest

from bench import refresh_scale as rs


def step(stage: str, wall: float, cpu: float) -> dict:
    return {"stage": stage, "wall_s": wall, "cpu_s": cpu}


def test_stage_comparison_pairs_stages_and_the_whole_build_sums_them():
    full = [step("start", 1.0, 0.5), step("ingest", 60.0, 50.0), step("gat", 300.0, 290.0),
            step("publish", 4.0, 2.0)]
    refresh = [step("start", 1.0, 0.5), step("ingest", 30.0, 20.0), step("gat", 0.5, 0.5),
               step("publish", 3.5, 2.0)]
    rows = rs.stage_comparison(full, refresh, {"ingest": "partial", "gat": "reused"})
    assert [(r["stage"], r["how"]) for r in rows] == \
        [("start", "—"), ("ingest", "partial"), ("gat", "reused"), ("publish", "—")]
    assert rows[1]["wall_ratio"] == 0.5 and rows[1]["cpu_ratio"] == 0.4
    whole = rs.whole_build(rows)
    assert whole["full_wall_s"] == 365.0 and whole["refresh_wall_s"] == 35.0
    assert whole["wall_ratio"] == pytest.approx(35.0 / 365.0, abs=1e-3)
    assert whole["meets_target"]
    slow = rs.whole_build(rs.stage_comparison(full, full, {}))
    assert slow["wall_ratio"] == 1.0 and not slow["meets_target"]


def test_a_stage_the_refresh_did_not_log_counts_as_zero():
    (row,) = rs.stage_comparison([step("gat", 10.0, 9.0)], [], {})
    assert row["refresh_wall_s"] == 0.0 and row["wall_ratio"] == 0.0


def test_tables_compare_as_multisets_of_rows_with_float_noise_ignored():
    one = pa.table({"id": [1, 2, 2], "nmi": [0.5, 4.99933e-13, 0.25]})
    shuffled = pa.table({"id": [2, 1, 2], "nmi": [0.25, 0.5, 5.00044e-13]})
    assert rs.table_equality(one, shuffled)["equal"]
    other = pa.table({"id": [1, 2, 3], "nmi": [0.5, 0.0, 0.25]})
    assert rs.table_equality(one, other) == {"rows": [3, 3], "only_refresh": 1,
                                             "only_full": 1, "equal": False}
    once = pa.table({"id": [1, 2], "nmi": [0.5, 0.0]})
    assert rs.table_equality(one, once)["only_refresh"] == 1  # a duplicate row counts


def test_merge_groups_are_the_canonical_relations_with_several_members():
    relation_map = pa.table({"name": ["born_in", "birth_city", "capital", "lives_in"],
                             "canonical_name": ["born_in", "born_in", "capital", "lives_in"]})
    assert rs.merge_groups(relation_map) == {frozenset({"born_in", "birth_city"})}


def edges(rows: list[tuple]) -> pa.Table:
    s, r, o, inverse, attention = zip(*rows)
    return pa.table({"s": list(s), "r": list(r), "o": list(o), "inverse": list(inverse),
                     "attention": list(attention)})


def test_attention_difference_over_the_shared_edges():
    refresh = edges([(0, 1, 2, False, 0.5), (2, 1, 0, True, 1.0), (3, 0, 4, False, 0.2)])
    full = edges([(0, 1, 2, False, 0.75), (2, 1, 0, True, 1.0)])
    assert rs.attention_difference(refresh, full) == {
        "shared": 2, "only_refresh": 1, "only_full": 0, "max_attention_diff": 0.25}


def test_relation_pairs_compare_without_the_learned_source_but_with_the_rest():
    pairs = pa.table({"r_i": [0, 1], "r_j": [1, 2], "nmi": [0.5, 0.25],
                      "source": ["entity", "entity,transe"]})
    warm = pairs.set_column(3, "source", pa.array(["entity,transe", "entity"]))
    assert rs.table_equality(*(rs.deterministic_part(t, "relation_pairs")
                               for t in (pairs, warm)))["equal"]
    moved = warm.set_column(2, "nmi", pa.array([0.5, 0.3]))
    assert not rs.table_equality(*(rs.deterministic_part(t, "relation_pairs")
                                   for t in (pairs, moved)))["equal"]
    proposed = pa.concat_tables([warm, pa.table({"r_i": [3], "r_j": [4], "nmi": [0.1],
                                                 "source": ["transe"]})])
    assert rs.table_equality(*(rs.deterministic_part(t, "relation_pairs")
                               for t in (pairs, proposed)))["equal"]  # TransE's alone: learned
    typed = warm.set_column(3, "source", pa.array(["type", "entity"]))
    assert not rs.table_equality(*(rs.deterministic_part(t, "relation_pairs")
                                   for t in (pairs, typed.slice(1))))["equal"]
    entities = pa.table({"id": [0], "source": ["transe"]})  # only relation_pairs loses it
    assert rs.deterministic_part(entities, "entities").to_pylist() == [
        {"id": 0, "source": "transe"}]


def test_ingest_steps_list_the_full_builds_steps_then_the_refreshs_own():
    lines = rs.ingest_step_lines({"full": {"parse": 2.0, "ids": 1.0},
                                  "refresh": {"parse": 1.5, "change_set": 0.25}})
    assert lines[3:] == ["| parse | 2.0 | 1.5 |", "| ids | 1.0 | 0.0 |",
                         "| change_set | 0.0 | 0.2 |"]
    assert rs.ingest_step_lines({}) == []


def test_each_build_is_recorded_as_it_ends_and_resume_runs_only_the_rest(tmp_path, monkeypatch):
    ran, calls = [], []

    def fake_build(dump, store, settings, log):
        ran.append((store.name, settings))
        calls.append(store.name)
        store.mkdir(exist_ok=True)
        if len(ran) == 2 and not resumed:
            raise KeyboardInterrupt  # stopped in the middle of the refresh
        return [step("gat", float(len(calls)), 1.0)]

    monkeypatch.setattr(rs, "build_one_process", fake_build)
    resumed = False
    with pytest.raises(KeyboardInterrupt):
        rs.run_builds(tmp_path / "dump", tmp_path / "edited", tmp_path, ["gat.epochs=2"])
    assert list(rs.json.loads((tmp_path / "builds.json").read_text())) == ["original"]
    resumed, ran[:] = True, []
    rows = rs.run_builds(tmp_path / "dump", tmp_path / "edited", tmp_path, ["gat.epochs=2"],
                         resume=True)
    assert ran == [("store", ["gat.epochs=2"]),
                   ("full-store", ["gat.epochs=2", "refresh.mode=full"])]
    assert (tmp_path / "store").is_dir()  # the original build's store was kept
    assert list(rows) == ["original", "refresh", "full"] and [
        r[0]["wall_s"] for r in rows.values()] == [1.0, 3.0, 4.0]
    assert rs.json.loads((tmp_path / "builds.json").read_text()) == rows

"""scos_merge: threshold, greedy order, lazy invalidation, a merged cluster measured by
relation_stats' rules over its union of triples, L_info / ρ̂, the disabled ablation, and the
consistency of φ with the rewritten triples."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lokg.runtime.contract import read_table, write_table
from lokg.spark_jobs.engine import DuckDBEngine
from lokg.spark_jobs.relation_stats import ClusterSignals
from lokg.spark_jobs.scos_greedy import (
    Merger,
    canonical_mapping,
    canonical_member,
    delta,
    summary,
    theta,
)
from lokg.testing.stages import H_TWO_THIRDS, write_toy

T = 100  # the common tail entity of the greedy toys


def make_merger(tmp_path: Path, heads: dict[int, list[int]], emb=None,
                weights=(0.40, 0.30, 0.30), tails: dict[int, list[int]] | None = None,
                special: dict[int, list[str]] | None = None, **refresh) -> Merger:
    """Relations r → triples (h, r, tail); every entity has type P (NMI = 1) unless ``special``;
    the clusters measured by relation_stats' rules on DuckDB (``ClusterSignals``)."""
    triples = sorted({(h, r, t) for r, hs in heads.items()
                      for h, t in zip(hs, (tails or {}).get(r, [T] * len(hs)))})
    types = {e: (special or {}).get(e, ["P"]) for s, _, o in triples for e in (s, o)}
    inputs = write_toy(tmp_path, types, [f"rel{r}" for r in range(max(heads) + 1)], triples)
    engine = DuckDBEngine({}, tmp_path)
    engine.register("graph", inputs["triples"])
    engine.register("entities", inputs["entities"])
    signals = ClusterSignals(engine, "spread")
    entropy = engine.fetch("SELECT r, entropy FROM entropy").to_pydict()
    entropy = dict(zip(entropy["r"], entropy["entropy"]))
    names = {r: f"rel{r}" for r in heads}
    counts = {r: sum(1 for _, x, _ in triples if x == r) for r in heads}
    return Merger(names, counts, entropy, signals,
                  None if emb is None else np.asarray(emb, dtype=np.float64),
                  weights=weights, **refresh)


def angle(deg: float) -> list[float]:
    return [math.cos(math.radians(deg)), math.sin(math.radians(deg))]


# ---------------------------------------------------------------------------------------------


def test_delta_and_theta():
    assert delta(0.0, 0.0) == 0.0  # zero entropy on both sides
    assert theta(0.0, 0.0) == pytest.approx(0.75)
    assert delta(1.0, 0.5) == pytest.approx(0.5) and delta(0.5, 1.0) == pytest.approx(0.5)
    assert theta(1.0, 0.5) == pytest.approx(0.75 * (1 + 0.15 * 0.5))
    assert delta(0.7, 0.0) == pytest.approx(1.0)
    assert theta(0.7, 0.0) == pytest.approx(0.8625)
    assert theta(1.0, 0.0, theta_base=0.95, epsilon=0.15) == 1.0  # capped at 1


def test_highest_similarity_first_and_stale_entries_skipped(tmp_path):
    # A, B have the same triples (Jaccard 1); C shares 3 of 7 entities with each.
    # Embeddings: C at 0°, A at 30°, B at 90° ⇒ sim(A,B) = .4+.3+.3·cos60 = .85,
    # sim(A,C) = .4 + .3·3/7 + .3·cos30 = .788 (admissible), sim(B,C) = .529.
    # After A+B merge the mean embedding sits at 60°: sim(AB,C) = .4 + .3·3/7 + .15 = .679 < .75,
    # so the (A, C) heap entry is stale and must not be used.
    m = make_merger(tmp_path, {0: [1, 2, 3, 4], 1: [1, 2, 3, 4], 2: [3, 4, 5, 6]},
                    emb=[angle(30), angle(90), angle(0)])
    for a, b in ((0, 1), (0, 2), (1, 2)):
        m.add_candidate(a, b)
    assert m.pushed == 2  # (A,B) and (A,C) are admissible, (B,C) is not
    result = m.run()
    assert [(e["left"], e["right"]) for e in result.log] == [("rel0", "rel1")]
    assert result.log[0]["sim"] == pytest.approx(0.85)
    assert result.log[0]["cos"] == pytest.approx(0.5)
    assert result.clusters == {0: [0, 1], 2: [2]}
    assert result.stale_skipped == 1
    assert m.signals(0, 2)["sim"] == pytest.approx(0.4 + 0.3 * 3 / 7 + 0.3 * 0.5)


def test_stats_recomputed_from_union_enable_the_next_merge(tmp_path):
    # sim = Jaccard only. E(A) = {1..8, T}, E(B) = {2..9, T}: J = 8/10 = .8 → merge first.
    # E(C) = {1..12, T}: J(A,C) = J(B,C) = 9/13 = .69 < .75, but J(A∪B, C) = 10/13 = .77.
    m = make_merger(tmp_path, {0: list(range(1, 9)), 1: list(range(2, 10)), 2: list(range(1, 13))},
                    weights=(0.0, 1.0, 0.0))
    for a, b in ((0, 1), (0, 2), (1, 2)):
        m.add_candidate(a, b)
    assert m.pushed == 1
    result = m.run()
    assert [e["sim"] for e in result.log] == pytest.approx([0.8, 10 / 13])
    assert [e["members"] for e in result.log] == [["rel0", "rel1"], ["rel0", "rel1", "rel2"]]
    assert result.clusters == {0: [0, 1, 2]}


def test_merged_cluster_entropy_types_and_loss(tmp_path):
    # A: (0→10), (1→10), (2→11), H = H(⅔, ⅓); B: (0→10), (1→12), (3→11), H = ln 3.
    m = make_merger(tmp_path, {0: [0, 1, 2], 1: [0, 1, 3]}, emb=[[1, 0], [1, 0]],
                    tails={0: [10, 10, 11], 1: [10, 12, 11]})
    assert m.clusters[0].entropy == pytest.approx(H_TWO_THIRDS)
    assert m.clusters[1].entropy == pytest.approx(math.log(3))
    m.add_candidate(0, 1)
    result = m.run()
    (entry,) = result.log
    # J = |{0,1,10,11}| / |{0,1,2,3,10,11,12}| = 4/7; NMI = 1; cos = 1
    sim = 0.4 + 0.3 * 4 / 7 + 0.3
    d = (math.log(3) - H_TWO_THIRDS) / math.log(3)
    assert entry["jaccard"] == pytest.approx(4 / 7) and entry["nmi"] == pytest.approx(1.0)
    assert entry["sim"] == pytest.approx(sim)
    assert entry["theta"] == pytest.approx(0.75 * (1 + 0.15 * d))
    assert entry["loss"] == pytest.approx((1 - sim) * H_TWO_THIRDS)  # min H before the merge
    # recomputed from the union of pairs: tails 10, 10, 11, 11, 12
    assert m.clusters[0].entropy == pytest.approx(-2 * 0.4 * math.log(0.4) - 0.2 * math.log(0.2))
    assert not m.clusters[1].alive and m.clusters[0].version == 1


def jsd_bits(p: dict, q: dict) -> float:
    """Jensen–Shannon divergence in bits, by its definition."""
    m = {k: (p.get(k, 0) + q.get(k, 0)) / 2 for k in set(p) | set(q)}
    return sum(0.5 * d[k] * math.log2(d[k] / m[k]) for d in (p, q) for k in d if d[k] > 0)


def test_union_type_distribution_recomputed(tmp_path):
    # entity 12 has type R; sim = cos = 1 so the pair merges whatever the other signals;
    # relation 2 holds (P, P) alone: its NMI with a cluster shows the cluster's P
    m = make_merger(tmp_path, {0: [0, 1, 2], 1: [0, 1, 3], 2: [20]}, weights=(0, 0, 1),
                    emb=[[1, 0], [1, 0], [0, 1]], tails={0: [10, 10, 11], 1: [10, 12, 11]},
                    special={12: ["R"]})
    only_pp = {("P", "P"): 1.0}
    nmi, _ = m.measure.pairs([(1, 2)])[(1, 2)]
    assert nmi == pytest.approx(1 - jsd_bits({("P", "P"): 2 / 3, ("P", "R"): 1 / 3}, only_pp))
    m.add_candidate(0, 1)
    m.run()
    # union pairs (0,10) (1,10) (2,11) (1,12) (3,11)
    nmi, jaccard = m.measure.pairs([(0, 2)])[(0, 2)]
    assert nmi == pytest.approx(1 - jsd_bits({("P", "P"): 4 / 5, ("P", "R"): 1 / 5}, only_pp))
    assert jaccard == 0.0


def test_summary_and_canonical_names():
    assert summary(10, 10, 0.0, 5.0)["rho_hat"] == 1.0
    s = summary(4, 3, 0.5, 2.0)
    assert s["L_info"] == pytest.approx(0.25) and s["rho_hat"] == pytest.approx(0.75 / 0.75)
    assert summary(3, 2, 0.0, 0.0)["L_info"] == 0.0  # all-zero entropy: nothing to lose
    names = {0: "b.rel", 1: "a.rel", 2: "c.rel"}
    assert canonical_member([0, 1, 2], names, {0: 5, 1: 5, 2: 9}) == 2  # most triples
    assert canonical_member([0, 1], names, {0: 5, 1: 5}) == 1  # tie → name
    rels = pa.table({"id": [0, 1, 2, 3], "name": ["b.rel", "a.rel", "c.rel", "d.rel"]})
    rmap = canonical_mapping(rels, {1: [1, 3]}, {0: 1, 1: 2, 2: 1, 3: 7}).to_pylist()
    assert [(r["id"], r["canonical_id"], r["canonical_name"]) for r in rmap] == [
        (0, 0, "b.rel"), (1, 1, "d.rel"), (2, 2, "c.rel"), (3, 1, "d.rel")]


# ---------------------------------------------------------------------------------------------
# the stage

# film.director (0) and film.directed_by (1) overlap (Jaccard 4/6), other.rel (2) is unrelated
STAGE_TYPES = {0: ["people.person"], 1: ["people.person"], 2: ["people.person"],
               3: ["people.person"], 5: ["x.a"], 10: ["film.film"], 11: ["film.film"], 12: ["x.b"]}
#: A config resolved to DuckDB, for the tests of the merge decisions (not of the engines)
DUCKDB = {"engine": {"name": "duckdb"}}
STAGE_NAMES = ["film.director", "film.directed_by", "other.rel"]
STAGE_TRIPLES = [(0, 0, 10), (1, 0, 10), (2, 0, 11), (0, 1, 10), (1, 1, 10), (3, 1, 11),
                 (5, 2, 12)]


def test_disabled_is_identity(tmp_path):
    from lokg.spark_jobs import scos_merge

    inputs = write_toy(tmp_path, STAGE_TYPES, STAGE_NAMES, STAGE_TRIPLES)
    result = scos_merge.run({"scos_merge": {"enabled": False}}, inputs, str(tmp_path / "out"))
    rep = result["report"]
    assert (rep["R0"], rep["R_star"], rep["L_info"], rep["rho_hat"]) == (3, 3, 0.0, 1.0)
    assert rep["merges"] == []
    out = result["outputs"]
    assert out["triples"] == inputs["triples"] and out["relations"] == inputs["relations"]
    rmap = read_table(Path(out["relation_map"]), "relation_map").to_pylist()
    assert [(r["id"], r["canonical_id"], r["name"] == r["canonical_name"]) for r in rmap] == [
        (0, 0, True), (1, 1, True), (2, 2, True)]
    assert read_table(Path(out["merge_log"]), "merge_log").num_rows == 0


def test_stage_end_to_end(engine_config, tmp_path):
    from lokg.spark_jobs import relation_stats, scos_merge

    emb = np.array([[1, 0], [1, 0], [0, 1]], dtype=np.float32)
    inputs = write_toy(tmp_path, STAGE_TYPES, STAGE_NAMES, STAGE_TRIPLES, emb)
    cfg = {"spark": {"master": "local[2]", "shuffle_partitions": 4}, **engine_config}
    stats = relation_stats.run(cfg, inputs, str(tmp_path / "stats"))
    inputs.update(stats["outputs"])
    result = scos_merge.run(cfg, inputs, str(tmp_path / "scos"))
    rep, out = result["report"], result["outputs"]

    # sim = .4·1 + .3·4/6 + .3·1 = .9; loss = .1·min(H, H); Σ H over R0 = 2H + 0
    assert rep["merges"] == [["film.director", "film.directed_by"]]
    assert (rep["R0"], rep["R_star"]) == (3, 2)
    assert rep["L_info"] == pytest.approx(0.1 * H_TWO_THIRDS / (2 * H_TWO_THIRDS))
    assert rep["rho_hat"] == pytest.approx((1 - 0.05) / (2 / 3))
    assert rep["normaliser"]["value"] == pytest.approx(2 * H_TWO_THIRDS)
    assert "R0" in rep["normaliser"]["definition"]
    (log,) = read_table(Path(out["merge_log"]), "merge_log").to_pylist()
    assert log["sim"] == pytest.approx(0.9) and log["cos"] == pytest.approx(1.0)
    assert log["loss"] == pytest.approx(0.1 * H_TWO_THIRDS)
    assert log["members"] == ["film.directed_by", "film.director"]

    # φ: both film relations → one canonical relation named by the tie rule (3 triples each)
    rmap = read_table(Path(out["relation_map"]), "relation_map").to_pylist()
    phi = {r["id"]: r["canonical_id"] for r in rmap}
    assert phi == {0: 0, 1: 0, 2: 1}
    assert {r["canonical_name"] for r in rmap if r["id"] < 2} == {"film.directed_by"}
    rels = read_table(Path(out["relations"]), "relations").to_pylist()
    assert rels == [{"id": 0, "name": "film.directed_by"}, {"id": 1, "name": "other.rel"}]

    # every original triple maps to exactly one rewritten triple; the rewrite is distinct,
    # in (s, r, o) order, by the build's engine
    rewritten = read_table(Path(out["triples"]), "triples").to_pylist()
    got = [(t["s"], t["r"], t["o"]) for t in rewritten]
    assert got == sorted({(s, phi[r], o) for s, r, o in STAGE_TRIPLES})
    assert len(got) == 5 and rep["triples_in"] == 7 and rep["triples_out"] == 5
    assert rep["engine"] == engine_config["engine"]["name"]

    # without embeddings the cosine term is 0: .4 + .2 < .75, nothing merges, and it says so
    del inputs["relation_embeddings"]
    result = scos_merge.run(cfg, inputs, str(tmp_path / "scos2"))
    rep = result["report"]
    assert rep["merges"] == [] and rep["rho_hat"] == 1.0 and rep["L_info"] == 0.0
    assert any("NO relation_embeddings" in w for w in rep["warnings"])
    assert result["outputs"]["triples"] == inputs["triples"]
    # … unless asked to renormalise the two remaining weights: (.4·1 + .3·4/6)·(1/.7) = .857
    result = scos_merge.run({**cfg, "scos_merge": {"missing_embeddings": "renormalise"}}, inputs,
                            str(tmp_path / "scos3"))
    assert result["report"]["merges"] == [["film.director", "film.directed_by"]]


def hand_stats(tmp_path: Path, emb: np.ndarray, nmi: float = 1.0) -> dict:
    """The stage toy's inputs with hand-written relation_stats and relation_pairs: the film
    pair (equal H, so θ = θ_base) with Jaccard 4/6 and the given NMI signal."""
    inputs = write_toy(tmp_path, STAGE_TYPES, STAGE_NAMES, STAGE_TRIPLES, emb)
    tp = [{"head_type": "people.person", "tail_type": "film.film", "p": 1.0}]
    write_table("relation_stats", pa.table({
        "r": [0, 1, 2], "name": STAGE_NAMES, "triples": [3, 3, 1], "heads": [3, 3, 1],
        "tails": [2, 2, 1], "entities": [5, 5, 2],
        "entropy": [H_TWO_THIRDS, H_TWO_THIRDS, 0.0],
        "type_pairs": [tp, tp, [{"head_type": "x.a", "tail_type": "x.b", "p": 1.0}]],
    }), tmp_path / "relation_stats.parquet")
    write_table("relation_pairs", pa.table({
        "r_i": [0], "r_j": [1], "shared_entities": [4], "jaccard": [4 / 6], "nmi": [nmi],
        "source": ["entity,type"]}), tmp_path / "relation_pairs.parquet")
    return {**inputs, "relation_stats": str(tmp_path / "relation_stats.parquet"),
            "relation_pairs": str(tmp_path / "relation_pairs.parquet")}


def test_stage_without_admissible_pair_passes_tables_through(tmp_path):
    """Hand-written stats/pairs tables; θ above every similarity: φ = identity, no Spark."""
    from lokg.spark_jobs import scos_merge

    inputs = hand_stats(tmp_path, np.array([[1, 0], [1, 0], [0, 1]], dtype=np.float32))
    # θ so high that nothing merges: identity, inputs passed through, no Spark started
    result = scos_merge.run({"scos_merge": {"theta_base": 0.95}}, inputs, str(tmp_path / "out"))
    assert result["report"]["merges"] == [] and result["report"]["rho_hat"] == 1.0
    assert result["outputs"]["triples"] == inputs["triples"]
    assert result["outputs"]["relations"] == inputs["relations"]
    assert result["report"]["admissible_initial"] == 0
    assert "measure" not in result["report"]["step_seconds"]  # triples never read
    assert result["report"]["normaliser"]["value"] == pytest.approx(2 * H_TWO_THIRDS)
    rmap = read_table(Path(result["outputs"]["relation_map"]), "relation_map")
    assert rmap.column("canonical_id").to_pylist() == [0, 1, 2]


# ---------------------------------------------------------------------------------------------
# refresh: the previous build's relation vectors while the warm TransE's stay close to them


def refresh_inputs(tmp_path: Path, warm_degrees: float, nmi: float = 1.0) -> dict:
    """The stage toy with hand-written stats (sim = .4·nmi + .3·4/6 + .3·cos; θ = .75 for
    the film pair) and a previous build: its relation_map numbers the relations the other way
    round (matched by name) and its vectors put film.directed_by 58° from film.director
    (cos .53: merged); this build's warm vectors put it ``warm_degrees`` away."""
    from lokg.common.stage import PREVIOUS

    inputs = hand_stats(tmp_path, np.array([angle(0), angle(warm_degrees), angle(90)],
                                           np.float32), nmi)
    previous = tmp_path / "previous"
    previous.mkdir()
    then = {"film.director": 2, "film.directed_by": 1, "other.rel": 0}
    write_table("relation_map", pa.table({
        "id": list(then.values()), "name": list(then), "canonical_id": [0, 0, 1],
        "canonical_name": ["film.directed_by", "film.directed_by", "other.rel"]}),
        previous / "relation_map.parquet")
    np.save(previous / "relation_embeddings.npy",
            np.array([angle(90), angle(58), angle(0)], np.float32))  # rows by previous id
    return {**inputs, PREVIOUS + "relation_map": str(previous / "relation_map.parquet"),
            PREVIOUS + "relation_embeddings": str(previous / "relation_embeddings.npy")}


def test_a_small_edit_keeps_the_merges_a_changed_family_re_merges(tmp_path):
    from lokg.common.stage import PREVIOUS
    from lokg.spark_jobs import scos_merge

    def merges(inputs: dict, name: str, **settings) -> dict:
        """The vector rule alone: no decision margin (the warm vectors' sim .74 is within it)."""
        config = {"scos_merge": {"refresh_merge_margin": 0, **settings}, **DUCKDB}
        report = scos_merge.run(config, inputs, str(tmp_path / name))["report"]
        return {"merges": report["merges"], **report["refresh"]}

    # warm vectors 4° further apart: cos .47 alone would undo the merge; the shift (weighted
    # mean cosine distance .001) is within tolerance, so the previous vectors keep it
    small = refresh_inputs(tmp_path / "small", warm_degrees=62)
    kept = merges(small, "kept")
    assert kept["merges"] == [["film.director", "film.directed_by"]]
    assert kept["mode"] == "partial" and 0 < kept["vector_shift"] < kept["tolerance"]
    # without a previous build (a full build), or past a tighter tolerance: the warm vectors
    cold = merges({k: v for k, v in small.items() if not k.startswith(PREVIOUS)}, "cold")
    assert cold["merges"] == [] and cold["mode"] == "full"
    tight = merges(small, "tight", refresh_max_vector_shift=1e-4)
    assert tight["merges"] == [] and tight["mode"] == "full" and "moved" in tight["reason"]
    # the data signals still decide: the pair's NMI halved, the merge goes with the previous
    # vectors too (sim .4·.5 + .2 + .3·.53 = .56 < .75)
    changed = merges(refresh_inputs(tmp_path / "family", warm_degrees=62, nmi=0.5), "family")
    assert changed["merges"] == [] and changed["mode"] == "partial"


# ---------------------------------------------------------------------------------------------
# refresh: a previous merge holds while its sim stays within refresh_merge_margin under θ


def merges_at(tmp_path: Path, cos: float, **refresh) -> list[dict]:
    """Two relations with the same heads (NMI 1, Jaccard 1, H 0: θ = .75) whose vectors have
    cosine ``cos``: sim = .4 + .3 + .3·cos."""
    emb = [[1.0, 0.0], [cos, math.sqrt(1 - cos * cos)], [0.0, 1.0]]
    merger = make_merger(Path(tempfile.mkdtemp(dir=tmp_path)), {0: [1, 2, 3], 1: [1, 2, 3],
                                                                2: [7, 8]}, emb=emb, **refresh)
    merger.add_candidate(0, 1)
    return merger.run().log


def test_margin_keeps_a_previous_merge_just_under_theta_not_far_under(tmp_path):
    together = {"previous_groups": {0: 5, 1: 5}, "margin": 0.05}
    assert merges_at(tmp_path, 0.2) and merges_at(tmp_path, 0.2, **together)  # sim .76 ≥ θ: merged either way
    dipped = merges_at(tmp_path, 0.15, **together)  # sim .745: under θ, within the margin
    assert [(m["left"], m["right"]) for m in dipped] == [("rel0", "rel1")]
    assert dipped[0]["sim"] == pytest.approx(0.745) and dipped[0]["sim"] < dipped[0]["theta"]
    assert merges_at(tmp_path, 0.15) == []  # no previous merge (a full build): θ decides
    assert merges_at(tmp_path, -0.2, **together) == []  # sim .64, past the margin: the merge splits
    assert merges_at(tmp_path, 0.15, previous_groups={0: 5, 1: 5}, margin=0.0) == []
    # a margin is for pairs the previous build merged: another group, or one member not in any
    assert merges_at(tmp_path, 0.15, previous_groups={0: 5, 1: 6}, margin=0.05) == []
    assert merges_at(tmp_path, 0.15, previous_groups={0: 5, 2: 5}, margin=0.05) == []


def test_a_refresh_keeps_a_merge_that_dipped_within_the_margin(tmp_path):
    """The stage toy refreshed with the previous build's vectors (cos .53): NMI .95 puts the
    film pair's sim at .739, under θ = .75 but within the margin (.05) — kept, and reported;
    NMI .8 (sim .679) splits it; a full build of the same tables does not merge at .739."""
    from lokg.common.stage import PREVIOUS
    from lokg.spark_jobs import scos_merge

    def refresh(name: str, nmi: float, previous: bool = True) -> dict:
        inputs = refresh_inputs(tmp_path / name, warm_degrees=58, nmi=nmi)
        if not previous:
            inputs = {k: v for k, v in inputs.items() if not k.startswith(PREVIOUS)}
        return scos_merge.run(DUCKDB, inputs, str(tmp_path / name / "out"))["report"]

    dipped = refresh("dipped", 0.95)
    assert dipped["merges"] == [["film.director", "film.directed_by"]]
    assert dipped["refresh"]["merge_margin"] == 0.05
    assert dipped["refresh"]["previous_groups"] == 1
    assert dipped["refresh"]["previous_groups_merged_again"] == 1
    [(left, right, sim, theta)] = dipped["refresh"]["kept_by_margin"]
    assert (left, right) == ("film.director", "film.directed_by") and theta - 0.05 <= sim < theta
    assert dipped["engine"] == "duckdb" and dipped["triples_out"] < dipped["triples_in"]
    fallen = refresh("fallen", 0.8)
    assert fallen["merges"] == [] and fallen["refresh"]["kept_by_margin"] == []
    assert fallen["refresh"]["previous_groups_merged_again"] == 0
    full = refresh("full", 0.95, previous=False)
    assert full["merges"] == [] and "merge_margin" not in full["refresh"]

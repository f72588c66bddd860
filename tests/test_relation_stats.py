"""relation_stats: H(r), type-pair distributions, NMI (1 − JSD bits), Jaccard, candidate pairs."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lokg.runtime.contract import check_schema, read_table, table_files
from lokg.spark_jobs.relation_stats import transe_neighbour_pairs
from lokg.spark_jobs.relation_stats_driver import UNTYPED, TypeIndex, canonical_types, key_counts
from lokg.spark_jobs.relation_stats_math import (
    jsd_bits,
    nmi_signal,
    nmi_signals,
    tail_entropy,
    type_pair_dict,
)
from lokg.testing.stages import H_TWO_THIRDS, write_toy

# JSD in bits of {x: 1} vs {x: ½, y: ½}, by hand: M = {x: ¾, y: ¼};
# ½·1·log2(1/¾) + ½·(½·log2(½/¾) + ½·log2(½/¼)) = ½·log2(4/3) + ¼·log2(2/3) + ¼
JSD_ONE_VS_HALF = 0.5 * math.log2(4 / 3) + 0.25 * math.log2(2 / 3) + 0.25
def config(**relation_stats) -> dict:
    return {"spark": {"master": "local[2]", "shuffle_partitions": 4},
            "relation_stats": relation_stats}


def pairs_by_key(path: str) -> dict[tuple[int, int], dict]:
    rows = read_table(Path(path), "relation_pairs").to_pylist()
    return {(row["r_i"], row["r_j"]): row for row in rows}


# ---------------------------------------------------------------------------------------------
# driver-side definitions


def test_tail_entropy_by_hand():
    assert tail_entropy(np.array([10, 10, 11])) == pytest.approx(H_TWO_THIRDS)
    assert tail_entropy(np.array([10])) == 0.0  # one triple
    assert tail_entropy(np.array([10, 10, 10])) == 0.0  # one tail
    assert tail_entropy(np.array([1, 2, 3, 4])) == pytest.approx(math.log(4))
    assert tail_entropy(np.array([], dtype=np.int64)) == 0.0


def test_jsd_bits_of_known_distributions():
    p = {("A", "B"): 1.0}
    assert jsd_bits(p, p) == pytest.approx(0.0)
    assert jsd_bits(p, {("A", "C"): 1.0}) == pytest.approx(1.0)  # disjoint supports: 1 bit
    half = {("A", "B"): 0.5, ("A", "C"): 0.5}
    assert jsd_bits(p, half) == pytest.approx(JSD_ONE_VS_HALF)
    assert JSD_ONE_VS_HALF == pytest.approx(0.3112781, abs=1e-7)
    assert jsd_bits(half, p) == pytest.approx(jsd_bits(p, half))  # symmetric
    # (½, ½) vs (¼, ¾): ½[½log2(½/⅜) + ½log2(½/⅝)] + ½[¼log2(¼/⅜) + ¾log2(¾/⅝)]
    q = {("A", "B"): 0.25, ("A", "C"): 0.75}
    by_hand = 0.5 * (0.5 * math.log2(0.5 / 0.375) + 0.5 * math.log2(0.5 / 0.625)) + \
        0.5 * (0.25 * math.log2(0.25 / 0.375) + 0.75 * math.log2(0.75 / 0.625))
    assert jsd_bits(half, q) == pytest.approx(by_hand)
    assert nmi_signal(p, half) == pytest.approx(1 - JSD_ONE_VS_HALF)
    assert nmi_signal(p, {}) == 0.0  # a relation without triples shares no role


@pytest.mark.parametrize("seed, chunk", [(0, 2048), (1, 3), (2, 1)])
def test_nmi_signals_equal_nmi_signal_pair_by_pair(seed, chunk):
    """The vectorised NMI of the driver path against the per-pair definition: random type-pair
    distributions with shared, disjoint and zero-mass keys, an empty one and a relation absent."""
    rng = np.random.default_rng(seed)
    types = [(a, b) for a in "ABCDE" for b in "ABCDE"]
    dists = {}
    for r in range(12):
        chosen = rng.choice(len(types), size=rng.integers(1, 10), replace=False)
        p = rng.random(len(chosen))
        p[rng.random(len(chosen)) < 0.2] = 0.0
        dists[r] = {types[k]: float(x) for k, x in zip(chosen, p / max(p.sum(), 1e-9))}
    dists[12] = {}
    pairs = [(i, j) for i in range(14) for j in range(i + 1, 14)]  # 13: no distribution
    got = nmi_signals(pairs, dists, chunk=chunk)
    want = [nmi_signal(dists.get(i, {}), dists.get(j, {})) for i, j in pairs]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert got[pairs.index((0, 12))] == 0.0 and got[pairs.index((1, 13))] == 0.0


def test_type_rules_and_spread_distribution():
    assert canonical_types(["b", "a", "a", ""]) == ("a", "b")
    assert canonical_types(["b", "a"], "min") == ("a",)
    assert canonical_types([]) == (UNTYPED,) and canonical_types(None) == (UNTYPED,)
    idx = TypeIndex([0, 1, 2], [["P", "P2"], ["Q"], []])
    # (0→1): ½ to (P,Q), ½ to (P2,Q); (0→2): ½ to (P,∅), ½ to (P2,∅); over two triples
    dist = idx.distribution(np.array([0, 0]), np.array([1, 2]))
    assert dist == pytest.approx({("P", "Q"): 0.25, ("P2", "Q"): 0.25,
                                  ("P", UNTYPED): 0.25, ("P2", UNTYPED): 0.25})
    assert TypeIndex([0, 1], [["P", "P2"], ["Q"]], "min").distribution(
        np.array([0]), np.array([1])) == {("P", "Q"): 1.0}
    # an entity id unknown to the entities table counts as untyped
    assert idx.distribution(np.array([7]), np.array([1])) == {(UNTYPED, "Q"): 1.0}


@pytest.mark.parametrize("rule", ["spread", "min"])
def test_type_index_from_table_groups_lists_exactly(rule):
    """Arrow's grouping by joined lists gives the constructor's sets: a separator or backslash
    inside a name does not join two different lists; null lists and elements read as empty."""
    types = [["P", "P2"], ["Q"], [], None, ["P2", "P"], ["a\x1fb"], ["a", "b"], ["a\\", "b"],
             ["a", "\\b"], [None, "Q"], ["Q", ""]]
    table = pa.table({"id": [9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 10], "types": types}).slice(1)
    arrow, python = TypeIndex.from_table(table, rule), TypeIndex(table["id"].to_numpy(),
                                                                  table["types"].to_pylist(), rule)
    assert arrow.sets == python.sets
    assert np.array_equal(arrow.of, python.of)
    assert [arrow.sets[arrow.of[e]] for e in (5, 6, 7, 8)] == (
        [("a\x1fb",), ("a", "b"), ("a\\", "b"), ("\\b", "a")] if rule == "spread"
        else [("a\x1fb",), ("a",), ("a\\",), ("\\b",)])


@pytest.mark.parametrize("space_factor", [1, 100])
def test_key_counts_dense_and_sorted_agree_with_unique(space_factor):
    keys = np.random.default_rng(0).integers(0, 50, size=200) * space_factor
    expected = np.unique(keys, return_counts=True)
    got = key_counts(keys, 50 * space_factor)
    assert all(np.array_equal(e, g) for e, g in zip(expected, got))
    assert [len(a) for a in key_counts(np.array([], np.int64), 10)] == [0, 0]


def test_transe_neighbours_are_nearest_by_cosine():
    emb = np.array([[1, 0], [0.9, 0.1], [0, 1], [-1, 0.05], [0, 0]], dtype=np.float32)
    pairs = transe_neighbour_pairs(emb, np.arange(5), 1)
    # nearest of 0 is 1, of 1 is 0, of 2 is 1 (cos 0.11 vs 0.05), of 3 is 2; 4 has a zero vector
    assert pairs == [(0, 1), (1, 2), (2, 3)]
    assert all(4 not in p for p in transe_neighbour_pairs(emb, np.arange(5), 3))
    assert transe_neighbour_pairs(emb, np.arange(5), 0) == []


# ---------------------------------------------------------------------------------------------
# Spark


@pytest.mark.spark
def test_stats_and_pair_signals_by_hand(spark, tmp_path):
    from lokg.spark_jobs import relation_stats

    types = {0: ["P"], 1: ["P"], 2: ["P"], 3: ["P2", "P"], 10: ["Q"], 11: ["Q"], 12: [], 13: ["R"]}
    names = ["a", "b", "c", "d", "e"]
    a = [(0, 10), (1, 10), (2, 11)]
    triples = [(s, 0, o) for s, o in a] + [(s, 1, o) for s, o in a]  # b is identical to a
    triples += [(3, 2, 12)]  # c: one triple, head with two types, untyped tail
    triples += [(0, 3, 13), (1, 3, 10)]  # d: overlaps a, half of it (P, R)
    # e (id 4) has no triples
    inputs = write_toy(tmp_path, types, names, triples)
    result = relation_stats.run(config(), inputs, str(tmp_path / "out"))

    stats = {row["name"]: row for row in
             read_table(Path(result["outputs"]["relation_stats"]), "relation_stats").to_pylist()}
    assert list(stats) == names
    assert stats["a"]["entropy"] == pytest.approx(H_TWO_THIRDS)
    assert (stats["a"]["triples"], stats["a"]["heads"], stats["a"]["tails"],
            stats["a"]["entities"]) == (3, 3, 2, 5)
    assert type_pair_dict(stats["a"]["type_pairs"]) == pytest.approx({("P", "Q"): 1.0})
    assert stats["c"]["entropy"] == 0.0  # one triple
    assert (stats["c"]["triples"], stats["c"]["entities"]) == (1, 2)
    assert type_pair_dict(stats["c"]["type_pairs"]) == pytest.approx(
        {("P", UNTYPED): 0.5, ("P2", UNTYPED): 0.5})
    assert stats["d"]["entropy"] == pytest.approx(math.log(2))
    assert type_pair_dict(stats["d"]["type_pairs"]) == pytest.approx(
        {("P", "Q"): 0.5, ("P", "R"): 0.5})
    assert (stats["e"]["triples"], stats["e"]["entropy"], stats["e"]["type_pairs"]) == (0, 0.0, [])

    pairs = pairs_by_key(result["outputs"]["relation_pairs"])
    assert set(pairs) == {(0, 1), (0, 3), (1, 3)}  # c and e share no entity and no type pair
    assert pairs[(0, 1)]["nmi"] == pytest.approx(1.0)  # identical relations
    assert pairs[(0, 1)]["jaccard"] == pytest.approx(1.0)
    assert pairs[(0, 1)]["shared_entities"] == 5
    # E(a) = {0,1,2,10,11}, E(d) = {0,1,10,13}: 3 shared of 6
    assert pairs[(0, 3)]["shared_entities"] == 3
    assert pairs[(0, 3)]["jaccard"] == pytest.approx(0.5)
    assert pairs[(0, 3)]["nmi"] == pytest.approx(1 - JSD_ONE_VS_HALF)
    assert pairs[(0, 3)]["source"] == "entity,type"
    assert result["report"]["candidate_pairs"] == 3
    assert result["report"]["transe"].startswith("skipped")

    # the driver-side recomputation used by scos_merge agrees with Spark
    idx = TypeIndex.from_table(read_table(Path(inputs["entities"]), "entities"))
    for rid, name in enumerate(names):
        so = np.array([(s, o) for s, r, o in triples if r == rid], dtype=np.int64).reshape(-1, 2)
        assert tail_entropy(so[:, 1]) == pytest.approx(stats[name]["entropy"])
        assert idx.distribution(so[:, 0], so[:, 1]) == pytest.approx(
            type_pair_dict(stats[name]["type_pairs"]))


# Candidate toy: r0–r1 share entity 0 only; r2–r3 share type pair (D, E) only; r4 is isolated;
# r5–r6 share entity 16 and hub entity 9; r7 touches only the hub (and r5/r6 through it).
CAND_TYPES = {0: ["A"], 1: ["B"], 2: ["C"], 3: ["D"], 4: ["E"], 5: ["D"], 6: ["E"], 7: ["F"],
              8: ["G"], 9: ["H"], 10: ["I"], 11: ["J"], 12: ["K"], 13: ["L"], 14: ["M"], 16: ["O"]}
CAND_TRIPLES = [(0, 0, 1), (0, 1, 2), (3, 2, 4), (5, 3, 6), (7, 4, 8),
                (9, 5, 10), (16, 5, 11), (9, 6, 12), (16, 6, 13), (14, 7, 9)]


def _brute_force_sharing(triples, types) -> set[tuple[int, int]]:
    ents, tps = {}, {}
    for s, r, o in triples:
        ents.setdefault(r, set()).update((s, o))
        tps.setdefault(r, set()).update(itertools.product(types.get(s) or [UNTYPED],
                                                          types.get(o) or [UNTYPED]))
    return {(i, j) for i, j in itertools.combinations(sorted(ents), 2)
            if ents[i] & ents[j] or tps[i] & tps[j]}


@pytest.mark.spark
def test_candidates_hubs_and_transe(spark, tmp_path):
    from lokg.spark_jobs import relation_stats

    names = [f"r{i}" for i in range(8)]
    emb = np.eye(8, dtype=np.float32)
    emb[4] = emb[2] + 0.1 * emb[4]  # r4's nearest TransE neighbour is r2
    inputs = write_toy(tmp_path, CAND_TYPES, names, CAND_TRIPLES, emb)
    result = relation_stats.run(config(max_relations_per_entity=2, transe_neighbours=1),
                                inputs, str(tmp_path / "out"))
    pairs = pairs_by_key(result["outputs"]["relation_pairs"])
    sources = {k: v["source"] for k, v in pairs.items()}
    assert "transe" in sources[(2, 4)]  # r2, r4 share neither entities nor type pairs
    # the join-generated sources, TransE aside (the other vectors are orthogonal: ties)
    joined = {k: ",".join(t for t in v.split(",") if t != "transe") for k, v in sources.items()}
    joined = {k: v for k, v in joined.items() if v}
    # r7 shares only the hub entity 9 (3 relations > cap 2): no entity candidate with r5/r6
    assert joined == {(0, 1): "entity", (2, 3): "type", (5, 6): "entity"}
    # the hub is skipped for candidates but still counted: E5 = {9,10,16,11}, E6 = {9,12,16,13}
    assert pairs[(5, 6)]["shared_entities"] == 2
    assert pairs[(5, 6)]["jaccard"] == pytest.approx(2 / 6)
    assert pairs[(2, 3)]["jaccard"] == 0.0 and pairs[(2, 3)]["nmi"] == pytest.approx(1.0)
    assert pairs[(2, 4)]["nmi"] == 0.0 and pairs[(2, 4)]["jaccard"] == 0.0
    assert pairs[(0, 1)]["nmi"] == pytest.approx(0.0)  # (A,B) vs (A,C): disjoint roles
    assert result["report"]["hub_entities_skipped"] == 1
    assert result["report"]["transe_candidates"] > 0

    # without hubs, without a share floor and without TransE: exactly the pairs that share
    # an entity or a type pair
    del inputs["relation_embeddings"]
    result = relation_stats.run(config(max_relations_per_entity=1000, type_pair_min_share=0.0),
                                inputs, str(tmp_path / "out2"))
    got = set(pairs_by_key(result["outputs"]["relation_pairs"]))
    assert got == _brute_force_sharing(CAND_TRIPLES, CAND_TYPES)
    assert got == {(0, 1), (2, 3), (5, 6), (5, 7), (6, 7)}


def _outputs(result: dict) -> tuple[list[dict], list[dict]]:
    stats = read_table(Path(result["outputs"]["relation_stats"]), "relation_stats").to_pylist()
    for row in stats:
        row["type_pairs"] = type_pair_dict(row["type_pairs"])
    pairs = read_table(Path(result["outputs"]["relation_pairs"]), "relation_pairs")
    return stats, pairs.sort_by([("r_i", "ascending"), ("r_j", "ascending")]).to_pylist()


def _same_rows(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x:
            if isinstance(x[key], (float, dict)):
                assert x[key] == pytest.approx(y[key], abs=1e-9), key
            else:
                assert x[key] == y[key], key


#: The stage's three ways, by config: the passes and the pair signals on the driver (the
#: defaults), the passes in Spark with the pair signals on the driver, everything in Spark
PATHS = {"driver": {}, "driver_pairs": {"driver_max_triples": 0},
         "spark": {"driver_max_relations": 0}}


def _run_paths(inputs: dict, out: Path, monkeypatch, **settings) -> dict:
    """The stage on each of ``PATHS``; the all-driver run fails if it asks for a Spark session."""
    from lokg.spark_jobs import relation_stats, session

    results = {}
    for name, limits in PATHS.items():
        with monkeypatch.context() as patch:
            if name == "driver":
                patch.setattr(session, "get_spark", _no_session)
            results[name] = relation_stats.run(config(**settings, **limits), inputs, str(out / name))
    assert {p: (r["report"]["passes"], r["report"]["path"]) for p, r in results.items()} == {
        "driver": ("driver", "driver"), "driver_pairs": ("spark", "driver"),
        "spark": ("spark", "spark")}
    return results


def _no_session(*_):
    raise AssertionError("the driver path asked for a Spark session")


def _assert_same_outputs(results: dict) -> None:
    """Every path's tables hold the same rows (floats to 1e-9) and the same report facts."""
    (d_stats, d_pairs), *others = (_outputs(r) for r in results.values())
    for stats, pairs in others:
        _same_rows(d_stats, stats)
        _same_rows(d_pairs, pairs)
    assert d_pairs  # every data set here has candidate pairs
    for key in ("candidate_pairs", "candidate_pairs_by_source", "hub_entities_skipped",
                "hub_type_pairs_skipped", "transe_candidates", "triples"):
        assert len({str(r["report"][key]) for r in results.values()}) == 1, key


@pytest.mark.spark
@pytest.mark.parametrize("toy", ["by_hand", "candidates"])
def test_driver_and_spark_paths_give_the_same_rows(spark, tmp_path, monkeypatch, toy):
    """The three paths give the same tables, hubs, TransE candidates, untyped and multi-typed
    entities included."""
    if toy == "by_hand":
        types = {0: ["P"], 1: ["P"], 2: ["P"], 3: ["P2", "P"], 10: ["Q"], 11: ["Q"], 12: [],
                 13: ["R"]}
        triples = [(0, 0, 10), (1, 0, 10), (2, 0, 11), (0, 1, 10), (3, 2, 12), (0, 3, 13),
                   (1, 3, 10)]
        inputs, extra = write_toy(tmp_path, types, list("abcde"), triples), {}
    else:
        emb = np.eye(8, dtype=np.float32)
        emb[4] = emb[2] + 0.1 * emb[4]
        inputs = write_toy(tmp_path, CAND_TYPES, [f"r{i}" for i in range(8)], CAND_TRIPLES, emb)
        extra = {"max_relations_per_entity": 2, "transe_neighbours": 1, "type_rule": "min"}
    _assert_same_outputs(_run_paths(inputs, tmp_path, monkeypatch, **extra))


@pytest.mark.spark
@pytest.mark.parametrize("settings", [{}, {"max_relations_per_entity": 4, "type_rule": "min"}])
def test_the_driver_passes_equal_spark_on_generator_data(spark, tmp_path, monkeypatch, settings):
    """Generator data ingested and typed (entity_types), as a build feeds the stage: the
    all-driver path writes the same tables as the other two exactly, hub entities included
    (a cap of 4 relations makes some): the same schemas, nullability included, and the same
    row digests (the P_r and H(r) are rounded the same way from the same integer counts)."""
    from lokg.pipeline.refresh import same_rows
    from lokg.pipeline.synth import generate
    from lokg.spark_jobs import entity_types, ingest

    generate(tmp_path / "dump", n_triples=3000, seed=4, n_questions=0)
    staged = ingest.run({"ingest": {"format": "synth"}, "engine": {"name": "duckdb"}},
                        {"dump": str(tmp_path / "dump")}, str(tmp_path / "ingest"))["outputs"]
    staged.update(entity_types.run({}, staged, str(tmp_path / "types"))["outputs"])
    results = _run_paths(staged, tmp_path, monkeypatch, **settings)
    _assert_same_outputs(results)
    assert bool(results["driver"]["report"]["hub_entities_skipped"]) == bool(settings)
    for table in ("relation_stats", "relation_pairs"):
        for path in ("driver_pairs", "spark"):
            assert same_rows(results["driver"]["outputs"][table],
                             results[path]["outputs"][table]), (table, path)
        for path in ("driver", "spark"):
            first = table_files(Path(results[path]["outputs"][table]))[0]
            check_schema(table, pq.read_schema(first), first)


def test_tail_entropy_is_the_same_in_any_row_order():
    """H(r) from a tail histogram is summed exactly: rows in another order (another Spark
    partitioning, the driver's numpy order) give the same bits, where a plain float sum of the
    same terms does not; and it is H of the tails the histogram counts."""
    from lokg.spark_jobs.relation_stats_math import tail_entropy
    from lokg.spark_jobs.relation_stats_driver import tail_entropies

    rng = np.random.default_rng(3)
    c = np.unique(rng.integers(1, 3000, 400))
    k = rng.integers(1, 20, len(c))
    r = np.zeros(len(c), np.int64)
    order = rng.permutation(len(c))
    terms = k * c * np.log(c)
    assert sum(terms.tolist()) != sum(terms[order].tolist())  # the data exercises the order
    exact = tail_entropies(r, c, k, digits=None)  # the last bits too, not only 12 decimals
    assert exact == tail_entropies(r[order], c[order], k[order], digits=None)
    tails = np.repeat(np.arange(int(k.sum())), np.repeat(c, k))  # k tails with c triples each
    assert tail_entropies(r, c, k)[0] == pytest.approx(tail_entropy(tails), abs=1e-9)

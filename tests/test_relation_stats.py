"""relation_stats: H(r), type-pair distributions, NMI (1 − JSD bits), Jaccard, candidate pairs,
on each SQL engine (the ``engine_config`` fixture)."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lokg.runtime.contract import check_schema, read_table, table_files
from lokg.spark_jobs.engine import open_engine
from lokg.spark_jobs.relation_stats import (
    UNTYPED,
    ClusterSignals,
    tail_entropies,
    transe_neighbour_pairs,
)
from lokg.testing.stages import H_TWO_THIRDS, write_toy

# JSD in bits of {x: 1} vs {x: ½, y: ½}, by hand: M = {x: ¾, y: ¼};
# ½·1·log2(1/¾) + ½·(½·log2(½/¾) + ½·log2(½/¼)) = ½·log2(4/3) + ¼·log2(2/3) + ¼
JSD_ONE_VS_HALF = 0.5 * math.log2(4 / 3) + 0.25 * math.log2(2 / 3) + 0.25


# The definitions, by hand (the stage's SQL must agree with them)


def type_pair_dict(entries) -> dict[tuple[str, str], float]:
    """A ``type_pairs`` cell as {(head_type, tail_type): p}."""
    return {(d["head_type"], d["tail_type"]): d["p"] for d in entries or ()}


def tail_entropy(tails) -> float:
    """H in nats of the tails of a relation's distinct (s, o) pairs."""
    counts = Counter(np.asarray(tails).tolist())
    n = sum(counts.values())
    return max(0.0, -sum(c / n * math.log(c / n) for c in counts.values()))


def type_set(types, rule: str) -> list[str]:
    clean = sorted({t for t in types or () if t}) or [UNTYPED]
    return clean[:1] if rule == "min" else clean


def distribution(s, o, types: dict, rule: str = "spread") -> dict[tuple[str, str], float]:
    """P over (head type, tail type): each pair's 1/n spread evenly over the product of its
    entities' type sets."""
    out: dict[tuple[str, str], float] = {}
    for head, tail in zip(s.tolist(), o.tolist()):
        hs, ts = type_set(types.get(head), rule), type_set(types.get(tail), rule)
        for key in itertools.product(hs, ts):
            out[key] = out.get(key, 0.0) + 1 / (len(s) * len(hs) * len(ts))
    return out


def nmi_signal(p: dict, q: dict) -> float:
    """1 − JSD_bits(P, Q); 0 when either is empty."""
    if not p or not q:
        return 0.0
    m = {k: (p.get(k, 0) + q.get(k, 0)) / 2 for k in set(p) | set(q)}
    jsd = sum(0.5 * d[k] * math.log2(d[k] / m[k]) for d in (p, q) for k in d if d[k] > 0)
    return 1.0 - min(1.0, max(0.0, jsd))


def config(engine_config: dict, **relation_stats) -> dict:
    return {**engine_config, "spark": {"master": "local[2]", "shuffle_partitions": 4},
            "relation_stats": relation_stats}


def pairs_by_key(path: str) -> dict[tuple[int, int], dict]:
    rows = read_table(Path(path), "relation_pairs").to_pylist()
    return {(row["r_i"], row["r_j"]): row for row in rows}


def test_transe_neighbours_are_nearest_by_cosine():
    emb = np.array([[1, 0], [0.9, 0.1], [0, 1], [-1, 0.05], [0, 0]], dtype=np.float32)
    pairs = transe_neighbour_pairs(emb, np.arange(5), 1)
    # nearest of 0 is 1, of 1 is 0, of 2 is 1 (cos 0.11 vs 0.05), of 3 is 2; 4 has a zero vector
    assert pairs == [(0, 1), (1, 2), (2, 3)]
    assert all(4 not in p for p in transe_neighbour_pairs(emb, np.arange(5), 3))
    assert transe_neighbour_pairs(emb, np.arange(5), 0) == []


#: The by-hand toy: b (1) is identical to a (0); c (2) has one triple, its head two types, its
#: tail none; d (3) overlaps a, half of it (P, R); e (4) has no triples
HAND_TYPES = {0: ["P"], 1: ["P"], 2: ["P"], 3: ["P2", "P"], 10: ["Q"], 11: ["Q"], 12: [],
              13: ["R"]}
HAND_TRIPLES = [(0, 0, 10), (1, 0, 10), (2, 0, 11), (0, 1, 10), (1, 1, 10), (2, 1, 11),
                (3, 2, 12), (0, 3, 13), (1, 3, 10)]


def test_stats_and_pair_signals_by_hand(engine_config, tmp_path):
    from lokg.spark_jobs import relation_stats

    names = ["a", "b", "c", "d", "e"]
    inputs = write_toy(tmp_path, HAND_TYPES, names, HAND_TRIPLES)
    result = relation_stats.run(config(engine_config), inputs, str(tmp_path / "out"))

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

    assert result["report"]["engine"] == engine_config["engine"]["name"]


@pytest.mark.parametrize("merged", [(0, 3), (1, 2)])
def test_a_merged_cluster_has_the_signals_of_one_relation(engine_config, tmp_path, merged):
    """ClusterSignals (scos_merge's measure) after merging two relations gives, bit for bit,
    the H, NMI and Jaccard the stage writes for a graph where the two are one relation."""
    from lokg.spark_jobs import relation_stats

    keep, gone = merged
    names = [f"r{i}" for i in range(5)]
    one = sorted({(s, keep if r == gone else r, o) for s, r, o in HAND_TRIPLES})
    whole = relation_stats.run(config(engine_config, type_pair_min_share=0.0),
                               write_toy(tmp_path / "one", HAND_TYPES, names, one),
                               str(tmp_path / "out"))["outputs"]
    stats = read_table(Path(whole["relation_stats"]), "relation_stats").to_pylist()
    pairs = pairs_by_key(whole["relation_pairs"])
    inputs = write_toy(tmp_path / "two", HAND_TYPES, names, HAND_TRIPLES)
    with open_engine({**config(engine_config)}, tmp_path) as engine:
        engine.register("graph", inputs["triples"])
        engine.register("entities", inputs["entities"])
        signals = ClusterSignals(engine, "spread")
        assert signals.merge(keep, gone, [keep, gone]) == stats[keep]["entropy"]
        others = [r for r in range(5) if r not in merged]
        measured = signals.pairs([(min(keep, r), max(keep, r)) for r in others])
    assert {k for k in pairs if keep in k} <= set(measured)
    for key, row in pairs.items():
        if keep in key:
            assert measured[key] == (row["nmi"], row["jaccard"])


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


def test_candidates_hubs_and_transe(engine_config, tmp_path):
    from lokg.spark_jobs import relation_stats

    names = [f"r{i}" for i in range(8)]
    emb = np.eye(8, dtype=np.float32)
    emb[4] = emb[2] + 0.1 * emb[4]  # r4's nearest TransE neighbour is r2
    inputs = write_toy(tmp_path, CAND_TYPES, names, CAND_TRIPLES, emb)
    result = relation_stats.run(config(engine_config, max_relations_per_entity=2,
                                       transe_neighbours=1),
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
    result = relation_stats.run(config(engine_config, max_relations_per_entity=1000,
                                       type_pair_min_share=0.0),
                                inputs, str(tmp_path / "out2"))
    got = set(pairs_by_key(result["outputs"]["relation_pairs"]))
    assert got == _brute_force_sharing(CAND_TRIPLES, CAND_TYPES)
    assert got == {(0, 1), (2, 3), (5, 6), (5, 7), (6, 7)}


def test_type_rule_min_keeps_each_entitys_smallest_type(engine_config, tmp_path):
    from lokg.spark_jobs import relation_stats

    types = {3: ["P2", "P"], 4: ["Q", "", "A"], 5: []}
    inputs = write_toy(tmp_path, types, ["a"], [(3, 0, 4), (3, 0, 5), (6, 0, 4)])
    result = relation_stats.run(config(engine_config, type_rule="min"), inputs,
                                str(tmp_path / "out"))
    stats = read_table(Path(result["outputs"]["relation_stats"]), "relation_stats").to_pylist()
    assert type_pair_dict(stats[0]["type_pairs"]) == pytest.approx(
        {("P", "A"): 1 / 3, ("P", UNTYPED): 1 / 3, (UNTYPED, "A"): 1 / 3})


@pytest.mark.parametrize("settings", [{}, {"max_relations_per_entity": 4, "type_rule": "min"}])
def test_generator_data_agrees_with_the_definitions(engine_config, tmp_path, settings):
    """Generator data ingested and typed (entity_types), as a build feeds the stage, hub
    entities included (a cap of 4 relations makes some): H(r) and P_r are those of their
    definitions (by hand, above), every pair sharing a non-hub entity or a
    type pair of mass >= the floor is a candidate, and each candidate's shared entities,
    Jaccard and NMI are those of its two relations' sets and distributions."""
    from lokg.pipeline.synth import generate
    from lokg.spark_jobs import entity_types, ingest, relation_stats

    generate(tmp_path / "dump", n_triples=3000, seed=4, n_questions=0)
    staged = ingest.run({"ingest": {"format": "synth"}, "engine": {"name": "duckdb"}},
                        {"dump": str(tmp_path / "dump")}, str(tmp_path / "ingest"))["outputs"]
    staged.update(entity_types.run({"engine": {"name": "duckdb"}}, staged,
                                   str(tmp_path / "types"))["outputs"])
    result = relation_stats.run(config(engine_config, **settings), staged, str(tmp_path / "out"))
    for table in ("relation_stats", "relation_pairs"):
        first = table_files(Path(result["outputs"][table]))[0]
        check_schema(table, pq.read_schema(first), first)
    assert bool(result["report"]["hub_entities_skipped"]) == bool(settings)

    triples = read_table(Path(staged["triples"]), columns=["s", "r", "o"]).to_pydict()
    entities = read_table(Path(staged["entities"]), columns=["id", "types"]).to_pydict()
    types = dict(zip(entities["id"], entities["types"]))
    s, r, o = (np.asarray(triples[c], np.int64) for c in "sro")
    stats = {row["r"]: row for row in read_table(
        Path(result["outputs"]["relation_stats"]), "relation_stats").to_pylist()}
    dists, ents = {}, {}
    for rid, row in stats.items():
        mine = r == rid
        dists[rid] = distribution(s[mine], o[mine], types,
                                  settings.get("type_rule", "spread"))
        ents[rid] = set(s[mine].tolist()) | set(o[mine].tolist())
        assert row["entropy"] == pytest.approx(tail_entropy(o[mine]), abs=1e-9)
        assert type_pair_dict(row["type_pairs"]) == pytest.approx(dists[rid], abs=1e-11)
        assert row["entities"] == len(ents[rid]) and row["triples"] == int(mine.sum())

    pairs = pairs_by_key(result["outputs"]["relation_pairs"])
    for (i, j), row in pairs.items():
        shared = len(ents[i] & ents[j])
        assert row["shared_entities"] == shared
        assert row["jaccard"] == pytest.approx(shared / len(ents[i] | ents[j]))
        assert row["nmi"] == pytest.approx(nmi_signal(dists[i], dists[j]), abs=1e-9)
    cap = settings.get("max_relations_per_entity", 200)
    touching: dict[int, set] = {}
    for rid, members in ents.items():
        for e in members:
            touching.setdefault(e, set()).add(rid)
    by_entity = {p for rs in touching.values() if len(rs) <= cap
                 for p in itertools.combinations(sorted(rs), 2)}
    by_type = {(i, j) for i, j in itertools.combinations(sorted(dists), 2)
               if any(p >= 0.01 and dists[j].get(k, 0.0) >= 0.01 for k, p in dists[i].items())}
    assert set(pairs) == by_entity | by_type  # no TransE input here; no type pair is that wide


def test_tail_entropy_is_the_same_in_any_row_order():
    """H(r) from a tail histogram is summed exactly: rows in another order (another engine's,
    another run's) give the same bits, where a plain float sum of the same terms does not;
    and it is H of the tails the histogram counts."""
    rng = np.random.default_rng(3)
    c = np.unique(rng.integers(1, 3000, 400))
    k = rng.integers(1, 20, len(c))
    order = rng.permutation(len(c))
    terms = k * c * np.log(c)
    assert sum(terms.tolist()) != sum(terms[order].tolist())  # the data exercises the order

    def entropy(at) -> float:
        hist = pa.table({"r": np.zeros(len(c), np.int64)[at], "c": c[at], "k": k[at]})
        return tail_entropies(hist).column("entropy")[0].as_py()

    assert entropy(np.arange(len(c))) == entropy(order)
    tails = np.repeat(np.arange(int(k.sum())), np.repeat(c, k))  # k tails with c triples each
    assert entropy(order) == pytest.approx(tail_entropy(tails), abs=1e-9)

"""TAIMR scorer and beam search (runtime/taimr.py): hand computations and brute force."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from lokg.runtime.contract import Store, TABLE_SCHEMAS, write_table
from lokg.runtime.taimr import EdgeGraph, paths_table, score_path, top_paths, uniform_edges


def triples_table(triples) -> pa.Table:
    s, r, o = (list(c) for c in zip(*triples)) if triples else ([], [], [])
    return pa.table({"s": s, "r": r, "o": o}, schema=TABLE_SCHEMAS["triples"])


def gain_table(mu) -> pa.Table:
    n = len(mu)
    return pa.table({"id": np.arange(n), "deg_in": np.zeros(n, np.int64),
                     "in_relations": np.zeros(n, np.int64), "mu": np.asarray(mu, float)},
                    schema=TABLE_SCHEMAS["node_gain"])


def edge_rows(edges: pa.Table) -> list[tuple]:
    return [tuple(row.values()) for row in edges.to_pylist()]


# ---------------------------------------------------------------------------------------------
# edges and graph


def test_uniform_edges_adds_inverses_and_normalises_per_source():
    # 0 -a-> 1, 0 -b-> 2, 2 -a-> 1: out-degrees with inverses: 0: 2, 1: 2 (a⁻¹ to 0 and 2), 2: 2
    edges = uniform_edges(triples_table([(0, 0, 1), (0, 1, 2), (2, 0, 1)]))
    assert edges.schema == TABLE_SCHEMAS["edges"]
    assert edge_rows(edges) == [
        (0, 0, 1, False, 0.5), (0, 1, 2, False, 0.5),
        (1, 0, 0, True, 0.5), (1, 0, 2, True, 0.5),
        (2, 0, 1, False, 0.5), (2, 1, 0, True, 0.5),
    ]


def test_uniform_edges_counts_a_self_loop_twice():
    edges = uniform_edges(triples_table([(0, 0, 0), (0, 1, 1)]))
    by_source = {}
    for s, _, _, _, att in edge_rows(edges):
        by_source.setdefault(s, []).append(att)
    assert by_source[0] == [pytest.approx(1 / 3)] * 3  # a→a forward, a→a inverse, a→1
    assert by_source[1] == [1.0]


HAND_EDGES = pa.table({  # head 0; α per source sums to 1
    "s": [0, 0, 1, 1, 2, 2, 3],
    "r": [5, 6, 7, 5, 7, 6, 8],
    "o": [1, 2, 2, 0, 1, 0, 2],
    "inverse": [False, False, False, True, True, True, True],
    "attention": [0.75, 0.25, 0.4, 0.6, 0.5, 0.5, 1.0],
}, schema=TABLE_SCHEMAS["edges"])
HAND_MU = [0.9, 2.0, 1.5, 0.3]  # node 3 has no incoming edge here: never reached


def test_score_path_matches_hand_computation():
    graph = EdgeGraph.from_tables(HAND_EDGES, gain_table(HAND_MU))
    lam = 0.5
    # 0 -5-> 1 -7-> 2: log α(0→1) + log α(1→2) + λ (log μ1 + log μ2)
    expected = math.log(0.75) + math.log(0.4) + lam * (math.log(2.0) + math.log(1.5))
    assert score_path(graph, 0, [5, 7], [False, False], [1, 2], lambda_topo=lam) == \
        pytest.approx(expected, rel=1e-12)
    # 0 -6-> 2 -7⁻¹-> 1, λ = 1
    assert score_path(graph, 0, [6, 7], [False, True], [2, 1]) == \
        pytest.approx(math.log(0.25) + math.log(0.5) + math.log(1.5) + math.log(2.0), rel=1e-12)
    with pytest.raises(ValueError, match="no edge 0 -\\[7⁻¹\\]-> 1"):
        score_path(graph, 0, [7], [True], [1])


def test_top_paths_on_the_hand_graph():
    graph = EdgeGraph.from_tables(HAND_EDGES, gain_table(HAND_MU))
    got = top_paths(graph, 0, max_hops=2, k_top=5).to_table().to_pylist()
    log = math.log
    # Group (5, forward): 0→1 scores log .75 + log 2 ≈ 0.405, 0→1→2 adds log .4 + log 1.5 < 0.
    # Group (6, forward): 0→2 scores log .25 + log 1.5; 0→2→1 adds log .5 + log 2 = 0 exactly,
    # a tie broken by the nodes: [2] before [2, 1]. Edges back to the head are never walked.
    assert [(r["rank"], r["relations"], r["inverses"], r["nodes"]) for r in got] == [
        (0, [5], [False], [1]), (1, [5, 7], [False, False], [1, 2]),
        (0, [6], [False], [2]), (1, [6, 7], [False, True], [2, 1]),
    ]
    assert [r["score"] for r in got] == pytest.approx([
        log(.75) + log(2.0), log(.75) + log(2.0) + log(.4) + log(1.5),
        log(.25) + log(1.5), log(.25) + log(1.5) + log(.5) + log(2.0)], rel=1e-12)
    assert got[2]["score"] == got[3]["score"]
    assert {r["head"] for r in got} == {0}


def test_graph_refuses_inconsistent_tables():
    gain = gain_table(HAND_MU)
    with pytest.raises(ValueError, match="mu = 0 to entity 2"):
        EdgeGraph.from_tables(HAND_EDGES, gain_table([0.9, 2.0, 0.0, 0.3]))
    with pytest.raises(ValueError, match="outside the 3 entities"):
        EdgeGraph.from_tables(HAND_EDGES, gain_table(HAND_MU[:3]))
    bad = HAND_EDGES.set_column(4, "attention", pa.array([0.75, np.nan, .4, .6, .5, .5, 1.0]))
    with pytest.raises(ValueError, match=r"edge \(0, 6, 2\) has nan"):
        EdgeGraph.from_tables(bad, gain)
    with pytest.raises(ValueError, match="dense entity ids"):
        EdgeGraph.from_tables(HAND_EDGES, gain.set_column(0, "id", pa.array([0, 1, 2, 7])))
    graph = EdgeGraph.from_tables(HAND_EDGES, gain)
    with pytest.raises(ValueError, match="head 4 is not an entity id"):
        top_paths(graph, 4)
    with pytest.raises(ValueError, match="must be >= 1"):
        top_paths(graph, 0, k_top=0)


def test_graph_loads_from_paths_and_from_a_published_build(tmp_path):
    triples = triples_table([(0, 0, 1), (1, 1, 2), (2, 0, 3), (3, 1, 0)])
    tables = {"edges": uniform_edges(triples), "node_gain": gain_table([1.0, 2.0, 1.5, 0.5]),
              "triples": triples,
              "relations": pa.table({"id": [0, 1], "name": ["a", "b"]}),
              "entities": pa.table({"id": np.arange(4), "key": list("wxyz"), "name": list("wxyz"),
                                    "aliases": [[]] * 4, "description": [None] * 4,
                                    "types": [[]] * 4, "attributes": [[]] * 4})}
    paths = {}
    for name, table in tables.items():
        paths[name] = tmp_path / "staging" / f"{name}.parquet"
        write_table(name, table, paths[name])
    direct = EdgeGraph.from_tables(tables["edges"], tables["node_gain"])
    staged = EdgeGraph.from_paths(paths["edges"], paths["node_gain"])
    build = Store(tmp_path / "store").publish("b1", paths)
    published = EdgeGraph.from_build(build)
    expected = top_paths(direct, 0).to_table()
    assert top_paths(staged, 0).to_table().equals(expected)
    assert top_paths(published, 0).to_table().equals(expected)
    assert expected.num_rows == 6  # 2 groups, paths of 1, 2, 3 hops on the 4-cycle


def test_a_head_without_edges_has_no_paths():
    graph = EdgeGraph.from_tables(HAND_EDGES, gain_table(HAND_MU + [0.0]))
    paths = top_paths(graph, 4)
    assert len(paths) == 0
    assert paths.to_table().schema == TABLE_SCHEMAS["path_cache"]
    assert paths_table([]).num_rows == 0


# ---------------------------------------------------------------------------------------------
# beam search against brute force


def random_graph(seed: int, uniform: bool) -> tuple[EdgeGraph, pa.Table]:
    """A small multigraph with self-loops and parallel edges; μ > 0 exactly on reached nodes."""
    rng = np.random.default_rng(seed)
    n, m, n_rel = int(rng.integers(4, 10)), int(rng.integers(4, 22)), int(rng.integers(1, 4))
    triples = sorted({tuple(int(x) for x in t) for t in
                      zip(rng.integers(0, n, m), rng.integers(0, n_rel, m), rng.integers(0, n, m))})
    edges = uniform_edges(triples_table(triples))
    if not uniform:
        weight = rng.uniform(0.05, 1.0, edges.num_rows)
        s = edges.column("s").to_numpy()
        weight /= np.bincount(s, weights=weight)[s]
        edges = edges.set_column(4, "attention", pa.array(weight))
    mu = np.zeros(n)
    reached = np.unique(edges.column("o").to_numpy())
    mu[reached] = rng.choice([0.5, 1.0, 1.5, 3.0], len(reached)) if uniform \
        else rng.uniform(0.1, 3.0, len(reached))
    return EdgeGraph.from_tables(edges, gain_table(mu)), edges


def brute_force_paths(graph: EdgeGraph, edges: pa.Table, head: int, max_hops: int, k_top: int,
                      lambda_topo: float) -> list[tuple]:
    """Every simple path of 1..max_hops hops, scored by score_path, top k_top per group,
    ordered as the contract says (group, −score, nodes, relations, inverses)."""
    out: dict[int, list] = {}
    for s, r, o, inv, _ in edge_rows(edges):
        out.setdefault(s, []).append((r, inv, o))
    found = []

    def walk(node, rels, invs, nodes):
        if rels:
            found.append((tuple(rels), tuple(invs), tuple(nodes)))
        if len(rels) == max_hops:
            return
        for r, inv, o in out.get(node, []):
            if o != head and o not in nodes:
                walk(o, rels + [r], invs + [inv], nodes + [o])

    walk(head, [], [], [])

    def pad(seq, fill):
        return list(seq) + [fill] * (max_hops - len(seq))

    scored = [(score_path(graph, head, *p, lambda_topo=lambda_topo), p) for p in found]
    scored.sort(key=lambda sp: ((sp[1][0][0], sp[1][1][0]), -sp[0], pad(sp[1][2], -1),
                                pad(sp[1][0], -1), pad(sp[1][1], False)))
    result, rank, last = [], 0, None
    for score, (rels, invs, nodes) in scored:
        key = (rels[0], invs[0])
        rank = rank + 1 if key == last else 0
        last = key
        if rank < k_top:
            result.append((rank, score, list(rels), list(invs), list(nodes)))
    return result


def as_tuples(paths) -> list[tuple]:
    return [(row["rank"], row["score"], row["relations"], row["inverses"], row["nodes"])
            for row in paths.to_table().to_pylist()]


@pytest.mark.parametrize("uniform", [True, False], ids=["uniform", "random_attention"])
@pytest.mark.parametrize("seed", range(12))
def test_top_paths_equals_brute_force_with_a_wide_beam(seed, uniform):
    graph, edges = random_graph(seed, uniform)
    rng = np.random.default_rng(1000 + seed)
    for head in range(graph.n_nodes):
        max_hops, k_top = int(rng.integers(1, 4)), int(rng.choice([1, 2, 3, 50]))
        lam = float(rng.choice([0.0, 0.5, 1.0, 2.0]))
        got = top_paths(graph, head, max_hops=max_hops, k_top=k_top, beam_width=10_000,
                        lambda_topo=lam)
        assert as_tuples(got) == brute_force_paths(graph, edges, head, max_hops, k_top, lam)


def partial_paths_per_group(graph, edges, head, max_hops) -> int:
    """The most partial paths any (group, length) holds — the beam that makes search exact."""
    every = brute_force_paths(graph, edges, head, max_hops, 10 ** 9, 1.0)
    counts: dict = {}
    for _, _, rels, invs, _ in every:
        key = (rels[0], invs[0], len(rels))
        counts[key] = counts.get(key, 0) + 1
    return max(counts.values(), default=1)


@pytest.mark.parametrize("seed", range(12))
def test_a_beam_as_wide_as_the_partial_paths_is_exact_even_below_the_out_degree(seed):
    """Parents are first extended along their best out-edges only; the refill of parents whose
    edges lead back to the path must keep the search exact."""
    graph, edges = random_graph(seed, uniform=False)
    for head in range(graph.n_nodes):
        beam = partial_paths_per_group(graph, edges, head, 3)
        for k_top in (1, 2, 5):
            got = top_paths(graph, head, max_hops=3, k_top=k_top, beam_width=beam)
            assert as_tuples(got) == brute_force_paths(graph, edges, head, 3, k_top, 1.0)


@pytest.mark.parametrize("seed", range(8))
def test_a_narrow_beam_returns_valid_ranked_paths(seed):
    graph, edges = random_graph(seed + 50, uniform=False)
    for head in range(graph.n_nodes):
        exact = brute_force_paths(graph, edges, head, 3, 3, 1.0)
        got = as_tuples(top_paths(graph, head, max_hops=3, k_top=3, beam_width=1))
        assert len(got) <= len(exact)
        previous = None
        for rank, score, rels, invs, nodes in got:
            assert len(set(nodes) | {head}) == len(nodes) + 1  # simple
            assert score == score_path(graph, head, rels, invs, nodes)
            group = (rels[0], invs[0])
            if previous is not None and group == previous[0]:
                assert rank == previous[1] + 1 and score <= previous[2]
            else:
                assert rank == 0 and (previous is None or group > previous[0])
            previous = (group, rank, score)
        # the best path of each group is a 1-hop path or beats it, so group heads agree
        best = {(r[2][0], r[3][0]) for r in exact}
        assert {(r[2][0], r[3][0]) for r in got} == best


def custom_graph(triples, attention: dict, mu) -> EdgeGraph:
    """uniform_edges of the triples with α overridden per (s, o) edge."""
    edges = uniform_edges(triples_table(triples))
    alpha = [attention.get((s, o), a) for s, _, o, _, a in edge_rows(edges)]
    return EdgeGraph.from_tables(edges.set_column(4, "attention", pa.array(alpha)), gain_table(mu))


def test_edges_back_to_the_path_do_not_starve_a_parent():
    """Node 1's best out-edges all lead back to the head; the parent 0→1 must still be
    extended along its next edges (the refill), or the group's best path 0→1→2 is lost."""
    triples = [(0, 0, 1)] + [(1, r, 0) for r in range(1, 7)] + [(1, 7, 2), (1, 8, 3)]
    attention = {(1, 0): 0.9 / 7, (1, 2): 0.05, (1, 3): 0.05}
    graph = custom_graph(triples, attention, [50.0, 1.0, 50.0, 1.0])
    got = top_paths(graph, 0, max_hops=2, k_top=1, beam_width=1).to_table().to_pylist()
    best = {(r["relations"][0], r["inverses"][0]): r["nodes"] for r in got}
    assert best[(0, False)] == [1, 2]


def test_a_score_tie_at_the_last_cut_is_broken_by_path_not_by_search_order():
    """0→2 is the better parent, so 0→2→3 is generated before 0→1→5; both score A + B exactly,
    and the contract order (nodes) puts [1, 5] first."""
    triples = [(0, 0, 1), (0, 0, 2), (1, 1, 5), (2, 2, 3)]
    attention = {(0, 1): 0.4, (0, 2): 0.6, (1, 5): 0.6, (1, 0): 0.4, (2, 3): 0.4, (2, 0): 0.6}
    graph = custom_graph(triples, attention, [1.0, 4.0, 5.0, 4.0, 1.0, 5.0])
    got = top_paths(graph, 0, max_hops=2, k_top=1).to_table().to_pylist()
    assert [(r["relations"], r["nodes"]) for r in got] == [([0, 1], [1, 5])]
    assert got[0]["score"] == score_path(graph, 0, [0, 2], [False, False], [2, 3])


def test_hub_fan_out_is_bounded_by_k_top():
    """A head whose neighbours are hubs: k_top bounds the output; with every 1-hop parent in
    the beam, the 2-hop ranking is exact although each hub has 500 children > beam_width."""
    rng = np.random.default_rng(3)
    triples = [(0, 0, h) for h in range(1, 4)]  # head → 3 hubs
    triples += [(h, 1, int(x)) for h in range(1, 4) for x in rng.choice(np.arange(4, 3000), 500,
                                                                          replace=False)]
    triples = sorted(set(triples))
    edges = uniform_edges(triples_table(triples))
    n = 3000
    mu = np.zeros(n)
    reached = np.unique(edges.column("o").to_numpy())
    mu[reached] = rng.uniform(0.1, 3.0, len(reached))
    graph = EdgeGraph.from_tables(edges, gain_table(mu))
    paths = top_paths(graph, 0, max_hops=3, k_top=20, beam_width=16)
    assert len(paths) == 20  # one group (relation 0 forward)
    exact = brute_force_paths(graph, edges, 0, 2, 20, 1.0)
    two_hop = top_paths(graph, 0, max_hops=2, k_top=20, beam_width=16)
    assert as_tuples(two_hop) == exact  # every 1-hop parent kept: the 2-hop cut is exact


def test_a_graph_from_shuffled_edges_equals_the_one_from_sorted_edges():
    # the published edges table is sorted and skips the sort; any other order is sorted first
    edges = uniform_edges(triples_table([(0, 0, 1), (0, 1, 2), (2, 0, 1), (1, 1, 3), (3, 0, 0)]))
    mu = gain_table([1.0, 0.5, 2.0, 1.5])
    shuffled = edges.take(np.random.default_rng(0).permutation(edges.num_rows))
    a, b = EdgeGraph.from_tables(edges, mu), EdgeGraph.from_tables(shuffled, mu)
    for name in ("indptr", "targets", "relations", "inverse", "log_alpha"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.targets.dtype == a.relations.dtype == np.int32
    paths = top_paths(b, 0)
    assert paths.relations.dtype == paths.nodes.dtype == np.int64
    assert paths.to_table().equals(top_paths(a, 0).to_table())


def test_a_graph_with_triples_keeps_its_attention_and_gives_new_edges_an_untrained_one():
    # 0 -a-> 1 with learned attention 0.8 (and 0.3 back); then 1 -b-> 2 (2 a new node) added
    edges = pa.table({"s": [0, 1], "r": [0, 0], "o": [1, 0], "inverse": [False, True],
                      "attention": [0.8, 0.3]}, schema=TABLE_SCHEMAS["edges"])
    graph = EdgeGraph.from_tables(edges, gain_table([1.0, 0.5]))
    merged = graph.with_triples([1], [1], [2], 3, 0.25)
    rows = [(v, int(merged.relations[j]), int(merged.targets[j]), bool(merged.inverse[j]),
             round(math.exp(merged.log_alpha[j]), 6))
            for v in range(3) for j in range(merged.indptr[v], merged.indptr[v + 1])]
    assert rows == [(0, 0, 1, False, 0.8), (1, 0, 0, True, 0.3), (1, 1, 2, False, 0.5),
                    (2, 1, 1, True, 1.0)]  # 1 has two out-edges now, 2 one
    assert np.allclose(np.exp(merged.log_mu), [1.0, 0.5, 0.25])
    assert graph.n_nodes == 2 and top_paths(merged, 0).nodes.max() == 2
    with pytest.raises(ValueError, match="n_nodes"):
        graph.with_triples([0], [0], [1], 1, 1.0)

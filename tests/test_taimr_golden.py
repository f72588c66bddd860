"""The batched beam search (runtime.taimr.top_paths_table, and top_paths on top of it) against
golden output of the search it replaced (one head at a time, every last-hop child generated),
written once by that code on the graphs below: tests/data/top_paths_golden.parquet.

Narrow beams and graphs with many tied scores (uniform attention, μ from four values) make the
tie-breaking at every cut matter, not only the ranking."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lokg.runtime.contract import TABLE_SCHEMAS, read_table
from lokg.runtime.taimr import EdgeGraph, paths_table, top_paths, top_paths_table, uniform_edges

GOLDEN = Path(__file__).parent / "data" / "top_paths_golden.parquet"
#: (uniform attention, search settings) of each golden case.
GOLDEN_CASES = [
    (True, dict(max_hops=3, k_top=3, beam_width=2, lambda_topo=1.0)),
    (True, dict(max_hops=3, k_top=20, beam_width=64, lambda_topo=1.0)),
    (False, dict(max_hops=3, k_top=5, beam_width=8, lambda_topo=0.5)),
    (False, dict(max_hops=2, k_top=4, beam_width=3, lambda_topo=2.0)),
    (True, dict(max_hops=1, k_top=2, beam_width=1, lambda_topo=1.0)),
    (True, dict(max_hops=4, k_top=2, beam_width=2, lambda_topo=1.0)),
]


def golden_graph(uniform: bool, seed: int = 7) -> tuple[pa.Table, pa.Table]:
    """``edges`` and ``node_gain`` of a seeded random multigraph (120 nodes, 700 triples, 5
    relations, hubs by a skewed head draw); μ > 0 exactly on nodes with an incoming edge."""
    rng = np.random.default_rng(seed)
    n, m = 120, 700
    s = np.minimum(rng.geometric(0.03, m) - 1, n - 1)
    triples = np.unique(np.column_stack([s, rng.integers(0, 5, m), rng.integers(0, n, m)]), axis=0)
    edges = uniform_edges(pa.table({"s": triples[:, 0], "r": triples[:, 1], "o": triples[:, 2]},
                                   schema=TABLE_SCHEMAS["triples"]))
    if not uniform:
        weight = rng.uniform(0.05, 1.0, edges.num_rows)
        src = edges.column("s").to_numpy()
        edges = edges.set_column(4, "attention",
                                 pa.array(weight / np.bincount(src, weights=weight)[src]))
    mu = np.zeros(n)
    reached = np.unique(edges.column("o").to_numpy())
    mu[reached] = rng.choice([0.5, 1.0, 1.5, 3.0], len(reached)) if uniform \
        else rng.uniform(0.1, 3.0, len(reached))
    gain = pa.table({"id": np.arange(n), "deg_in": np.zeros(n, np.int64),
                     "in_relations": np.zeros(n, np.int64), "mu": mu},
                    schema=TABLE_SCHEMAS["node_gain"])
    return edges, gain


def golden_rows(case: int) -> pa.Table:
    table = read_table(GOLDEN)
    return table.filter(pc.equal(table["case"], case)).drop_columns(["case"])


@pytest.mark.parametrize("case", range(len(GOLDEN_CASES)))
def test_every_head_at_once_equals_the_golden_search(case):
    uniform, search = GOLDEN_CASES[case]
    graph = EdgeGraph.from_tables(*golden_graph(uniform))
    got = top_paths_table(graph, np.arange(graph.n_nodes), **search)
    assert got.num_rows > 0 and got.equals(golden_rows(case).cast(got.schema))


@pytest.mark.parametrize("case", [0, 2])
def test_one_head_at_a_time_equals_the_golden_search(case):
    uniform, search = GOLDEN_CASES[case]
    graph = EdgeGraph.from_tables(*golden_graph(uniform))
    got = paths_table(top_paths(graph, h, **search) for h in range(graph.n_nodes))
    assert got.equals(golden_rows(case).cast(got.schema))


@pytest.mark.parametrize("batch", [1, 7, 1000])
def test_head_order_and_batches_do_not_change_a_heads_rows(monkeypatch, batch):
    """Rows come in the order the heads are given, a head listed twice twice, whatever the
    batch size."""
    import lokg.runtime.taimr as taimr

    monkeypatch.setattr(taimr, "HEADS_PER_BATCH", batch)
    graph = EdgeGraph.from_tables(*golden_graph(False))
    heads = np.array([50, 3, 0, 3, 119, 7])
    got = top_paths_table(graph, heads, k_top=5, beam_width=8)
    assert got.equals(paths_table(top_paths(graph, int(h), k_top=5, beam_width=8) for h in heads))
    assert top_paths_table(graph, np.zeros(0, np.int64)).num_rows == 0


def test_an_unknown_head_is_refused_by_the_batched_search():
    graph = EdgeGraph.from_tables(*golden_graph(True))
    with pytest.raises(ValueError, match="head 120 is not an entity id"):
        top_paths_table(graph, [0, 120])

"""bench/path_cache_stability.py: cached paths rescored on another build's edges (in hop order,
a missing edge NaN) and compared as path sets."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from bench import path_cache_stability as stab
from lokg.runtime.contract import TABLE_SCHEMAS


def cache_rows(paths: list[tuple[int, list[int], list[bool], list[int]]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"head": h, "rank": 0, "score": 0.0, "relations": r, "inverses": i, "nodes": n}
         for h, r, i, n in paths], schema=TABLE_SCHEMAS["path_cache"])


def weights(edges: dict[tuple[int, int, bool, int], float]) -> pa.Table:
    keys = list(edges)
    return pa.table({"s": [k[0] for k in keys], "r": [k[1] for k in keys],
                     "inverse": [k[2] for k in keys], "o": [k[3] for k in keys],
                     "weight": list(edges.values())})


@pytest.mark.parametrize("gone", [None, (1, 5, True, 2)])
def test_paths_are_rescored_edge_by_edge_and_a_missing_edge_is_nan(gone):
    edges = {(0, 4, False, 1): -0.5, (1, 5, True, 2): -1.25, (2, 4, False, 3): -2.0,
             (3, 6, False, 0): -0.75}
    if gone:
        del edges[gone]
    rows = cache_rows([(0, [4], [False], [1]), (0, [4, 5, 4], [False, True, False], [1, 2, 3]),
                       (3, [6], [False], [0])])
    score = stab.rescored(rows, weights(edges))
    assert score[0] == -0.5 and score[2] == -0.75
    assert math.isnan(score[1]) if gone else score[1] == (-0.5 + -1.25) + -2.0


def test_path_sets_group_by_head():
    rows = cache_rows([(0, [4], [False], [1]), (0, [4, 5], [False, True], [1, 2]),
                       (3, [6], [False], [0])])
    found = stab.path_sets(rows)
    assert found == {0: {((4,), (False,), (1,)), ((4, 5), (False, True), (1, 2))},
                     3: {((6,), (False,), (0,))}}
    edges = stab.path_edges(rows)
    assert edges["s"].to_pylist() == [0, 0, 1, 3] and edges["hop"].to_pylist() == [0, 0, 1, 0]
    assert np.array_equal(edges["row"].to_numpy(), [0, 1, 1, 2])


def test_rewired_reach_walks_back_from_the_nodes_whose_out_edges_changed():
    # 0 → 1 → 2 → 3 (and 4 → 3): only 2's out-edge to 3 changed relation
    then = np.array([[0, 0, 0, 1], [1, 0, 0, 2], [2, 0, 0, 3], [4, 0, 0, 3]])
    now = then.copy()
    now[2, 1] = 7
    assert stab.rewired_reach(now, then, 2) == [1, 2, 3]  # {2}, +1, +0
    assert stab.rewired_reach(then, then, 2) == [0, 0, 0]

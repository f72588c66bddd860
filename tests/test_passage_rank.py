"""Graph-guided passage ranking (runtime/passage_rank.py) on a hand-made entity–passage graph.

Entities: 0 Ada (linked), 1 Bern (the bridge), 2 Cora, 3 Dov, 4 Eli, 5 Fay, 6 Gus, 7 Hal.
Passages (rows): 0 names Ada and Bern; 1 names Ada and Cora; 2 names Bern and Dov (the dense
retriever's best: the question's wording is about Dov's hop); 3 names Eli and Fay; 4 names Cora
and Eli; 5 names Gus and Hal (unconnected to the rest).
"""

from __future__ import annotations

import numpy as np
import pytest

from lokg.runtime.passage_rank import PassageGraph

PASSAGES = [[(0, 0, 1)], [(0, 1, 2)], [(1, 2, 3)], [(4, 0, 5)], [(2, 0, 4)], [(6, 0, 7)]]
N_ENTITIES = 8
DENSE = np.array([0.30, 0.30, 0.90, 0.10, 0.10, 0.05], np.float32)


@pytest.fixture(scope="module")
def graph() -> PassageGraph:
    return PassageGraph(PASSAGES, N_ENTITIES)


@pytest.mark.parametrize("dense", [DENSE, None], ids=["dense", "links-only"])
def test_a_passage_naming_the_seed_and_the_bridge_ranks_above_one_naming_the_seed_alone(
        graph, dense):
    mass = graph.rank([0], dense)
    assert mass[0] > mass[1]
    if dense is None:  # nothing reaches a passage unconnected to the seeds
        assert mass[5] == 0.0


def test_with_a_bridge_seed_the_joining_passage_ranks_first(graph):
    assert graph.top([0, 1], None, 2)[0] == 0


@pytest.mark.parametrize("entities", [[], [99], [-1]], ids=["none", "unknown", "negative"])
def test_dense_scores_alone_seed_the_walk_when_nothing_links(graph, entities):
    top = graph.top(entities, DENSE, 6)
    assert top[0] == 2
    assert sorted(top) == list(range(6))
    assert top.index(0) < top.index(3)  # a neighbour of the dense seed above one further off


def test_no_seed_no_ranking(graph):
    assert graph.rank([], None) is None
    assert graph.top([], None, 3) == []


@pytest.mark.parametrize("entities,dense", [([0], DENSE), ([], DENSE), ([0, 1], None)])
def test_the_ranking_is_deterministic_and_a_distribution(graph, entities, dense):
    first = graph.rank(entities, dense)
    again = PassageGraph(PASSAGES, N_ENTITIES).rank(entities, dense)
    assert np.array_equal(first, again)
    assert graph.top(entities, dense, 6) == graph.top(entities, dense, 6)
    assert 0 < first.sum() <= 1.0 + 1e-9


def test_an_empty_graph_ranks_by_the_dense_seeds_only():
    empty = PassageGraph([[], []], 0)
    assert empty.top([], np.array([0.1, 0.8], np.float32), 2) == [1, 0]


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_the_dense_seeds_are_the_best_scores_ties_by_row(k):
    from lokg.runtime.passage_rank import _best

    scores = np.array([0.2, 0.9, 0.2, 0.5, 0.9], np.float32)
    assert _best(scores, k).tolist() == [1, 4, 3, 0, 2][:k]


def test_the_query_setting_accepts_dense_and_graph_only():
    from lokg.runtime.query_settings import QuerySettings
    from lokg.runtime.settings import ConfigError

    assert QuerySettings.of({}).passage_ranking == "graph"
    assert QuerySettings.of({"query": {"passage_ranking": "dense"}}).passage_ranking == "dense"
    with pytest.raises(ConfigError, match="passage_ranking"):
        QuerySettings.of({"query": {"passage_ranking": "ppr"}})

"""bench/relknow_chain_ceiling.py: picking among the instantiating voted chains."""

from __future__ import annotations

from bench.relknow_chain_ceiling import kind_counts, vote_pick
from lokg.runtime.relknow import Vote


def test_votes_pick_by_weight_or_by_span_fit_and_only_among_instantiating_chains():
    votes = [Vote((0, 1), 0.9, True), Vote((2,), 0.5, True), Vote((2,), 0.3, True),
             Vote((3, 1), 2.0, False)]
    # (2,) sums 0.8 < 0.9; the chain that does not instantiate never wins however voted
    top, fitted = vote_pick(votes, {0: 0.1, 1: 0.1, 2: 0.9}, n_relations=4)
    assert top == (0, 1) and fitted == (2,)
    # an inverse hop (relation 2 backwards: hop 6) is fitted by its relation
    top, fitted = vote_pick([Vote((6,), 0.5, True), Vote((0,), 0.6, True)], {2: 1.0, 0: 0.2}, 4)
    assert top == (0,) and fitted == (6,)
    assert vote_pick([Vote((0,), 1.0, False)], {}, 4) == (None, None)


def test_kind_counts_say_what_a_filter_on_the_last_relation_would_reject():
    # gold (0, 1); kind {1}: the gold last relation is of it, a right chain kept
    assert kind_counts(frozenset({1}), (0, 1), (0, 1), 4) == {
        "head_kind": 1, "head_kind_gold_last": 1, "kind_rejects_right": 0,
        "kind_rejects_wrong": 0}
    # kind {2}: the right chain would be rejected; a wrong one ending in 3 too
    assert kind_counts(frozenset({2}), (0, 1), (0, 1), 4)["kind_rejects_right"] == 1
    assert kind_counts(frozenset({2}), (0, 3), (0, 1), 4)["kind_rejects_wrong"] == 1
    # an inverse last hop (relation 1 backwards: hop 5) is of the kind of relation 1
    assert kind_counts(frozenset({1}), (0, 5), (0, 1), 4)["kind_rejects_wrong"] == 0
    assert kind_counts(frozenset(), (0, 1), (0, 1), 4) == {}  # no kind named: nothing counted
    assert kind_counts(frozenset({1}), None, (0, 1), 4)["kind_rejects_wrong"] == 0

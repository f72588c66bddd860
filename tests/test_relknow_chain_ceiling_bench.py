"""bench/relknow_chain_ceiling.py: picking among the instantiating voted chains."""

from __future__ import annotations

from bench.relknow_chain_ceiling import vote_pick
from runtime.relknow import Vote


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

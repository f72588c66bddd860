"""bench.zero_shot_misses: a miss's class from the gold path and the followed chain."""

import pytest

from bench.zero_shot_misses import miss_class


@pytest.mark.parametrize("gold, chain, expected", [
    (["a"], None, "no chain"),
    (["a", "~b"], ["a"], "hop count"),
    (["a", "~b"], ["a", "b"], "direction"),
    (["a", "~b"], ["~b", "a"], "order"),
    (["a", "~b"], ["a", "~c"], "relation"),
    (["a", "~b"], ["a", "~b"], "right chain"),
])
def test_a_miss_is_classed_by_how_its_chain_differs_from_the_gold_path(gold, chain, expected):
    assert miss_class(gold, chain) == expected

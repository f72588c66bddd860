"""bench/relknow_phrase_scorer.py: the span–relation pairs it fits on and the held-out count."""

from __future__ import annotations

import numpy as np

from bench.relknow_phrase_scorer import aligned_pairs, held_out_hits, ridge_map


def test_each_gold_relation_takes_the_span_rated_highest_for_it_and_the_rest_is_filler():
    spans = [[(0, 1, "kid"), (1, 2, "job"), (2, 3, "reach")],
             [(0, 1, "kid"), (1, 2, "home")]]
    sims = [np.array([[0.9, 0.1, 0.0], [0.2, 0.8, 0.1], [0.3, 0.3, 0.3]]),
            np.array([[0.1, 0.9, 0.0], [0.2, 0.1, 0.7]])]
    positive, filler = aligned_pairs(spans, sims, [{0, 1}, {2}])
    # "kid" names relation 0 in the first question; the second aligns nothing to it
    assert positive == {"kid": 0, "job": 1, "home": 2}
    assert filler == ["reach"]
    # a span aligned to two relations is no pair
    twice, _ = aligned_pairs(spans, [sims[0], np.array([[0.1, 0.1, 0.9], [0.0, 0.0, 0.1]])],
                             [{0, 1}, {2}])
    assert "kid" not in twice and twice["job"] == 1


def test_the_ridge_map_stays_at_the_identity_when_heavily_anchored_and_fits_when_free():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 4))
    target = x @ rng.normal(size=(4, 4))
    assert np.allclose(ridge_map(x, target, 1e6), np.eye(4), atol=1e-3)
    assert np.allclose(x @ ridge_map(x, target, 1e-9), target, atol=1e-5)


def test_a_phrase_is_named_right_held_out_only_when_its_neighbours_say_so():
    names = np.eye(3)
    # two phrases per relation, each near its relation's name; the held-out one is found
    x = np.array([[0.9, 0.1, 0.0], [0.8, 0.2, 0.0], [0.1, 0.9, 0.0], [0.0, 0.8, 0.2],
                  [0.0, 0.1, 0.9], [0.1, 0.0, 0.8]])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    labels = np.array([0, 0, 1, 1, 2, 2])
    hits = held_out_hits(x, labels, names, np.zeros((1, 3)))
    assert hits["cosine"] == 6 and all(0 <= v <= 6 for v in hits.values())
    # a phrase mislabelled against its geometry is named wrong by the cosine
    wrong = held_out_hits(x, np.array([0, 0, 1, 1, 2, 0]), names, np.zeros((1, 3)))
    assert wrong["cosine"] == 5

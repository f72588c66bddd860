"""Answer normalisation and the DESIGN §5 metrics, on hand-computed cases."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lokg.common.metrics import (
    SUMMARY_KEYS,
    Outcome,
    Scores,
    normalise_answer,
    p95,
    score,
    summarise,
    without_latency,
)


@pytest.mark.parametrize("text, expected", [
    ("United_Kingdom", "united kingdom"),  # case, underscores
    ("  united   kingdom ", "united kingdom"),  # whitespace
    ("The Beatles", "beatles"),  # articles
    ("a tale of an hour", "tale of hour"),
    ("The The", "the the"),  # only articles: kept
    ("burnham-on-sea", "burnham on sea"),  # punctuation → space
    ("Washington, D.C.", "washington d c"),
    ("O'Brien", "obrien"),  # apostrophes deleted, any kind
    ("O’Brien", "obrien"),
    ("ＰＡＲＩＳ", "paris"),  # NFKC full-width
    ("Zürich", "zürich"),  # accents kept
    ("C++", "c++"),  # symbols kept
    ("...", ""),
])
def test_normalise_answer(text, expected):
    assert normalise_answer(text) == expected


def test_normalised_forms_compare_equal():
    assert normalise_answer("swedish_people") == normalise_answer("Swedish People")
    assert normalise_answer("the_united_states") == normalise_answer("United States.")


@pytest.mark.parametrize("predicted, gold, expected", [
    (["Paris"], ["paris"], (1, 1, 1)),
    # multi-answer F1: p = 1/3, r = 1/2 → 2·(1/6)/(5/6) = 0.4
    (["A", "B", "C"], ["A", "D"], (1, 1, 0.4)),
    # right answer second: H@1 0, Hit 1, p = r = 1/2
    (["X", "A"], ["A", "B"], (0, 1, 0.5)),
    # all gold found, nothing else: F1 1 with several answers
    (["B", "A"], ["A", "B"], (1, 1, 1)),
    # empty prediction
    ([], ["A"], (0, 0, 0)),
    # duplicates count once: P = {paris}, p = 1, r = 1/2 → 2/3
    (["Paris", "paris", "PARIS"], ["Paris", "Lyon"], (1, 1, 2 / 3)),
    # duplicates after normalisation: P = {beatles, x}, p = 1/2, r = 1 → 2/3
    (["the_beatles", "Beatles", "X"], ["The Beatles"], (1, 1, 2 / 3)),
    # H@1 after normalisation (PathQuestion keys against store names)
    (["United Kingdom"], ["united_kingdom"], (1, 1, 1)),
    # predictions that normalise to nothing are dropped before ranking
    (["...", "A"], ["A"], (1, 1, 1)),
    # wrong only
    (["B"], ["A"], (0, 0, 0)),
])
def test_score_hand_computed(predicted, gold, expected):
    got = score(predicted, gold)
    assert (got.h1, got.hit) == expected[:2]
    assert got.f1 == pytest.approx(expected[2], abs=1e-12)


words = st.sampled_from(["A", "b", "the C", "d_e", "F.", "g"])


@given(st.lists(words, max_size=6), st.lists(words, min_size=1, max_size=4))
def test_score_invariants(predicted, gold):
    s = score(predicted, gold)
    assert 0.0 <= s.f1 <= 1.0
    assert s.hit >= s.h1
    assert (s.f1 > 0) == (s.hit == 1.0)
    # only the first prediction's position matters: shuffling the rest keeps H@1 and F1
    if len(predicted) > 2:
        rest = list(reversed(predicted[1:]))
        assert score([predicted[0], *rest], gold) == s


def _outcome(h1, f1, tokens, knowledge=0, naive=0, latency=1.0, failed=0, calls=1):
    return Outcome(Scores(h1, float(f1 > 0), f1), tokens, calls, knowledge, naive, latency,
                   failed)


def test_summarise_hand_computed():
    outcomes = [
        _outcome(1, 1.0, 100, knowledge=50, naive=100, latency=10, calls=1),
        _outcome(0, 0.5, 200, knowledge=30, naive=60, latency=30, calls=2, failed=1),
        _outcome(0, 0.0, 300, knowledge=0, naive=0, latency=20, calls=3, failed=2),
    ]
    s = summarise(outcomes)
    assert tuple(s) == SUMMARY_KEYS
    assert s["n"] == 3
    assert s["H@1"] == pytest.approx(1 / 3, abs=1e-6)
    assert s["Hit"] == pytest.approx(2 / 3, abs=1e-6)
    assert s["F1"] == pytest.approx(0.5)
    assert s["TCR"] == pytest.approx(0.5)  # (0.5 + 0.5) / 2: the no-knowledge question left out
    assert s["tok/q"] == pytest.approx(200)
    assert s["calls/q"] == pytest.approx(2)
    assert s["P@1K"] == pytest.approx(1000 * 0.5 / 200)  # ratio of the means
    assert s["H@1K"] == pytest.approx(1000 * (1 / 3) / 200, abs=1e-6)
    assert s["latency_ms_mean"] == pytest.approx(20)
    assert s["latency_ms_p95"] == 30
    assert s["failed_calls"] == 3
    assert s["failed_questions"] == 2


def test_summarise_undefined_values_are_null():
    s = summarise([_outcome(1, 1.0, 0, calls=0), _outcome(0, 0.0, 0, calls=0)])
    assert s["tok/q"] == 0 and s["P@1K"] is None and s["H@1K"] is None
    assert s["TCR"] is None  # no question had knowledge
    with pytest.raises(ValueError, match="no questions"):
        summarise([])


def test_p95_nearest_rank():
    assert p95(list(range(1, 21))) == 19  # ⌈0.95·20⌉ = 19th smallest
    assert p95(list(range(1, 101))) == 95
    assert p95([7.0]) == 7.0


def test_without_latency_drops_only_latency():
    summary = {"m": summarise([_outcome(1, 1.0, 10)])}
    kept = without_latency(summary)["m"]
    assert set(kept) == set(SUMMARY_KEYS) - {"latency_ms_mean", "latency_ms_p95"}

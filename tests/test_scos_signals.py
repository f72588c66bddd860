"""scos_signals: the driver-side H(r), P_r under a type rule, JSD and NMI that scos_merge
recomputes for merged clusters."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from lokg.spark_jobs.scos_signals import (
    UNTYPED,
    TypeIndex,
    canonical_types,
    jsd_bits,
    key_counts,
    nmi_signal,
    tail_entropy,
)
from lokg.testing.stages import H_TWO_THIRDS

# JSD in bits of {x: 1} vs {x: ½, y: ½}, by hand: M = {x: ¾, y: ¼};
# ½·1·log2(1/¾) + ½·(½·log2(½/¾) + ½·log2(½/¼)) = ½·log2(4/3) + ¼·log2(2/3) + ¼
JSD_ONE_VS_HALF = 0.5 * math.log2(4 / 3) + 0.25 * math.log2(2 / 3) + 0.25


def test_tail_entropy_by_hand():
    assert tail_entropy(np.array([10, 10, 11])) == pytest.approx(H_TWO_THIRDS)
    assert tail_entropy(np.array([10])) == 0.0  # one triple
    assert tail_entropy(np.array([10, 10, 10])) == 0.0  # one tail
    assert tail_entropy(np.array([1, 2, 3, 4])) == pytest.approx(math.log(4))
    assert tail_entropy(np.array([], dtype=np.int64)) == 0.0


def test_jsd_bits_of_known_distributions():
    p = {("A", "B"): 1.0}
    assert jsd_bits(p, p) == pytest.approx(0.0)
    assert jsd_bits(p, {("A", "C"): 1.0}) == pytest.approx(1.0)  # disjoint supports: 1 bit
    half = {("A", "B"): 0.5, ("A", "C"): 0.5}
    assert jsd_bits(p, half) == pytest.approx(JSD_ONE_VS_HALF)
    assert JSD_ONE_VS_HALF == pytest.approx(0.3112781, abs=1e-7)
    assert jsd_bits(half, p) == pytest.approx(jsd_bits(p, half))  # symmetric
    # (½, ½) vs (¼, ¾): ½[½log2(½/⅜) + ½log2(½/⅝)] + ½[¼log2(¼/⅜) + ¾log2(¾/⅝)]
    q = {("A", "B"): 0.25, ("A", "C"): 0.75}
    by_hand = 0.5 * (0.5 * math.log2(0.5 / 0.375) + 0.5 * math.log2(0.5 / 0.625)) + \
        0.5 * (0.25 * math.log2(0.25 / 0.375) + 0.75 * math.log2(0.75 / 0.625))
    assert jsd_bits(half, q) == pytest.approx(by_hand)
    assert nmi_signal(p, half) == pytest.approx(1 - JSD_ONE_VS_HALF)
    assert nmi_signal(p, {}) == 0.0  # a relation without triples shares no role


def test_type_rules_and_spread_distribution():
    assert canonical_types(["b", "a", "a", ""]) == ("a", "b")
    assert canonical_types(["b", "a"], "min") == ("a",)
    assert canonical_types([]) == (UNTYPED,) and canonical_types(None) == (UNTYPED,)
    idx = TypeIndex([0, 1, 2], [["P", "P2"], ["Q"], []])
    # (0→1): ½ to (P,Q), ½ to (P2,Q); (0→2): ½ to (P,∅), ½ to (P2,∅); over two triples
    dist = idx.distribution(np.array([0, 0]), np.array([1, 2]))
    assert dist == pytest.approx({("P", "Q"): 0.25, ("P2", "Q"): 0.25,
                                  ("P", UNTYPED): 0.25, ("P2", UNTYPED): 0.25})
    assert TypeIndex([0, 1], [["P", "P2"], ["Q"]], "min").distribution(
        np.array([0]), np.array([1])) == {("P", "Q"): 1.0}
    # an entity id unknown to the entities table counts as untyped
    assert idx.distribution(np.array([7]), np.array([1])) == {(UNTYPED, "Q"): 1.0}


@pytest.mark.parametrize("rule", ["spread", "min"])
def test_type_index_from_table_groups_lists_exactly(rule):
    """Arrow's grouping by joined lists gives the constructor's sets: a separator or backslash
    inside a name does not join two different lists; null lists and elements read as empty."""
    types = [["P", "P2"], ["Q"], [], None, ["P2", "P"], ["a\x1fb"], ["a", "b"], ["a\\", "b"],
             ["a", "\\b"], [None, "Q"], ["Q", ""]]
    table = pa.table({"id": [9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 10], "types": types}).slice(1)
    arrow, python = TypeIndex.from_table(table, rule), TypeIndex(table["id"].to_numpy(),
                                                                  table["types"].to_pylist(), rule)
    assert arrow.sets == python.sets
    assert np.array_equal(arrow.of, python.of)
    assert [arrow.sets[arrow.of[e]] for e in (5, 6, 7, 8)] == (
        [("a\x1fb",), ("a", "b"), ("a\\", "b"), ("\\b", "a")] if rule == "spread"
        else [("a\x1fb",), ("a",), ("a\\",), ("\\b",)])


@pytest.mark.parametrize("space_factor", [1, 100])
def test_key_counts_dense_and_sorted_agree_with_unique(space_factor):
    keys = np.random.default_rng(0).integers(0, 50, size=200) * space_factor
    expected = np.unique(keys, return_counts=True)
    got = key_counts(keys, 50 * space_factor)
    assert all(np.array_equal(e, g) for e, g in zip(expected, got))
    assert [len(a) for a in key_counts(np.array([], np.int64), 10)] == [0, 0]

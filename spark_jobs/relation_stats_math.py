"""The SCOS signals as plain numpy: H(r), JSD in bits, NMI = 1 − JSD_bits, one pair at a time
and (``nmi_signals``) many at once.

These are the driver-side definitions of the quantities ``relation_stats`` computes, and the
tests check that they agree with the Spark computation; ``scos_merge`` uses ``tail_entropy``
and ``TypeIndex`` to recompute cluster statistics from the union of triples; ``nmi_signals``
(the driver path's NMI, vectorised) is tested equal to ``nmi_signal`` pair by pair.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np


def tail_entropy(o: np.ndarray) -> float:
    """H(r) in nats from the tails of the *distinct* (s, o) pairs of a relation (or cluster).

    Each distinct (s, o) pair contributes one subject to its tail, so p(o|r) is the share of
    pairs with tail o.
    """
    n = len(o)
    if n == 0:
        return 0.0
    _, counts = np.unique(o, return_counts=True)
    p = counts / n
    return float(max(0.0, -(p * np.log(p)).sum()))


def jsd_bits(p: Mapping, q: Mapping) -> float:
    """Jensen–Shannon divergence of two distributions (dicts key → probability), in bits."""
    total = 0.0
    for key in set(p) | set(q):
        a, b = p.get(key, 0.0), q.get(key, 0.0)
        m = (a + b) / 2.0
        if a > 0:
            total += 0.5 * a * math.log2(a / m)
        if b > 0:
            total += 0.5 * b * math.log2(b / m)
    return min(1.0, max(0.0, total))


def nmi_signal(p: Mapping, q: Mapping) -> float:
    """1 − JSD_bits(P, Q) ∈ [0, 1]; 0 when either distribution is empty (no triples)."""
    if not p or not q:
        return 0.0
    return 1.0 - jsd_bits(p, q)


def nmi_signals(pairs: list[tuple[int, int]], dists: Mapping[int, Mapping],
                chunk: int = 2048) -> np.ndarray:
    """``nmi_signal`` of many relation pairs at once (the driver path's candidates, thousands):
    the JSD terms of the keys both hold summed with numpy, a key only one holds adding half its
    mass (½·a·log2(a / (a/2)) = a/2), ``chunk`` pairs at a time."""
    index, rows = _sparse_distributions(dists)
    out = np.zeros(len(pairs))
    pairs_np = np.asarray(pairs, np.int64).reshape(-1, 2)
    for start in range(0, len(pairs_np), chunk):
        part = pairs_np[start:start + chunk]
        i = np.array([index.get(int(r), -1) for r in part[:, 0]], np.int64)
        j = np.array([index.get(int(r), -1) for r in part[:, 1]], np.int64)
        both = (i >= 0) & (j >= 0)
        jsd = _jsd_rows(rows, i[both], j[both], int(both.sum()))
        out[start:start + chunk][both] = 1.0 - np.clip(jsd, 0.0, 1.0)
    return out


def _sparse_distributions(dists: Mapping[int, Mapping]) -> tuple[dict, tuple]:
    """{relation: row} and the CSR (indptr, key ids, p) of the non-empty distributions."""
    keys: dict = {}
    index, indptr, key_ids, probs = {}, [0], [], []
    for r, dist in dists.items():
        if not dist:
            continue
        index[r] = len(indptr) - 1
        key_ids.extend(keys.setdefault(k, len(keys)) for k in dist)
        probs.extend(dist.values())
        indptr.append(len(key_ids))
    return index, (np.asarray(indptr, np.int64), np.asarray(key_ids, np.int64),
                   np.asarray(probs, np.float64), max(len(keys), 1))


def _expanded(rows: tuple, which: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pair, key, p) of every key of each pair's row ``which[pair]``."""
    indptr, key_ids, probs, _ = rows
    lengths = indptr[which + 1] - indptr[which]
    pair = np.repeat(np.arange(len(which)), lengths)
    at = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths) \
        + np.repeat(indptr[which], lengths)
    return pair, key_ids[at], probs[at]


def _jsd_rows(rows: tuple, i: np.ndarray, j: np.ndarray, n: int) -> np.ndarray:
    """JSD in bits of rows ``i[k]`` and ``j[k]`` for each k."""
    n_keys = rows[3]
    pair_a, key_a, a = _expanded(rows, i)
    pair_b, key_b, b = _expanded(rows, j)
    _, at_a, at_b = np.intersect1d(pair_a * n_keys + key_a, pair_b * n_keys + key_b,
                                   assume_unique=True, return_indices=True)
    sa, sb = a[at_a], b[at_b]
    m = (sa + sb) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        shared = (np.where(sa > 0, 0.5 * sa * np.log2(sa / m), 0.0)
                  + np.where(sb > 0, 0.5 * sb * np.log2(sb / m), 0.0))
    only_a, only_b = np.ones(len(a), bool), np.ones(len(b), bool)
    only_a[at_a], only_b[at_b] = False, False
    return (np.bincount(pair_a[at_a], shared, n)
            + np.bincount(pair_a[only_a], np.maximum(a[only_a], 0.0) / 2.0, n)
            + np.bincount(pair_b[only_b], np.maximum(b[only_b], 0.0) / 2.0, n))


def type_pair_dict(entries: Iterable[Mapping] | None) -> dict[tuple[str, str], float]:
    """``relation_stats.type_pairs`` cell → {(head_type, tail_type): p}."""
    return {(d["head_type"], d["tail_type"]): float(d["p"]) for d in (entries or ())}

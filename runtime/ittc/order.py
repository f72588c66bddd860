"""σ*, the component order of ITTC's lines: the argmin over the six orders of (s, r, o) of
U(σ) = H(x_σ1) + H(x_σ2 | x_σ1), ties broken as the package docstring says."""

from __future__ import annotations

from itertools import permutations

import numpy as np

COMPONENTS = ("s", "r", "o")
#: The six component orders, in the fixed enumeration used as the last tie-break.
ORDERS: tuple[tuple[str, str, str], ...] = tuple(permutations(COMPONENTS))  # type: ignore
#: Relative tolerance under which two U values (or first-component entropies) tie.
TIE_TOLERANCE = 1e-9


def _entropy_bits(*columns: np.ndarray) -> float:
    """Entropy (bits) of the empirical joint distribution of the given equal-length columns."""
    if len(columns) == 1:
        _, counts = np.unique(columns[0], return_counts=True)
    else:
        codes = [np.unique(c, return_inverse=True)[1].reshape(-1).astype(np.int64) for c in columns]
        key = codes[0]
        for code in codes[1:]:
            key = key * (int(code.max()) + 1) + code
        _, counts = np.unique(key, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


def _as_triples(triples) -> np.ndarray:
    arr = np.asarray(triples)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(f"triples must have shape (N, 3) with columns s, r, o; got {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError("triples is empty: the component order needs at least one triple")
    return arr


def _order_stats(triples) -> dict[tuple[str, str, str], tuple[float, float]]:
    arr = _as_triples(triples)
    col = {name: arr[:, i] for i, name in enumerate(COMPONENTS)}
    single = {name: _entropy_bits(col[name]) for name in COMPONENTS}
    joint = {}
    for a, b in (("s", "r"), ("s", "o"), ("r", "o")):
        joint[a, b] = joint[b, a] = _entropy_bits(col[a], col[b])
    stats = {}
    for order in ORDERS:
        first, second = order[0], order[1]
        conditional = joint[first, second] - single[first]  # H(x2 | x1)
        stats[order] = (single[first] + conditional, single[first])
    return stats


def order_entropies(triples) -> dict[tuple[str, str, str], float]:
    """U(σ) = H(x_σ1) + H(x_σ2 | x_σ1) in bits for all six orders (keys in :data:`ORDERS`)."""
    return {order: u for order, (u, _) in _order_stats(triples).items()}


def _ties(a: float, b: float) -> bool:
    return abs(a - b) <= TIE_TOLERANCE * max(1.0, abs(a), abs(b))


def component_order(triples) -> tuple[str, str, str]:
    """σ* = argmin_σ U(σ) over ``triples`` (N×3 ids, columns s, r, o); ties as in the module doc."""
    stats = _order_stats(triples)
    best_u = min(u for u, _ in stats.values())
    tied = [o for o in ORDERS if _ties(stats[o][0], best_u)]
    best_h = min(stats[o][1] for o in tied)
    tied = [o for o in tied if _ties(stats[o][1], best_h)]
    return tied[0]  # ORDERS enumeration order


def check_order(order) -> tuple[str, str, str]:
    order = tuple(order)
    if sorted(order) != sorted(COMPONENTS):
        raise ValueError(f"order must be a permutation of ('s', 'r', 'o'); got {order!r}")
    return order  # type: ignore[return-value]

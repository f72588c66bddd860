"""The multiple-choice knapsack ITTC solves: one option per item, Σ cost ≤ budget, max Σ value;
exactly by DP, or by the greedy value/cost rule on large budgets."""

from __future__ import annotations

import numpy as np

from lokg.runtime.errors import LokgError


class InfeasibleBudget(LokgError, ValueError):
    """No choice of one option per item fits the budget."""


def _check_problem(costs, values, budget) -> tuple[np.ndarray, np.ndarray, int]:
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise ValueError(f"budget must be an integer number of tokens; got {budget!r}")
    costs = np.asarray(costs)
    values = np.asarray(values, dtype=np.float64)
    if costs.ndim != 2 or costs.shape != values.shape or costs.shape[1] < 1:
        raise ValueError(
            f"costs and values must be N×K arrays of one shape (K ≥ 1); got {costs.shape} "
            f"and {values.shape}"
        )
    if costs.size and (not np.all(np.isfinite(costs)) or np.any(costs < 0)
                       or np.any(costs != np.round(costs))):
        raise ValueError("costs must be non-negative integers")
    if not np.all(np.isfinite(values)):
        raise ValueError("values must be finite")
    return costs.astype(np.int64), values, int(budget)


def _dp_layers(extra: np.ndarray, values: np.ndarray, cap: int) -> np.ndarray:
    """layers[i][b]: best value of rows < i with extra cost ≤ b (kept for the backtrack, which
    is cheaper than an argmax over the option axis)."""
    n, k = extra.shape
    width = cap + 1
    layers = np.empty((n + 1, width))
    layers[0] = 0.0
    cand = np.empty(width)
    for i in range(n):
        prev, cur = layers[i], layers[i + 1]
        cur.fill(-np.inf)
        for j in range(k):
            e = int(extra[i, j])
            if e <= cap:
                cand[:e] = -np.inf
                np.add(prev[: width - e], values[i, j], out=cand[e:])
                np.maximum(cur, cand, out=cur)
    return layers


def _backtrack(layers: np.ndarray, extra: np.ndarray, values: np.ndarray,
               cap: int) -> np.ndarray:
    """The choice per row that reaches the DP's optimum, rows taken from the last."""
    n, k = extra.shape
    choices = np.empty(n, dtype=np.int64)
    b = cap
    for i in range(n - 1, -1, -1):
        target = layers[i + 1, b]
        for j in range(k):  # lowest option index reaching the optimum (exact: max is a copy)
            e = int(extra[i, j])
            if e <= b and layers[i, b - e] + values[i, j] == target:
                break
        choices[i] = j
        b -= int(extra[i, j])
    return choices


def solve_mckp(costs, values, budget: int) -> tuple[np.ndarray, float]:
    """Exact multiple-choice knapsack by DP: one option per row, Σ cost ≤ budget, max Σ value.

    ``costs`` (N×K non-negative integers) and ``values`` (N×K floats). Returns (choices, value):
    the chosen column per row and the total value of that choice. O(N·B'·K) time, vectorised
    over the budget axis, where B' = budget − Σ_i min_k c_ik capped at Σ_i (max_k − min_k) c_ik
    (every row pays its cheapest option up front, so the DP only spans the slack). Among optimal
    choices the one whose rows, taken from the last, pick the lowest column index is returned.
    Raises :class:`InfeasibleBudget` when even the cheapest options exceed the budget.
    """
    costs, values, budget = _check_problem(costs, values, budget)
    n = costs.shape[0]
    if n == 0:
        if budget < 0:
            raise InfeasibleBudget(f"budget {budget} < 0")
        return np.zeros(0, dtype=np.int64), 0.0
    base = costs.min(axis=1)
    slack = budget - int(base.sum())
    if slack < 0:
        raise InfeasibleBudget(
            f"the cheapest options cost {int(base.sum())} > budget {budget}"
        )
    extra = costs - base[:, None]
    cap = int(min(slack, int(extra.max(axis=1).sum())))
    choices = _backtrack(_dp_layers(extra, values, cap), extra, values, cap)
    return choices, float(values[np.arange(n), choices].sum())


def solve_greedy(costs, values, budget: int) -> tuple[np.ndarray, float]:
    """Greedy value/cost MCKP heuristic: start at each row's cheapest option, then repeatedly
    apply the single upgrade (row i: current option → option j) of best Δv/Δc among those with
    Δv > 0 that keep Σ cost ≤ budget, until none is left. An upgrade with Δc ≤ 0 ranks first.
    Ties: larger Δv, then lowest row, then lowest option. Never exceeds the budget; raises
    :class:`InfeasibleBudget` when the cheapest options already do.
    """
    costs, values, budget = _check_problem(costs, values, budget)
    n, k = costs.shape
    rows = np.arange(n)
    choices = costs.argmin(axis=1).astype(np.int64)  # first cheapest option
    used = int(costs[rows, choices].sum())
    if used > budget:
        raise InfeasibleBudget(f"the cheapest options cost {used} > budget {budget}")
    while n:
        dc = costs - costs[rows, choices][:, None]
        dv = values - values[rows, choices][:, None]
        ok = (dv > 0) & (used + dc <= budget)
        if not ok.any():
            break
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(dc > 0, dv / np.maximum(dc, 1), np.inf)
        flat = np.flatnonzero(ok)
        # lexsort: last key is primary; flat index (row-major) is the final tie-break
        best = flat[np.lexsort((flat, -dv.ravel()[flat], -ratio.ravel()[flat]))[0]]
        i, j = divmod(int(best), k)
        used += int(dc[i, j])
        choices[i] = j
    return choices, float(values[rows, choices].sum())

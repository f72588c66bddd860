"""ITTC's encoder: the candidate triples' values, the naive rule, the knapsack selection and
the emitted text with its audit trail (the package docstring has the method)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from lokg.runtime.ittc.mckp import solve_greedy, solve_mckp
from lokg.runtime.ittc.order import check_order
from lokg.runtime.ittc.passages import (OPTIONS, EncodedPassage, Passage, Selection,
                                        covered_whole, passage_rows, select_covered)
from lokg.runtime.ittc.render import (GRANULARITIES, KnowledgeTriple, lines_and_costs,
                                      render_levels)
from lokg.runtime.tokens import count_joined, count_tokens

BETA = (0.5, 0.8, 1.0)
LAMBDA_BOOST = 3.0
#: Naive rule: emit the naive rendering when T_naive ≤ NAIVE_NUM/NAIVE_DEN · B.
NAIVE_NUM, NAIVE_DEN = 7, 10
#: Exact DP up to this budget, greedy value/cost above.
DP_MAX_BUDGET = 4096
#: H(O|R=r) is raised to this floor (bits) so zero-entropy triples keep a positive value.
ENTROPY_FLOOR = 1e-6


@dataclass(frozen=True)
class EncodedTriple:
    """What happened to one input triple (``granularity`` None = dropped)."""

    index: int  # position in the input list
    rank: int
    score: float
    granularity: str | None
    line: str  # the emitted line ("" when dropped)
    cost: int  # tokens of the emitted line (0 when dropped)
    value: float  # value of the emitted line (0 when dropped)
    costs: tuple[int, int, int]  # per granularity
    values: tuple[float, float, float]
    covered_by: int | None = None  # the emitted passage that holds it (then not on its own line)

    def to_dict(self) -> dict:
        return {
            "index": self.index, "rank": self.rank, "score": self.score,
            "granularity": self.granularity, "cost": self.cost, "value": self.value,
            "costs": list(self.costs), "values": list(self.values), "line": self.line,
            "covered_by": self.covered_by,
        }


@dataclass(frozen=True)
class Encoding:
    """The encoded knowledge and its audit trail."""

    text: str
    order: tuple[str, str, str]
    mode: str  # naive | dp | greedy
    budget: int
    tokens: int  # T_after: cl100k tokens of ``text``
    naive_tokens: int  # T_naive: tokens of the naive (all-verbose) rendering
    dropped: int
    total_value: float
    triples: tuple[EncodedTriple, ...] = field(repr=False)
    solve_ms: float  # time in the knapsack solver (0 in naive mode)
    encode_ms: float  # whole encode call, rendering and counting included
    repairs: int = 0  # post-hoc fixes after the final recount (0 while lines stay additive)
    #: the passages offered beside the triples (ittc/passages.py), emitted ones first in ``text``
    passages: tuple[EncodedPassage, ...] = field(default=(), repr=False)

    @property
    def tcr(self) -> float:
        """Token compression ratio T_after / T_naive (1.0 when there is nothing to encode)."""
        return self.tokens / self.naive_tokens if self.naive_tokens else 1.0

    def to_dict(self) -> dict:
        return {
            "text": self.text, "order": list(self.order), "mode": self.mode,
            "budget": self.budget, "tokens": self.tokens, "naive_tokens": self.naive_tokens,
            "tcr": self.tcr, "dropped": self.dropped, "total_value": self.total_value,
            "solve_ms": self.solve_ms, "encode_ms": self.encode_ms, "repairs": self.repairs,
            "triples": [t.to_dict() for t in self.triples],
            "passages": [p.to_dict() for p in self.passages],
        }


def triple_values(triple: KnowledgeTriple, beta: Sequence[float] = BETA,
                  boost: float = LAMBDA_BOOST) -> tuple[float, ...]:
    """v_k = β_k · α(t) · max(H(O|R=r), ENTROPY_FLOOR) for each granularity k."""
    return tuple(_values([triple], beta, boost)[0].tolist())


def _values(triples: Sequence[KnowledgeTriple], beta: Sequence[float], boost: float) -> np.ndarray:
    """:func:`triple_values` of every triple as an N×K array, in one vectorised pass."""
    alpha = np.array([boost if t.focus else 1.0 for t in triples], dtype=np.float64)
    h = np.maximum(np.array([t.tail_entropy for t in triples], dtype=np.float64), ENTROPY_FLOOR)
    return (np.asarray(beta, dtype=np.float64)[None, :] * alpha[:, None]) * h[:, None]


def naive_fits(naive_tokens: int, budget: int) -> bool:
    """The 0.7·B rule, inclusive and exact: T_naive ≤ 0.7·B ⇔ 10·T_naive ≤ 7·B."""
    return NAIVE_DEN * naive_tokens <= NAIVE_NUM * budget


def _costed(triples: list[KnowledgeTriple], order, count) -> tuple[list, list]:
    """Each triple's three lines and their token costs (lists of 3-tuples): the cl100k costs
    :func:`lines_and_costs` sums from its fields, or ``count`` of each distinct line."""
    rendered = [lines_and_costs(t, order) for t in triples]
    lines = [lines for lines, _ in rendered]
    if count is count_tokens:
        return lines, [costs for _, costs in rendered]
    costs = []
    for row in lines:
        known: dict[str, int] = {}
        for line in row:
            if line not in known:
                known[line] = int(count(line))
        costs.append(tuple(known[line] for line in row))
    return lines, costs


def _joined(lines: list[str], costs: list[int], count) -> tuple[str, int]:
    """The emitted text and its tokens, counted on that text: ``count`` of it, or with the
    cl100k counter ``count_joined`` over its lines (exact: a line ends with its newline and
    the next starts with a non-space, so no pre-token spans two lines)."""
    text = "".join(lines)
    return text, count_joined(lines, costs) if count is count_tokens else count(text)


def encode(
    triples: Sequence[KnowledgeTriple],
    budget: int,
    order: Sequence[str],
    *,
    dp_max_budget: int = DP_MAX_BUDGET,
    beta: Sequence[float] = BETA,
    boost: float = LAMBDA_BOOST,
    count: Callable[[str], int] = count_tokens,
    passages: Sequence[Passage] = (),
) -> Encoding:
    """Encode ``triples`` into at most ``budget`` cl100k tokens, components in ``order`` (σ*).

    ``count`` is the token counter (tests inject others); the bound is enforced on the final
    text as ``count`` measures it. ``passages`` are offered beside the triples
    (ittc/passages.py: one more knapsack row each, and the triples an emitted one holds are
    not paid for again).
    """
    started = time.perf_counter()
    budget, order = _checked_arguments(budget, order, beta)
    triples = list(triples)
    n = len(triples)
    ranked = sorted(range(n), key=lambda i: (triples[i].rank, i))  # best first
    lines, cost_rows = _costed(triples, order, count)
    costs = np.array(cost_rows, dtype=np.int64).reshape(n, len(GRANULARITIES))
    values = _values(triples, beta, boost)
    # Lines are additive under cl100k (module docstring), so T_naive is the sum of the verbose
    # costs; the text actually emitted is always counted on itself.
    if passages:
        return _encode_mixed(triples, (lines, cost_rows, costs, values), ranked, list(passages),
                             budget=budget, order=order, dp_max_budget=dp_max_budget,
                             count=count, started=started)
    naive_tokens = int(costs[:, -1].sum())
    choices, kept, dropped, mode, solve_ms = _select(costs, values, ranked, budget,
                                                     dp_max_budget, naive_tokens)
    text, tokens, repairs, dropped = _within_budget(lines, cost_rows, choices, kept, dropped,
                                                    budget, count)
    return _assemble(triples, lines, cost_rows, values, choices, text=text, tokens=tokens,
                     order=order, mode=mode, budget=budget, naive_tokens=naive_tokens,
                     dropped=dropped, solve_ms=solve_ms, started=started, repairs=repairs)


def _checked_arguments(budget, order: Sequence[str], beta: Sequence[float]
                       ) -> tuple[int, tuple[str, str, str]]:
    """(budget as an int, σ* checked), or a ValueError naming the bad argument."""
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise ValueError(f"budget must be a positive integer number of tokens; got {budget!r}")
    if budget <= 0:
        raise ValueError(f"budget must be a positive number of tokens; got {budget}")
    order = check_order(order)
    if len(beta) != len(GRANULARITIES):
        raise ValueError(f"beta needs {len(GRANULARITIES)} weights; got {beta!r}")
    return int(budget), order


def _within_budget(lines, cost_rows, choices, kept: list[int], dropped: int, budget: int,
                   count) -> tuple[str, int, int, int]:
    """(text, tokens, repairs, dropped) of the chosen lines, downgraded or dropped from the
    lowest-ranked up while the text exceeds ``budget``. The line costs are additive under
    cl100k for these lines, so no repair runs; the loop keeps the hard bound even if a
    tokenizer change broke additivity. ``choices`` and ``kept`` are updated in place."""
    def emit() -> tuple[str, int]:
        return _joined([lines[i][choices[i]] for i in kept],
                       [cost_rows[i][choices[i]] for i in kept], count)

    text, tokens = emit()
    repairs = 0
    while tokens > budget:
        repairs += 1
        upgraded = [i for i in kept if choices[i] > 0]
        if upgraded:
            choices[upgraded[-1]] -= 1
        else:
            choices[kept.pop()] = -1
            dropped += 1
        text, tokens = emit()
    return text, tokens, repairs, dropped


def _select(costs: np.ndarray, values: np.ndarray, ranked: list[int], budget: int,
            dp_max_budget: int, naive_tokens: int):
    """(choices, kept, dropped, mode, solve_ms): the naive rule, else drop the lowest-ranked
    until all-compact fits and solve the MCKP over the rest (DP up to ``dp_max_budget``).
    ``choices[i]`` is the granularity index, -1 dropped; ``kept`` is in rank order."""
    n = len(ranked)
    if naive_fits(naive_tokens, budget):
        return [len(GRANULARITIES) - 1] * n, list(ranked), 0, "naive", 0.0
    mode = "dp" if budget <= dp_max_budget else "greedy"
    choices = [-1] * n
    kept, dropped = _fitting(costs, ranked, budget)
    t0 = time.perf_counter()
    if kept:
        idx = np.array(kept, dtype=np.int64)
        solver = solve_mckp if mode == "dp" else solve_greedy
        chosen, _ = solver(costs[idx], values[idx], budget)
        for i, c in zip(kept, chosen.tolist()):
            choices[i] = c
    return choices, kept, dropped, mode, (time.perf_counter() - t0) * 1000.0


def _fitting(costs: np.ndarray, ranked: list[int], budget: int) -> tuple[list[int], int]:
    """(kept, dropped): the triples in rank order, the lowest-ranked dropped until their
    compact lines fit ``budget`` together."""
    kept = list(ranked)
    dropped = 0
    compact_total = int(costs[kept, 0].sum()) if kept else 0
    while kept and compact_total > budget:
        compact_total -= int(costs[kept.pop(), 0])
        dropped += 1
    return kept, dropped


def _encode_mixed(triples, rendered, ranked: list[int], passages: list[Passage], *,
                  budget: int, order, dp_max_budget: int, count, started: float) -> Encoding:
    """:func:`encode` with passages offered (ittc/passages.py). Naive: every passage whole and
    every triple none of them holds at verbose, when that fits 0.7·B; else the cover rule's
    rounds, each an MCKP whose triple rows may also choose none (ittc/passages.py)."""
    lines, cost_rows, costs, values = rendered
    plines, pcosts, pvalues = passage_rows(passages, count)
    whole = covered_whole(passages)
    n, top = len(triples), len(GRANULARITIES) - 1
    naive_tokens = int(pcosts[:, 2].sum()) + sum(int(costs[i, top]) for i in range(n)
                                                 if i not in whole)
    if naive_fits(naive_tokens, budget):
        sel = Selection([-1 if i in whole else top for i in range(n)],
                        [len(OPTIONS) - 1] * len(passages), dict(whole))
        mode = "naive"
    else:
        mode = "dp" if budget <= dp_max_budget else "greedy"
        t0 = time.perf_counter()
        sel = select_covered(costs, values, ranked, pcosts, pvalues, passages, budget,
                             solve_mckp if mode == "dp" else solve_greedy)
        sel.solve_ms = (time.perf_counter() - t0) * 1000.0
    text, tokens, repairs = _mixed_text((lines, cost_rows), (plines, pcosts), sel, ranked,
                                        budget, count)
    encoded = _encoded_passages(passages, (plines, pcosts, pvalues), sel)
    dropped = sum(1 for i in range(n) if sel.choices[i] < 0 and i not in sel.covered_by)
    return _assemble(triples, lines, cost_rows, values, sel.choices, text=text, tokens=tokens,
                    order=order, mode=mode, budget=budget, naive_tokens=naive_tokens,
                    dropped=dropped, solve_ms=sel.solve_ms, started=started, repairs=repairs,
                    passages=encoded, covered_by=sel.covered_by)


def _encoded_passages(passages: list[Passage], rows, sel: Selection
                      ) -> tuple[EncodedPassage, ...]:
    """What happened to each offered passage (``rows``: its lines, costs and values)."""
    plines, pcosts, pvalues = rows
    out = []
    for j, p in enumerate(passages):
        c = sel.pchoices[j] if plines[j][sel.pchoices[j]] else 0
        out.append(EncodedPassage(
            index=j, chunk_id=p.chunk_id, rank=p.rank, score=float(p.score),
            granularity=OPTIONS[c] if c else None, line=plines[j][c],
            cost=int(pcosts[j, c]), value=float(pvalues[j, c]),
            costs=tuple(pcosts[j].tolist()), values=tuple(pvalues[j].tolist()),
            covers=tuple(i for i, k in sorted(sel.covered_by.items()) if k == j), passage=p))
    return tuple(out)


def _mixed_text(rendered, prendered, sel: Selection, ranked: list[int], budget: int,
                count) -> tuple[str, int, int]:
    """(text, tokens, repairs): the chosen passages' lines (ranking order), then the triples'
    on their own lines (rank order); the lowest-ranked triple, then the last passage, taken
    out while the text exceeds ``budget`` (expected never: every line adds, and each
    knapsack round fits the budget it was given). ``sel`` is updated in place."""
    (lines, cost_rows), (plines, pcosts) = rendered, prendered
    repairs = 0
    while True:
        ps = [j for j, c in enumerate(sel.pchoices) if c > 0 and plines[j][c]]
        ts = [i for i in ranked if sel.choices[i] >= 0]
        parts = [plines[j][sel.pchoices[j]] for j in ps] + [lines[i][sel.choices[i]] for i in ts]
        part_costs = [int(pcosts[j, sel.pchoices[j]]) for j in ps] + \
            [cost_rows[i][sel.choices[i]] for i in ts]
        text, tokens = _joined(parts, part_costs, count)
        if tokens <= budget:
            return text, tokens, repairs
        repairs += 1
        if ts:
            sel.choices[ts[-1]] = -1
        else:
            sel.pchoices[ps[-1]] = 0
            sel.covered_by = {i: j for i, j in sel.covered_by.items() if j != ps[-1]}


def _assemble(triples, lines, costs, values, choices, *, started: float,
              covered_by: dict[int, int] | None = None, **fields) -> Encoding:
    """The Encoding of a finished selection (``choices[i]`` = granularity index, -1 dropped;
    ``costs`` one sequence of Python ints per triple; ``covered_by``: the triples an emitted
    passage holds, and which)."""
    covered_by = covered_by or {}
    items = []
    total_value = 0.0
    value_rows = values.tolist()
    for i, t in enumerate(triples):
        c = int(choices[i])
        value = value_rows[i][c] if c >= 0 else 0.0
        total_value += value
        items.append(EncodedTriple(
            index=i, rank=t.rank, score=float(t.score),
            granularity=GRANULARITIES[c] if c >= 0 else None,
            line=lines[i][c] if c >= 0 else "",
            cost=costs[i][c] if c >= 0 else 0, value=value,
            costs=tuple(costs[i]), values=tuple(value_rows[i]),
            covered_by=covered_by.get(i),
        ))
    total_value += sum(p.value for p in fields.get("passages", ()) if p.granularity)
    fields["tokens"] = int(fields["tokens"])
    fields["naive_tokens"] = int(fields["naive_tokens"])
    return Encoding(total_value=total_value, triples=tuple(items),
                    encode_ms=(time.perf_counter() - started) * 1000.0, **fields)


UNIFORM_ORDER = ("s", "r", "o")


def encode_uniform(triples: Sequence[KnowledgeTriple], budget: int, *, level: str = "balanced",
                   count: Callable[[str], int] = count_tokens) -> Encoding:
    """The "w/o ITTC" ablation: one template for every triple (``level``, s-r-o order), in rank
    order, cut at the first line that would pass ``budget``. No σ*, no knapsack, no naive rule."""
    started = time.perf_counter()
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget <= 0:
        raise ValueError(f"budget must be a positive integer number of tokens; got {budget!r}")
    k = GRANULARITIES.index(level)
    triples = list(triples)
    n = len(triples)
    ranked = sorted(range(n), key=lambda i: (triples[i].rank, i))
    lines = [render_levels(t, UNIFORM_ORDER) for t in triples]
    costs = np.zeros((n, len(GRANULARITIES)), dtype=np.int64)
    costs[:, k] = [count(row[k]) for row in lines]
    values = _values(triples, BETA, LAMBDA_BOOST)
    choices = np.full(n, -1, dtype=np.int64)
    used = 0
    kept = []
    for i in ranked:
        if used + costs[i, k] > budget:
            break
        used += int(costs[i, k])
        choices[i] = k
        kept.append(i)
    text = "".join(lines[i][k] for i in kept)
    tokens = count(text)
    while tokens > budget:  # never while lines stay additive; keeps the bound regardless
        choices[kept.pop()] = -1
        text = "".join(lines[i][k] for i in kept)
        tokens = count(text)
    naive_tokens = count("".join(lines[i][-1] for i in ranked))  # T_naive: all verbose
    return _assemble(triples, lines, costs.tolist(), values, choices, text=text, tokens=tokens,
                     order=UNIFORM_ORDER, mode="uniform", budget=int(budget),
                     naive_tokens=naive_tokens, dropped=n - len(kept), solve_ms=0.0,
                     started=started)

"""ITTC — Information-Theoretic Token Compression: encode supporting triples under a token budget.

DESIGN §4 step 3. Three parts:

**Component order σ*.** ``component_order(triples)`` is the argmin over the six orders of
(s, r, o) of U(σ) = H(x_σ1) + H(x_σ2 | x_σ1), with the entropies (bits) of the empirical
distribution over the rows given (the store's de-duplicated ``triples`` table). Note that
U(σ) = H(x_σ1, x_σ2) by the chain rule, so the two orders sharing their first two components
always tie. Ties (|ΔU| ≤ 1e-9·max(1, U)) are broken, in this order, by the smaller H(x_σ1) (the
most predictable component first — on Freebase-like data this picks r → s → o over s → r → o),
then by position in :data:`ORDERS` (s r o, s o r, r s o, r o s, o s r, o r s). Nothing is
hard-coded: ``order_entropies`` returns all six U values for reports and tests.

**Renderings and scores.** Each :class:`KnowledgeTriple` renders as one line in σ* order at
three granularities (``compact``: names only; ``balanced``: + type and a short description;
``verbose``: + aliases, extra attributes and the source sentence), fields separated by `` | ``
and the line terminated by ``\\n``. Names are sanitised (every whitespace run, line breaks
included, becomes one space; lone surrogates become ``?``), so each line is exactly one line
and starts with a non-space character. Under cl100k_base's pre-tokeniser no token then spans a
line boundary, so the token count of the joined text is the sum of the line costs
(tests/test_ittc.py checks this on random unicode). Cost c = tokens of the line including its
newline. No token spans two fields either (a field starts and ends with a non-space, the
separator starts with a space: ``tokens.splits``), so c is the sum of the memoised counts of the
line's fields, each with its separator or newline attached; a new triple of entities seen
before costs no tokenizer call. The final text is counted on itself — ``tokens.count_joined``
over its lines, exact because it checks every line boundary — and repaired if it were ever
over (``Encoding.repairs``, expected 0). An injected ``count`` counts every line and the
final text whole. Value v = β_k·α(t)·H(O|R=r), β = (0.5, 0.8, 1.0), α = λ_boost = 3
when the triple touches a query or candidate entity (``focus``), else 1. H(O|R=r) below
:data:`ENTROPY_FLOOR` (1e-6, i.e. 0 for functional relations) is raised to the floor, so such
triples still prefer richer renderings when they fit (deterministically, at a negligible value);
otherwise the formula is exact.

**Selection.** The *naive* rendering is every candidate triple at the default (verbose)
granularity, in rank order. If its token count T_naive satisfies T_naive ≤ 0.7·B (inclusive,
evaluated exactly in integers as 10·T_naive ≤ 7·B) it is emitted unchanged (mode ``naive``).
Otherwise, if even all-compact exceeds B, the lowest-ranked triples (largest ``rank``; among
equal ranks the later input) are dropped until all-compact fits; then the multiple-choice
knapsack (exactly one granularity per kept triple, Σc ≤ B, max Σv) is solved exactly by DP
(``solve_mckp``) when B ≤ 4096, else by the greedy value/cost rule (``solve_greedy``). Kept lines
are emitted in rank order.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import permutations

import numpy as np

from lokg.runtime.errors import LokgError
from lokg.runtime.tokens import count_joined, count_tokens

COMPONENTS = ("s", "r", "o")
#: The six component orders, in the fixed enumeration used as the last tie-break.
ORDERS: tuple[tuple[str, str, str], ...] = tuple(permutations(COMPONENTS))  # type: ignore
GRANULARITIES = ("compact", "balanced", "verbose")
BETA = (0.5, 0.8, 1.0)
LAMBDA_BOOST = 3.0
#: Naive rule: emit the naive rendering when T_naive ≤ NAIVE_NUM/NAIVE_DEN · B.
NAIVE_NUM, NAIVE_DEN = 7, 10
#: Exact DP up to this budget, greedy value/cost above.
DP_MAX_BUDGET = 4096
#: H(O|R=r) is raised to this floor (bits) so zero-entropy triples keep a positive value.
ENTROPY_FLOOR = 1e-6
#: Relative tolerance under which two U values (or first-component entropies) tie.
TIE_TOLERANCE = 1e-9

SHORT_DESCRIPTION_CHARS = 80
MAX_ALIASES = 3
MAX_ATTRIBUTES = 4
MAX_SOURCE_CHARS = 240
SEPARATOR = " | "


class InfeasibleBudget(LokgError, ValueError):
    """No choice of one option per item fits the budget."""


# --------------------------------------------------------------------------------------------
# σ*: component order from triple statistics


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


def _check_order(order) -> tuple[str, str, str]:
    order = tuple(order)
    if sorted(order) != sorted(COMPONENTS):
        raise ValueError(f"order must be a permutation of ('s', 'r', 'o'); got {order!r}")
    return order  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# triples and their renderings


@dataclass(frozen=True)
class KnowledgeTriple:
    """One candidate triple with everything its three renderings and its value need.

    ``rank``: retrieval rank, smaller is better (ties keep input order); the lowest-ranked
    (largest rank) are dropped first. ``tail_entropy``: H(O|R=r) of the relation (bits, as
    relation_stats writes it). ``focus``: s or o is a query or candidate entity (α = λ_boost).
    """

    subject: str
    relation: str
    object: str
    rank: int = 0
    score: float = 0.0
    tail_entropy: float = 0.0
    focus: bool = False
    subject_type: str = ""
    object_type: str = ""
    subject_description: str = ""
    object_description: str = ""
    subject_aliases: tuple[str, ...] = ()
    object_aliases: tuple[str, ...] = ()
    subject_attributes: tuple[tuple[str, str], ...] = ()
    object_attributes: tuple[tuple[str, str], ...] = ()
    source: str = ""

    def __post_init__(self):
        # The runtime builds dozens a question, already typed: only other values are converted.
        if type(self.tail_entropy) is not float or not 0.0 <= self.tail_entropy < math.inf:
            try:
                h = float(self.tail_entropy)
            except (TypeError, ValueError):
                h = math.nan
            if isinstance(self.tail_entropy, bool) or not math.isfinite(h) or h < 0:
                raise ValueError(
                    f"tail_entropy must be a finite number ≥ 0; got {self.tail_entropy!r}")
            object.__setattr__(self, "tail_entropy", h)
        for name in ("subject_aliases", "object_aliases"):  # hashable: renderings are memoised
            if type(getattr(self, name)) is not tuple:
                object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("subject_attributes", "object_attributes"):
            pairs = getattr(self, name)
            if type(pairs) is not tuple or any(type(kv) is not tuple for kv in pairs):
                object.__setattr__(self, name, tuple(tuple(kv) for kv in pairs))


_WHITESPACE = re.compile(r"\s+")


def _clean(text) -> str:
    """One line, single spaces, no leading/trailing space, valid UTF-8 (lone surrogates → '?')."""
    text = text if isinstance(text, str) else str(text)
    # fast path: printable (no control, separator or surrogate characters but the ASCII space)
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return _WHITESPACE.sub(" ", text).strip()


def _shorten(text, limit: int) -> str:
    text = _clean(text)
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


@lru_cache(maxsize=1 << 16)
def _entity_levels(name, etype, description, aliases, attributes) -> tuple[str, str, str]:
    """An entity at the three granularities: name; + type, short description; + aliases, attrs.

    Memoised: the same entities recur across a question's triples and across questions."""
    text = _clean(name) or "?"
    details = [d for d in (_clean(etype), _shorten(description, SHORT_DESCRIPTION_CHARS)) if d]
    balanced = f"{text} ({'; '.join(details)})" if details else text
    names = [a for a in (_clean(a) for a in aliases) if a][:MAX_ALIASES]
    if names:
        details.append("aka " + ", ".join(names))
    pairs = [(_clean(k), _clean(v)) for k, v in attributes]
    pairs = [f"{k}={v}" for k, v in pairs if k or v][:MAX_ATTRIBUTES]
    if pairs:
        details.append(", ".join(pairs))
    verbose = f"{text} ({'; '.join(details)})" if details else text
    return text, balanced, verbose


@lru_cache(maxsize=1 << 12)
def _relation_levels(relation) -> tuple[str, str, str]:
    """A relation at the three granularities (always its name alone)."""
    text = _clean(relation) or "?"
    return text, text, text


#: Per granularity, what ends a field: nothing, the line's newline, or (the last component of
#: a triple with a source, which only the verbose line shows) the newline but at verbose.
_INNER, _LAST, _BEFORE_SOURCE, _SOURCE = ("", "", ""), ("\n",) * 3, ("\n", "\n", ""), ("", "", "\n")


@lru_cache(maxsize=1 << 17)
def _field(levels: tuple[str, str, str], lead: str,
           tails: tuple[str, str, str]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """One field of a line at the three granularities as the line holds it — ``lead`` (the
    separator; "" for the first field) before, ``tails`` after, "" where the granularity
    omits the field — and the cl100k count of each. A field starts and ends with a non-space
    (:func:`_clean`) and a separator starts with a space, so no pre-token spans two fields
    (tokens.splits) and a line's count is the sum of its fields'. Memoised: entities recur
    across triples and questions, so a new triple of known entities costs no tokenizer call."""
    assert all(not x or not (x[0].isspace() or x[-1].isspace()) for x in levels), levels
    texts = tuple(lead + x + tail if x else "" for x, tail in zip(levels, tails))
    return texts, tuple(count_tokens(x) for x in texts)


def _render(triple: KnowledgeTriple, order: tuple[str, str, str]):
    """(lines, cl100k costs) of ``triple`` at the three granularities, components in
    ``order``; each line ends with its newline."""
    t = triple
    components = {
        "s": _entity_levels(t.subject, t.subject_type, t.subject_description, t.subject_aliases,
                            t.subject_attributes),
        "r": _relation_levels(t.relation),
        "o": _entity_levels(t.object, t.object_type, t.object_description, t.object_aliases,
                            t.object_attributes),
    }
    source = _shorten(t.source, MAX_SOURCE_CHARS) if t.source else ""
    (a, ac), (b, bc), (c, cc) = (
        _field(components[order[0]], "", _INNER), _field(components[order[1]], SEPARATOR, _INNER),
        _field(components[order[2]], SEPARATOR, _BEFORE_SOURCE if source else _LAST))
    # spelled out per granularity: this runs for every triple of every question
    lines = [a[0] + b[0] + c[0], a[1] + b[1] + c[1], a[2] + b[2] + c[2]]
    costs = [ac[0] + bc[0] + cc[0], ac[1] + bc[1] + cc[1], ac[2] + bc[2] + cc[2]]
    if source:
        (_, _, tail), (_, _, tail_cost) = _field(("", "", f"source: {source}"), SEPARATOR, _SOURCE)
        lines[2] += tail
        costs[2] += tail_cost
    return tuple(lines), tuple(costs)


def render_levels(triple: KnowledgeTriple, order: Sequence[str]) -> tuple[str, str, str]:
    """The (compact, balanced, verbose) lines of ``triple``, components in ``order``, each
    ending with its newline."""
    return _render(triple, tuple(order))[0]  # type: ignore[return-value]


def render(triple: KnowledgeTriple, order: Sequence[str], level: int | str) -> str:
    """The line of ``triple`` at one granularity (index or name), with its trailing newline."""
    if isinstance(level, str):
        level = GRANULARITIES.index(level)
    return render_levels(triple, _check_order(order))[level]


# --------------------------------------------------------------------------------------------
# multiple-choice knapsack


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
    n, k = costs.shape
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
    width = cap + 1
    # layers[i][b]: best value of rows < i with extra cost ≤ b (kept for the backtrack, which
    # is cheaper than an argmax over the option axis).
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


# --------------------------------------------------------------------------------------------
# the encoder


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

    def to_dict(self) -> dict:
        return {
            "index": self.index, "rank": self.rank, "score": self.score,
            "granularity": self.granularity, "cost": self.cost, "value": self.value,
            "costs": list(self.costs), "values": list(self.values), "line": self.line,
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
    :func:`_render` sums from its fields, or ``count`` of each distinct line."""
    rendered = [_render(t, order) for t in triples]
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
) -> Encoding:
    """Encode ``triples`` into at most ``budget`` cl100k tokens, components in ``order`` (σ*).

    ``count`` is the token counter (tests inject others); the bound is enforced on the final
    text as ``count`` measures it.
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
    order = _check_order(order)
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
    kept = list(ranked)
    dropped = 0
    compact_total = int(costs[kept, 0].sum())
    while kept and compact_total > budget:
        compact_total -= int(costs[kept.pop(), 0])
        dropped += 1
    t0 = time.perf_counter()
    if kept:
        idx = np.array(kept, dtype=np.int64)
        solver = solve_mckp if mode == "dp" else solve_greedy
        chosen, _ = solver(costs[idx], values[idx], budget)
        for i, c in zip(kept, chosen.tolist()):
            choices[i] = c
    return choices, kept, dropped, mode, (time.perf_counter() - t0) * 1000.0


def _assemble(triples, lines, costs, values, choices, *, started: float, **fields) -> Encoding:
    """The Encoding of a finished selection (``choices[i]`` = granularity index, -1 dropped;
    ``costs`` one sequence of Python ints per triple)."""
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
        ))
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

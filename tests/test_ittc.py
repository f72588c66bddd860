"""ITTC: σ*, renderings, the exact MCKP DP, greedy, the 0.7·B naive rule, dropping, the budget."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lokg.runtime import ittc
from lokg.runtime.ittc import (
    BETA,
    ENTROPY_FLOOR,
    GRANULARITIES,
    LAMBDA_BOOST,
    ORDERS,
    InfeasibleBudget,
    KnowledgeTriple,
    component_order,
    encode,
    naive_fits,
    order_entropies,
    render,
    render_levels,
    solve_greedy,
    solve_mckp,
    triple_values,
)
from lokg.runtime.tokens import count_tokens, get_encoding



# --------------------------------------------------------------------------------------------
# strategies

TRICKY = ["", " ", "\n", "\r\n", "\n\n", "'s", "'ll", "<|endoftext|>", "1234567", "🙂🙂",
          "\u2028", "a\u3000b", "\t", "(x)", " | ", "...", "Zürich", "東京都", "\x85", "$$ ",
          "  padded  ", "\ud800"]
TEXT = st.one_of(st.sampled_from(TRICKY), st.text(max_size=24),
                 st.text(alphabet=st.characters(codec="utf-8"), max_size=12))


@st.composite
def knowledge_triples(draw, max_n: int = 10):
    n = draw(st.integers(0, max_n))
    out = []
    for _ in range(n):
        out.append(KnowledgeTriple(
            subject=draw(TEXT), relation=draw(TEXT), object=draw(TEXT),
            rank=draw(st.integers(0, 5)), score=draw(st.floats(-5, 5)),
            tail_entropy=draw(st.one_of(st.just(0.0), st.floats(0, 8))),
            focus=draw(st.booleans()),
            subject_type=draw(TEXT), object_type=draw(TEXT),
            subject_description=draw(st.one_of(TEXT, st.text(min_size=60, max_size=120))),
            object_description=draw(TEXT),
            subject_aliases=tuple(draw(st.lists(TEXT, max_size=4))),
            object_aliases=tuple(draw(st.lists(TEXT, max_size=2))),
            subject_attributes=tuple(draw(st.lists(st.tuples(TEXT, TEXT), max_size=3))),
            object_attributes=tuple(draw(st.lists(st.tuples(TEXT, TEXT), max_size=2))),
            source=draw(st.one_of(st.just(""), TEXT, st.text(max_size=300))),
        ))
    return out


ORDER = st.sampled_from(ORDERS)


def _obama(rank: int = 0, **kw) -> KnowledgeTriple:
    base = dict(
        subject="Barack Obama", relation="people.person.place_of_birth", object="Honolulu",
        rank=rank, tail_entropy=2.5, subject_type="people.person",
        subject_description="44th president of the United States",
        object_type="location.citytown", subject_aliases=("Obama", "Barack H. Obama"),
        subject_attributes=(("born", "1961-08-04"),), source="Obama was born in Honolulu.",
    )
    base.update(kw)
    return KnowledgeTriple(**base)


# --------------------------------------------------------------------------------------------
# σ*


def test_u_values_hand_checked():
    triples = np.array([[1, 10, 100], [1, 11, 100], [2, 10, 101], [3, 10, 100]])
    # H(s) = 1.5, H(r) = H(o) = h(1/4); joint: H(s,r) = 2, H(s,o) = H(r,o) = 1.5 (bits)
    h_quarter = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25))
    u = order_entropies(triples)
    assert set(u) == set(ORDERS)
    expected = {("s", "r", "o"): 2.0, ("r", "s", "o"): 2.0,
                ("s", "o", "r"): 1.5, ("o", "s", "r"): 1.5,
                ("r", "o", "s"): 1.5, ("o", "r", "s"): 1.5}
    for order, value in expected.items():
        assert u[order] == pytest.approx(value, abs=1e-12), order
    # U(r,o,s) = H(r) + H(o|r) evaluated term by term
    assert h_quarter + (1.5 - h_quarter) == pytest.approx(u[("r", "o", "s")])
    # four orders tie at 1.5; smaller H(x_σ1) keeps r and o; enumeration order picks r first
    assert component_order(triples) == ("r", "o", "s")


def test_freebase_like_statistics_give_r_s_o():
    # one relation, 4 subjects, 8 distinct objects: H(r)=0, H(s)=2, H(o)=3
    triples = np.array([[i % 4, 7, 100 + i] for i in range(8)])
    u = order_entropies(triples)
    assert u[("r", "s", "o")] == pytest.approx(2.0) and u[("s", "r", "o")] == pytest.approx(2.0)
    assert min(u.values()) == pytest.approx(2.0)
    assert component_order(triples) == ("r", "s", "o")  # tie broken by H(r) = 0 < H(s) = 2


def test_other_statistics_give_other_orders():
    # every object identical, two relations, unique subjects: the {o, r} prefix is cheapest
    triples = np.array([[i, i % 2, 5] for i in range(8)])
    assert component_order(triples) == ("o", "r", "s")
    # subject and object move together, relations all distinct: {s, o} prefix, full tie → ORDERS
    triples = np.array([[i % 2, 10 + i, i % 2] for i in range(8)])
    u = order_entropies(triples)
    assert u[("s", "o", "r")] == pytest.approx(1.0) == u[("o", "s", "r")]
    assert component_order(triples) == ("s", "o", "r")


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3), st.integers(0, 6)),
                min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_order_is_the_argmin_and_invariant_to_row_order(rows, rnd):
    triples = np.array(rows)
    u = order_entropies(triples)
    best = component_order(triples)
    assert u[best] <= min(u.values()) + 1e-9
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    assert component_order(np.array(shuffled)) == best
    # string ids give the same statistics
    assert component_order(np.array(rows).astype(str)) == best


def test_order_input_errors():
    with pytest.raises(ValueError, match="empty"):
        component_order(np.zeros((0, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="shape"):
        component_order(np.zeros((4, 2), dtype=np.int64))


# --------------------------------------------------------------------------------------------
# renderings and values


def test_renderings_follow_the_order_and_add_detail():
    t = _obama()
    compact, balanced, verbose = render_levels(t, ("r", "s", "o"))
    assert compact == "people.person.place_of_birth | Barack Obama | Honolulu\n"
    assert balanced == ("people.person.place_of_birth | Barack Obama (people.person; 44th "
                        "president of the United States) | Honolulu (location.citytown)\n")
    assert verbose == ("people.person.place_of_birth | Barack Obama (people.person; 44th "
                       "president of the United States; aka Obama, Barack H. Obama; "
                       "born=1961-08-04) | Honolulu (location.citytown) | "
                       "source: Obama was born in Honolulu.\n")
    assert render(t, ("o", "r", "s"), "compact") == (
        "Honolulu | people.person.place_of_birth | Barack Obama\n")
    with pytest.raises(ValueError, match="permutation"):
        render(t, ("s", "s", "o"), 0)


def test_names_are_sanitised_into_one_line():
    t = KnowledgeTriple(subject=" a\nb\r\n", relation="\u2028r\tr ", object="o\ud800",
                        subject_description="x" * 500)
    for line in render_levels(t, ("s", "r", "o")):
        assert line.count("\n") == 1 and line.endswith("\n") and not line[0].isspace()
        line.encode("utf-8")
    assert render(t, ("s", "r", "o"), "compact") == "a b | r r | o?\n"
    assert "…" in render(t, ("s", "r", "o"), "balanced")


def test_values_are_beta_alpha_entropy():
    plain = _obama(tail_entropy=2.0)
    boosted = _obama(tail_entropy=2.0, focus=True)
    assert triple_values(plain) == pytest.approx(tuple(b * 2.0 for b in BETA))
    assert triple_values(boosted) == pytest.approx(tuple(b * LAMBDA_BOOST * 2.0 for b in BETA))
    assert triple_values(_obama(tail_entropy=0.0)) == pytest.approx(
        tuple(b * ENTROPY_FLOOR for b in BETA))
    assert _obama(tail_entropy=np.float32(1.5)).tail_entropy == 1.5
    for bad in (-1.0, float("nan"), float("inf"), "x", None, True):
        with pytest.raises(ValueError, match="tail_entropy"):
            _obama(tail_entropy=bad)


@given(knowledge_triples(max_n=8), ORDER)
def test_line_costs_add_up_to_the_joined_text(triples, order):
    lines = [line for t in triples for line in render_levels(t, order)]
    assert sum(count_tokens(line) for line in lines) == count_tokens("".join(lines))


def _uncached(text: str) -> int:
    """cl100k straight from tiktoken, every line and text whole: the reference for the
    memoised, field-by-field counting the default counter does."""
    return len(get_encoding().encode_ordinary(text))


def _audit(enc) -> dict:
    return {k: v for k, v in enc.to_dict().items() if k not in ("solve_ms", "encode_ms")}


@given(knowledge_triples(), st.integers(1, 700), ORDER, st.booleans())
def test_memoised_counting_gives_the_uncached_encoding(triples, budget, order, greedy):
    dp_max = 0 if greedy else ittc.DP_MAX_BUDGET
    reference = _audit(encode(triples, budget, order, dp_max_budget=dp_max, count=_uncached))
    for _ in range(2):  # then with every memo warm
        assert _audit(encode(triples, budget, order, dp_max_budget=dp_max)) == reference


# --------------------------------------------------------------------------------------------
# the knapsack solvers


@st.composite
def mckp_problems(draw, max_n: int = 8):
    n = draw(st.integers(0, max_n))
    k = draw(st.integers(1, 3))
    costs = np.array(draw(st.lists(st.lists(st.integers(0, 30), min_size=k, max_size=k),
                                   min_size=n, max_size=n)), dtype=np.int64).reshape(n, k)
    values = np.array(draw(st.lists(st.lists(st.integers(-5, 20), min_size=k, max_size=k),
                                    min_size=n, max_size=n)), dtype=np.float64).reshape(n, k)
    budget = draw(st.integers(0, 30 * max(n, 1)))
    return costs, values, budget


def _brute_force(costs, values, budget):
    n, k = costs.shape
    if n == 0:
        return 0.0
    combos = np.array(list(itertools.product(range(k), repeat=n)))
    rows = np.arange(n)
    total_cost = costs[rows, combos].sum(axis=1)
    total_value = values[rows, combos].sum(axis=1)
    feasible = total_cost <= budget
    return float(total_value[feasible].max()) if feasible.any() else None


@given(mckp_problems())
def test_dp_equals_brute_force(problem):
    costs, values, budget = problem
    best = _brute_force(costs, values, budget)
    if best is None:
        with pytest.raises(InfeasibleBudget):
            solve_mckp(costs, values, budget)
        return
    choices, value = solve_mckp(costs, values, budget)
    rows = np.arange(len(choices))
    assert value == best
    assert values[rows, choices].sum() == value
    assert costs[rows, choices].sum() <= budget


@given(mckp_problems(max_n=12))
def test_greedy_never_exceeds_the_budget(problem):
    costs, values, budget = problem
    if costs.shape[0] and costs.min(axis=1).sum() > budget:
        with pytest.raises(InfeasibleBudget):
            solve_greedy(costs, values, budget)
        return
    choices, value = solve_greedy(costs, values, budget)
    rows = np.arange(len(choices))
    assert costs[rows, choices].sum() <= budget
    assert values[rows, choices].sum() == pytest.approx(value)
    assert value <= solve_mckp(costs, values, budget)[1] + 1e-9


def test_greedy_upgrades_by_value_per_cost():
    costs = np.array([[1, 3, 10], [1, 2, 3]])
    values = np.array([[1.0, 5.0, 6.0], [1.0, 1.5, 4.0]])
    # from (0, 0) cost 2: row0→1 ratio 2, row1→2 ratio 1.5, row0→2 ratio 5/9
    choices, value = solve_greedy(costs, values, 4)
    assert choices.tolist() == [1, 0] and value == 6.0
    choices, value = solve_greedy(costs, values, 5)  # then row1→1 (ratio 0.5) is all that fits
    assert choices.tolist() == [1, 1] and value == 6.5
    choices, value = solve_greedy(costs, values, 6)
    assert choices.tolist() == [1, 2] and value == 9.0


def test_solver_input_errors():
    with pytest.raises(ValueError, match="shape"):
        solve_mckp(np.zeros((2, 3)), np.zeros((2, 2)), 5)
    with pytest.raises(ValueError, match="non-negative integers"):
        solve_mckp(np.array([[-1, 2]]), np.zeros((1, 2)), 5)
    with pytest.raises(ValueError, match="non-negative integers"):
        solve_mckp(np.array([[1.5, 2]]), np.zeros((1, 2)), 5)
    with pytest.raises(ValueError, match="finite"):
        solve_greedy(np.array([[1, 2]]), np.array([[np.nan, 1.0]]), 5)


# --------------------------------------------------------------------------------------------
# the encoder


def _check_encoding(enc, triples, budget):
    final = count_tokens(enc.text)
    assert final <= budget
    assert final == enc.tokens
    assert enc.repairs == 0  # the lines stayed additive
    kept = [t for t in enc.triples if t.granularity is not None]
    assert sum(t.cost for t in kept) == enc.tokens
    assert enc.dropped == len(triples) - len(kept)
    # kept lines appear in rank order, ties in input order
    expected = sorted(kept, key=lambda t: (t.rank, t.index))
    assert enc.text == "".join(t.line for t in expected)
    json.dumps(enc.to_dict())


@given(knowledge_triples(), st.integers(1, 700), ORDER, st.booleans())
def test_rendered_knowledge_never_exceeds_the_budget(triples, budget, order, greedy):
    enc = encode(triples, budget, order, dp_max_budget=0 if greedy else ittc.DP_MAX_BUDGET)
    _check_encoding(enc, triples, budget)
    assert enc.mode in ("naive", "greedy" if greedy else "dp")


@settings(max_examples=60)
@given(knowledge_triples(max_n=8), ORDER)
def test_naive_mode_triggers_exactly_at_seven_tenths(triples, order):
    naive_tokens = encode(triples, 10**6, order).naive_tokens
    threshold = max(1, -(-10 * naive_tokens // 7))  # smallest B with 10·T ≤ 7·B
    at = encode(triples, threshold, order)
    assert at.mode == "naive" and at.text == encode(triples, 10**6, order).text
    assert at.tokens == naive_tokens and naive_fits(naive_tokens, threshold)
    if threshold > 1:
        below = encode(triples, threshold - 1, order)
        assert below.mode == "dp"
        _check_encoding(below, triples, threshold - 1)


def test_naive_boundary_is_inclusive():
    line_cost = count_tokens(render(_obama(), ("r", "s", "o"), "verbose"))
    triples = [_obama(rank=i) for i in range(7)]
    naive = 7 * line_cost
    budget = 10 * line_cost  # 0.7·B == T_naive exactly
    enc = encode(triples, budget, ("r", "s", "o"))
    assert enc.naive_tokens == naive and enc.mode == "naive"
    assert enc.text == "".join(render(t, ("r", "s", "o"), "verbose") for t in triples)
    assert all(t.granularity == "verbose" for t in enc.triples)
    assert encode(triples, budget - 1, ("r", "s", "o")).mode == "dp"


@given(knowledge_triples(max_n=10), st.integers(1, 200), ORDER, st.randoms(use_true_random=False))
def test_drops_only_when_all_compact_exceeds_and_lowest_ranked_first(triples, budget, order, rnd):
    triples = [KnowledgeTriple(**{**t.__dict__, "rank": rnd.randint(0, 4)}) for t in triples]
    enc = encode(triples, budget, order)
    _check_encoding(enc, triples, budget)
    compact = [count_tokens(render_levels(t, order)[0]) for t in triples]
    ranked = sorted(range(len(triples)), key=lambda i: (triples[i].rank, i))
    if enc.mode == "naive" or sum(compact) <= budget:
        assert enc.dropped == 0
        return
    kept = ranked[: len(ranked) - enc.dropped]
    assert [t.index for t in enc.triples if t.granularity is not None] == sorted(kept)
    assert sum(compact[i] for i in kept) <= budget
    assert enc.dropped >= 1
    # minimal: keeping the best dropped triple too would not fit all-compact
    assert sum(compact[i] for i in ranked[: len(kept) + 1]) > budget


def test_dropped_triples_are_reported():
    triples = [_obama(rank=i) for i in range(10)]
    compact = count_tokens(render(triples[0], ("r", "s", "o"), "compact"))
    enc = encode(triples, 3 * compact + 1, ("r", "s", "o"))
    assert enc.mode == "dp" and enc.dropped == 7
    assert [t.granularity for t in enc.triples][3:] == [None] * 7
    assert [t.index for t in enc.triples if t.granularity] == [0, 1, 2]
    tiny = encode(triples, 1, ("r", "s", "o"))
    assert tiny.dropped == 10 and tiny.text == "" and tiny.tokens == 0


def test_dp_prefers_boosted_and_informative_triples():
    order = ("r", "s", "o")
    triples = [_obama(rank=0, tail_entropy=0.5), _obama(rank=1, tail_entropy=0.5, focus=True),
               _obama(rank=2, tail_entropy=4.0)]
    costs = [[count_tokens(line) for line in render_levels(t, order)] for t in triples]
    budget = costs[0][0] + costs[1][2] + costs[2][2]
    enc = encode(triples, budget, order)
    assert enc.mode == "dp"
    assert [t.granularity for t in enc.triples] == ["compact", "verbose", "verbose"]
    assert enc.total_value == pytest.approx(0.5 * 0.5 + 1.0 * 3.0 * 0.5 + 1.0 * 4.0)


def test_zero_entropy_still_prefers_richer_renderings():
    order = ("r", "s", "o")
    triples = [_obama(rank=i, tail_entropy=0.0) for i in range(4)]
    verbose_total = 4 * count_tokens(render(triples[0], order, "verbose"))
    enc = encode(triples, verbose_total, order)  # all-verbose fits, 0.7·B does not
    assert enc.mode == "dp"
    assert all(t.granularity == "verbose" for t in enc.triples)


def test_greedy_above_4096():
    order = ("r", "s", "o")
    long = "lorem ipsum dolor sit amet " * 8
    triples = [_obama(rank=i, subject=f"Entity {i}", subject_description=long, source=long,
                      tail_entropy=1.0 + (i % 5)) for i in range(80)]
    enc = encode(triples, 4097, order)
    assert enc.naive_tokens > 0.7 * 4097 and enc.mode == "greedy"
    _check_encoding(enc, triples, 4097)
    enc = encode(triples, 4096, order)
    assert enc.mode == "dp"
    _check_encoding(enc, triples, 4096)


def test_repair_keeps_the_bound_under_a_non_additive_counter():
    def superadditive(text: str) -> int:  # each extra line costs more in the joined text
        return count_tokens(text) + text.count("\n") ** 2

    triples = [_obama(rank=i) for i in range(6)]
    budget = 200
    enc = encode(triples, budget, ("r", "s", "o"), count=superadditive)
    assert enc.tokens == superadditive(enc.text) <= budget
    assert enc.repairs > 0


def test_empty_input_and_bad_arguments():
    enc = encode([], 10, ("r", "s", "o"))
    assert (enc.text, enc.mode, enc.tokens, enc.naive_tokens, enc.dropped) == ("", "naive", 0, 0, 0)
    assert enc.tcr == 1.0
    for budget in (0, -5):
        with pytest.raises(ValueError, match="positive"):
            encode([_obama()], budget, ("r", "s", "o"))
    for budget in (True, 2.5, "100"):
        with pytest.raises(ValueError, match="integer"):
            encode([_obama()], budget, ("r", "s", "o"))
    with pytest.raises(ValueError, match="permutation"):
        encode([_obama()], 100, ("r", "s"))


def test_result_reports_everything():
    triples = [_obama(rank=i, focus=i == 0) for i in range(5)]
    enc = encode(triples, 120, ("r", "s", "o"))
    data = enc.to_dict()
    assert data["mode"] == "dp" and data["order"] == ["r", "s", "o"]
    assert data["tokens"] == enc.tokens <= 120 and data["naive_tokens"] > 120
    assert data["tcr"] == pytest.approx(enc.tokens / enc.naive_tokens)
    assert len(data["triples"]) == 5
    assert {t["granularity"] for t in data["triples"]} <= set(GRANULARITIES) | {None}
    assert enc.solve_ms >= 0 and enc.encode_ms >= enc.solve_ms

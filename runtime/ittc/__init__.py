"""ITTC — Information-Theoretic Token Compression: encode supporting triples under a token budget.

Step 3 of a question (runtime/query.py). Three parts, each a module: ``order`` (σ*),
``render`` (renderings and costs), ``encoding`` (values and selection, with the knapsack
solvers of ``mckp``):

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

**Passages.** In a store built from documents, ``encode(..., passages=...)`` also offers
passages (``passages``: a chunk whole, or the sentences of it the candidate triples came from)
as knapsack rows beside the triples, valued down the passage ranking; a triple an emitted
passage holds is not paid for twice (the module has the rule).
"""

from lokg.runtime.ittc.encoding import (BETA, DP_MAX_BUDGET, ENTROPY_FLOOR, LAMBDA_BOOST,
                                        UNIFORM_ORDER, EncodedTriple, Encoding, encode,
                                        encode_uniform, naive_fits, triple_values)
from lokg.runtime.ittc.mckp import InfeasibleBudget, solve_greedy, solve_mckp
from lokg.runtime.ittc.passages import EncodedPassage, Passage
from lokg.runtime.ittc.order import COMPONENTS, ORDERS, component_order, order_entropies
from lokg.runtime.ittc.render import GRANULARITIES, KnowledgeTriple, render, render_levels

__all__ = ["BETA", "COMPONENTS", "DP_MAX_BUDGET", "ENTROPY_FLOOR", "GRANULARITIES", "LAMBDA_BOOST",
           "ORDERS", "UNIFORM_ORDER", "EncodedPassage", "EncodedTriple", "Encoding",
           "InfeasibleBudget", "KnowledgeTriple", "Passage", "component_order", "encode",
           "encode_uniform", "naive_fits", "order_entropies", "render", "render_levels",
           "solve_greedy", "solve_mckp", "triple_values"]

"""Where the answers of a lokg method were lost, step by step: linking, the predicted chain, the
derivation, the gate, the path that answered.

Why: the routed H@1 of one number says nothing of *which* step failed (on held-out graphs it
drops 16–21 points). Every lokg method's JSONL line carries a ``breakdown`` and the method's
summary the counts of :func:`summarise_breakdown`; baselines have neither (no route).

**Per question** (:func:`question_breakdown`, the line's ``breakdown``):

* ``linked`` — every gold topic entity key is among the linked entities' keys (with
  ``--entities gold`` the given keys: true unless a key is missing from the store; with
  ``--entities link`` the linking step); ``null`` when the dataset names no topic entity;
* ``gold_chain`` — the dataset's relation path in the store's relation names: each hop's
  relation through the store's ``relation_map`` (SCOS may have merged it into a canonical
  relation), an inverse hop's ``~`` kept in front; ``null`` when the dataset has no gold path
  (MetaQA): the breakdown then says "no gold chain" instead of counting a chain miss;
* ``chain`` — the chain the relation knowledge predicted (``Answer.route.chain``), ``null``
  when none; ``chain_right`` — ``chain == gold_chain``, hop by hop (``null`` without a gold
  chain or without a route);
* ``derived_hit`` — a derived endpoint is a gold answer (``route.derived``: the first 10);
  ``derived_right`` — the first one is (the H@1 the derived answer scores); false when nothing
  was derived, ``null`` without a route;
* ``predictor`` — what predicted the chain (``route.predictor``, one of
  ``runtime.relknow.PREDICTORS``: the kNN vote, a rule revising it, the lexicon, the zero-shot
  matcher), ``null`` without a route;
* ``gate_passed`` — the policy's gate passed (``route.gate.passed``), ``null`` without a route
  and under policy ``lokg`` (which consults no gate);
* ``path`` — what answered: ``derived`` | ``llm`` | ``retrieval`` (the top retrieval answer) |
  ``abstain`` | ``none`` (no answer: no entity, no paths, topic not in the store). Whether that
  path was right is the line's ``scores.H@1``;
* ``first_miss`` — the first of linking → chain → derivation at which the graph's answer went
  wrong: ``null`` when ``derived_right``, else ``linking``, ``no_route`` (no relation
  knowledge consulted), ``no_gold_chain`` (the derivation is wrong and there is no gold chain
  to tell the chain from the derivation), ``chain`` or ``derivation``;
* ``chain_miss`` — how a wrong chain differs from the gold one (``null`` unless
  ``chain_right`` is false): ``no_chain`` (none instantiated), ``hop_left_out`` (the gold
  chain with hops left out), ``hop_added`` (it holds the gold chain and more),
  ``shorter`` / ``longer`` (another length, other hops too), ``first_hop`` / ``later_hop``
  (as many hops, the first wrong one the first or a later one): whether the relation plan
  misjudged how many hops the question asks or which.

**Per method** (:func:`summarise_breakdown`): for each row of :data:`ROWS`, the questions in it
and how many of them were lost (H@1 = 0, recomputed from ``predicted`` and ``gold``). The rows
from ``linked_wrong`` to ``derivation_right`` partition the questions by ``first_miss``, the
``path_*`` rows by ``path``: each block's questions sum to ``n`` and its losses to ``lost``.
The ``chain_*`` rows split *chain wrong* by ``chain_miss``, the ``predictor_*`` rows the
questions with a route by ``predictor`` (what a rule gained or lost: its questions' losses).
``gate_passed`` counts every question the gate passed: its share of ``n`` is the gate's
coverage, one minus its share lost the gate's precision (a passed question is answered by its
derivation) — under ``--policy precision`` the precision gate's, under ``route`` the routing
gate's. ``gate_passed_wrong`` and ``gate_rejected_right`` are the gate's errors: it passed a
wrong derivation (always lost) or turned down a right one (lost when the fallback was wrong
too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from lokg.common.datasets import Question
from lokg.common.metrics import score
from lokg.runtime.relknow import INVERSE_PREFIX, PREDICTORS, split_hop

PATHS = ("derived", "llm", "retrieval", "abstain", "none")
#: The partition by ``first_miss``, in pipeline order: (summary key, Markdown label, value).
MISS_ROWS = (
    ("linked_wrong", "linked wrong", "linking"),
    ("no_relation_knowledge", "no relation knowledge consulted", "no_route"),
    ("no_gold_chain", "no gold chain (derivation wrong)", "no_gold_chain"),
    ("chain_wrong", "chain wrong (linked right)", "chain"),
    ("derivation_miss", "derivation misses (chain right)", "derivation"),
    ("derivation_right", "derivation right", None),
)
#: How a wrong chain missed (``chain_miss``), as rows under *chain wrong*: (value, label).
CHAIN_MISSES = (
    ("no_chain", "no chain instantiated"),
    ("hop_left_out", "gold chain with hops left out"),
    ("hop_added", "gold chain with hops added"),
    ("shorter", "fewer hops, others wrong"),
    ("longer", "more hops, others wrong"),
    ("first_hop", "as many hops, the first wrong"),
    ("later_hop", "as many hops, a later one wrong"),
)
#: Every row of a method's breakdown: (summary key, Markdown label, the questions it counts).
ROWS: tuple[tuple[str, str, Callable[[dict], bool]], ...] = (
    ("all", "all questions", lambda b: True),
    *((key, label, lambda b, miss=miss: b["first_miss"] == miss)
      for key, label, miss in MISS_ROWS),
    *((f"chain_{miss}", f"chain wrong: {label}",
       lambda b, miss=miss: b["first_miss"] == "chain" and b.get("chain_miss") == miss)
      for miss, label in CHAIN_MISSES),
    ("gate_passed", "gate passed",
     lambda b: b["gate_passed"] is True),
    ("gate_passed_wrong", "gate passed a wrong derivation",
     lambda b: b["gate_passed"] is True and b["derived_right"] is False),
    ("gate_rejected_right", "gate rejected a right derivation",
     lambda b: b["gate_passed"] is False and b["derived_right"] is True),
    *((f"path_{p}", f"answered: {p}", lambda b, p=p: b["path"] == p) for p in PATHS),
    *((f"predictor_{p}", f"chain by: {p}", lambda b, p=p: b.get("predictor") == p)
      for p in PREDICTORS),
)


def map_hop(hop: str, canonical: Mapping[str, str]) -> str:
    """A gold hop (``rel`` or ``~rel``) in the store's names: the relation through
    ``canonical`` (name → canonical name; a name it lacks stays as written), ``~`` kept."""
    relation, inverse = split_hop(hop)
    return INVERSE_PREFIX * inverse + canonical.get(relation, relation)


def answer_path(route: dict | None, status: str, answers: Sequence[str], llm_calls: int,
                fallback: bool) -> str:
    """Which of :data:`PATHS` answered: the route's source where it says, else what the
    answer's status, answers and calls tell."""
    source = (route or {}).get("source")
    if source in PATHS:
        return source
    if status == "abstained":
        return "abstain"
    if not answers:
        return "none"
    return "llm" if llm_calls and not fallback else "retrieval"


def question_breakdown(question: Question, gold_chain: list[str] | None, linked: list[dict],
                       route: dict | None, path: str) -> dict:
    """The ``breakdown`` of one question's answer (module docstring). ``route`` is the whole
    ``Answer.route``: it consulted relation knowledge when it holds the derivation (a store
    without relation knowledge leaves only its source and reason); its gate is the policy's,
    and policy ``lokg`` consults none."""
    know = route if route is not None and "derived" in route else None
    gate = (know or {}).get("gate") or {}
    derived = None if know is None else score(know["derived"], question.answers)
    topics = set(question.topic_entities)
    out = {
        "linked": topics <= {link.get("key") for link in linked} if topics else None,
        "gold_chain": gold_chain,
        "chain": None if know is None else know.get("chain"),
        "predictor": None if know is None else know.get("predictor"),
        "chain_right": None if gold_chain is None or know is None
        else know.get("chain") == gold_chain,
        "derived_hit": None if derived is None else derived.hit == 1.0,
        "derived_right": None if derived is None else derived.h1 == 1.0,
        "gate_passed": gate.get("passed") if gate.get("name", "lokg") != "lokg" else None,
        "path": path,
    }
    return {**out, "first_miss": first_miss(out),
            "chain_miss": chain_miss(out["chain"], gold_chain) if out["chain_right"] is False
            else None}


def holds(longer: Sequence[str], shorter: Sequence[str]) -> bool:
    """Whether ``shorter`` is ``longer`` with hops left out (order kept)."""
    rest = iter(longer)
    return all(hop in rest for hop in shorter)


def chain_miss(chain: Sequence[str] | None, gold: Sequence[str]) -> str:
    """How a wrong ``chain`` differs from ``gold`` (one of :data:`CHAIN_MISSES`)."""
    if not chain:
        return "no_chain"
    if len(chain) < len(gold):
        return "hop_left_out" if holds(gold, chain) else "shorter"
    if len(chain) > len(gold):
        return "hop_added" if holds(chain, gold) else "longer"
    first = next(i for i, (a, b) in enumerate(zip(chain, gold)) if a != b)
    return "first_hop" if first == 0 else "later_hop"


def first_miss(b: dict) -> str | None:
    """The first step of linking → chain → derivation that went wrong (None: none did)."""
    if b["derived_right"]:
        return None
    if b["linked"] is False:
        return "linking"
    if b["derived_right"] is None:
        return "no_route"
    if b["gold_chain"] is None:
        return "no_gold_chain"
    return "derivation" if b["chain_right"] else "chain"


def summarise_breakdown(records: Sequence[dict]) -> dict | None:
    """Row → {questions, lost} over the JSONL records (module docstring); None unless every
    record has a breakdown (a baseline, or lines written before there was one)."""
    if not records or any("breakdown" not in r for r in records):
        return None
    lost = [score(r["predicted"], r["gold"]).h1 == 0.0 for r in records]
    out = {}
    for key, _, counts in ROWS:
        inside = [is_lost for r, is_lost in zip(records, lost) if counts(r["breakdown"])]
        out[key] = {"questions": len(inside), "lost": sum(inside)}
    return out

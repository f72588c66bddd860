"""Reading: the one call to the reader on the prompt, and the Answer it makes.

The prompt is the fixed instructions + ``Knowledge:`` + the encoded lines + the question; the
knowledge never exceeds B tokens (cl100k_base, counted on the final text), so the whole prompt
is at most B plus its fixed overhead, which the Answer reports separately. The backend
``none`` makes no call: the top-ranked candidate is the answer. A failed call returns that
answer with ``fallback`` set and the reason. A passed gate's answer (the derived endpoints,
runtime/planning.py) makes no call either: :class:`DerivedAnswer`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from lokg.runtime import ittc
from lokg.runtime.answer_record import Answer
from lokg.runtime.context import ContextEncoder
from lokg.runtime.linker import normalise
from lokg.runtime.llm import LLMError
from lokg.runtime.planning import RelationPlan, derived_retrieves
from lokg.runtime.prompt import (ANSWER_MAX_TOKENS, Prompt, build_prompt, choice_lines,
                                 parse_answers, prompt_overhead)
from lokg.runtime.relknow import Triple
from lokg.runtime.request import Request, Timer
from lokg.runtime.retrieval import Candidate, Retrieval, Retriever
from lokg.runtime.tokens import count_tokens

#: A context's triples, their ITTC knowledge and its encoding.
EncodedContext = tuple[list[Triple], list[ittc.KnowledgeTriple], ittc.Encoding]

READ_FAILED = "LLM call failed or gave no answer; top retrieval answer returned"


def _why_no_call(reader, listed: list[Candidate],
                 supported: frozenset[int] | None) -> str | None:
    """Why the reader is not called (None: it is): no model, a forced choice with the top
    candidate alone, or none of the others reached by the predicted chain."""
    if not reader.calls_model:
        return "no LLM"
    if len(listed) == 1:
        return "no other candidate within query.choice_margin of the top one, no call"
    if supported is not None and not any(c.id in supported for c in listed[1:]):
        return ("no other near-tied candidate is reached by the predicted relation chain "
                "(query.choice_check), no call")
    return None


@dataclass(frozen=True)
class Reading:
    """The read's result: the answers, how they were obtained, and the prompt they came from."""

    answers: list[str]
    answer_ids: list[int | None]
    status: str
    message: str
    fallback_reason: str | None
    calls: int
    completion: int  # tokens of the reply
    prompt: Prompt
    choices: tuple[str, ...] = ()  # the candidates listed for a forced choice
    vetoed: bool = False  # a forced choice's pick the derivation does not reach: the top kept


class Reader:
    """The read of one question over an opened build (runtime/opened.py)."""

    def __init__(self, runtime):
        self.runtime = runtime

    def read(self, req: Request, enc: ittc.Encoding, candidates: list[Candidate],
             plan: RelationPlan) -> Reading:
        """The one call on the prompt, its reply parsed and grounded; without a model, when a
        forced choice has one candidate only, or when the call fails, its reply holds no answer
        or (forced choice) names no candidate, the top candidate. With ``choice_check``
        ``derivation`` a forced choice's pick other than the top counts only when the relation
        knowledge's derivation reaches it (:meth:`_supported`); when no listed candidate but
        the top could count, no call is made."""
        reader = req.reader
        listed = self._choices(candidates) if reader.calls_model and \
            self.runtime.settings["reader"] == "choice" else []
        choices = tuple(choice_lines([c.name for c in listed]))
        prompt = build_prompt(enc.text, req.question, choices=choices)
        top = candidates[:1]
        answers, ids = [c.name for c in top], [c.id for c in top]
        supported = self._supported(plan) if listed else None
        why_no_call = _why_no_call(reader, listed, supported)
        if why_no_call:
            return Reading(answers, ids, "ok", f"answered from retrieval ({why_no_call})", None,
                           0, 0, prompt)
        options = {"choices": list(choices)} if choices and getattr(
            reader, "constrains_choices", False) else {}
        try:
            reply = reader.complete(prompt.user, system=prompt.system,
                                    max_tokens=ANSWER_MAX_TOKENS, **options)
        except LLMError as exc:
            return Reading(answers, ids, "fallback", READ_FAILED, f"{exc.kind}: {exc}", 1, 0,
                           prompt, choices)
        return self._replied(reply.text, reader.name, (prompt, choices), candidates, listed,
                             supported)

    def _replied(self, text: str, reader: str, asked: tuple[Prompt, tuple[str, ...]],
                 candidates: list[Candidate], listed: list[Candidate],
                 supported: frozenset[int] | None) -> Reading:
        """The reading of a reply: its answers grounded, or (forced choice) the listed
        candidate it names; the top candidate where it names none, or a pick the derivation
        does not reach. ``asked``: the prompt and the candidates it listed."""
        prompt, choices = asked
        top = candidates[:1]
        answers, ids = [c.name for c in top], [c.id for c in top]
        completion = count_tokens(text)
        parsed = parse_answers(text)
        picked = self._picked(parsed, listed) if choices else None
        if not parsed or (choices and picked is None):
            why = "the LLM reply held no answer" if not parsed else \
                f"the LLM reply {parsed[0]!r} is none of the {len(choices)} candidates"
            return Reading(answers, ids, "fallback", READ_FAILED, why, 1, completion, prompt,
                           choices)
        if picked is not None and picked.id != top[0].id and supported is not None and \
                picked.id not in supported:
            return Reading(answers, ids, "ok", f"answered from retrieval ({reader} picked "
                           f"{picked.name!r}, which the predicted relation chain does not "
                           "reach: query.choice_check)", None, 1, completion, prompt, choices,
                           vetoed=True)
        answers, ids = ([picked.name], [picked.id]) if choices else self._ground(parsed,
                                                                                candidates)
        return Reading(answers, ids, "ok", f"answered by {reader}", None, 1, completion,
                       prompt, choices)

    def _choices(self, candidates: list[Candidate]) -> list[Candidate]:
        """A forced choice's candidates: the top ones (``choice_candidates``) whose S_final is
        within ``choice_margin`` of the best."""
        settings = self.runtime.settings
        best = candidates[0].s_final if candidates else 0.0
        margin = float(settings["choice_margin"])
        return [c for c in candidates[:int(settings["choice_candidates"])]
                if best - c.s_final <= margin]

    def _supported(self, plan: RelationPlan) -> frozenset[int] | None:
        """The entities a forced choice may pick over retrieval's top one, or None for any:
        with ``choice_check`` ``derivation``, the endpoints of the relation knowledge's
        derivation (the predicted chain followed from the topic) when it has some. Chosen on
        PathQuestion dev (docs/BENCHMARKS.md): the picks of the embedded model that made an
        answer worse were ones the chain does not reach."""
        if self.runtime.settings["choice_check"] != "derivation" or plan.assessment is None:
            return None
        derivation = plan.assessment.derivation
        return frozenset(derivation.endpoints) if derivation is not None and \
            derivation.derivable else None

    def _picked(self, parsed: list[str], listed: list[Candidate]) -> Candidate | None:
        """The listed candidate a forced-choice reply names: its first item, grounded (a
        backend without a grammar may wrap the name in a sentence)."""
        if not parsed:
            return None
        hit = self._ground(parsed[:1], listed)[1][0]
        return next((c for c in listed if c.id == hit), None)

    def _ground(self, items: list[str], candidates: list[Candidate]) -> tuple[list[str], list]:
        """LLM answers → entity names and ids. An item naming a candidate or any entity keeps
        its text; an item that only *mentions* a candidate ("The capital is Berlin.") becomes
        that candidate (the longest name found in it); anything else stays, id None."""
        names, ids = [], []
        for item in items:
            key = normalise(item)
            hit = next((c.id for c in candidates if normalise(c.name) == key), None)
            if hit is None:
                found = self.runtime.linker.lookup(item)
                hit = found[0] if found else None
            if hit is None:
                padded = f" {key} "
                inside = [c for c in candidates if f" {normalise(c.name)} " in padded]
                if inside:
                    best = max(inside, key=lambda c: len(normalise(c.name)))
                    item, hit = best.name, best.id
            if item.casefold() not in (n.casefold() for n in names):
                names.append(item)
                ids.append(hit)
        return names, ids


def _route_after_read(runtime, req: Request, plan: RelationPlan, found: Retrieval,
                      reading: Reading) -> dict | None:
    """The plan's route record completed with what answered (route past its gate, or lokg
    with a relation feed) and, for the LOKG context, the consistency of what was read."""
    if plan.route is None:
        return None
    reason = plan.route["reason"] or f"policy {req.policy}"
    route = {**plan.route,
             "source": "llm" if reading.calls and reading.status == "ok" and
             not reading.vetoed else "retrieval",
             "context": "compact" if plan.compact else "lokg",
             "reason": reason + ("; one LLM call" if reading.calls else
                                 "; top retrieval answer")}
    if not plan.compact and runtime.relknow is not None:
        know, facts = runtime.relknow
        route["consistency"] = know.checker.check(found.triples, facts).to_dict()
    return route


def _not_derived(req: Request, plan: RelationPlan) -> str:
    """Why policy route did not answer from the graph alone (the zero-call gate's reason),
    said before how it did answer; "" for the other policies."""
    reason = plan.route.get("reason") if req.policy == "route" and plan.route else ""
    return f"not derived from the graph ({reason}); " if reason else ""


def read_answer(runtime, req: Request, base: dict, plan: RelationPlan, found: Retrieval,
                encoded: tuple[list[ittc.KnowledgeTriple], ittc.Encoding], reading: Reading,
                timings: dict) -> Answer:
    """The full Answer of a question that got as far as the read."""
    (knowledge, enc) = encoded
    triples, citations, passages = ContextEncoder(runtime).lines(found.triples, knowledge, enc)
    overhead = prompt_overhead(req.question, choices=reading.choices)
    called = reading.calls > 0  # a prompt went out (a forced choice of one makes none)
    return Answer(
        **{**base, "route": _route_after_read(runtime, req, plan, found, reading)},
        answers=reading.answers, answer_ids=reading.answer_ids,
        status=reading.status, message=_not_derived(req, plan) + reading.message,
        fallback=reading.status == "fallback",
        fallback_reason=reading.fallback_reason, llm_calls=reading.calls,
        prompt=reading.prompt.to_dict() if called else {"system": "", "user": ""},
        tokens={"prompt": overhead.total + enc.tokens if called else 0,
                "completion": reading.completion, "knowledge": enc.tokens,
                "naive": enc.naive_tokens, "tcr": enc.tcr, "budget": req.budget,
                "overhead": overhead.to_dict()},
        triples=triples, candidates=[c.to_dict() for c in found.candidates[:10]],
        citations=citations, passages=passages,
        encoding={"mode": enc.mode, "order": list(enc.order), "dropped": enc.dropped,
                  "total_value": enc.total_value, "semantic": found.semantic,
                  "paths": found.sources, "solve_ms": enc.solve_ms},
        timings=timings)


def calibrated(calibration: dict) -> str:
    """What a derived answer's gate rests on, in words (``Answer.route.gate.calibration``: a
    gate that passes was calibrated on dev questions; without them it passes nothing)."""
    ci = calibration.get("precision_95ci") or ["?", "?"]
    return (f"gate calibrated on {calibration.get('questions')} dev questions of this store: "
            f"{calibration.get('passed')} passed at precision {calibration.get('precision')} "
            f"(95% interval {ci[0]}–{ci[1]})")


class DerivedAnswer:
    """The answer of a passed gate (the derived endpoints, no LLM call), or the abstention of
    policy precision, over an opened build (runtime/opened.py)."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.context = ContextEncoder(runtime)
        self.retriever = Retriever(runtime)

    def answer(self, req: Request, base: dict, plan: RelationPlan, heads: list[int],
               timer: Timer, *vectors: np.ndarray | None) -> Answer:
        """Its context is the chain's facts first, then the retrieval context in what they
        leave of the budget: a chain a refresh completed may be wrong, and the facts retrieval
        found stay before a reader of the answer. ``vectors``: linking's and the plan's batch's
        plain question vectors (either None)."""
        rt = self.runtime
        reason = plan.route["reason"]
        if not plan.passed:
            return Answer.empty("abstained", f"abstained: {reason}", timer.done(),
                                budget=req.budget, **base)
        d = plan.assessment.derivation
        chain = self.retriever.retrieve(req, heads, None, replace(plan, compact=True))
        chain_enc = self.context.encode(req, heads, chain, plan)
        beside = self._retrieval_beside(req, heads, vectors, plan,
                                        req.budget - chain_enc[1].tokens
                                        ) if derived_retrieves(rt.settings) else None
        timer.lap("context")
        parts = [(chain.triples, *chain_enc)] + ([beside] if beside is not None else [])
        lines = [self.context.lines(*part) for part in parts]
        encodings = [enc for _, _, enc in parts]
        knowledge, naive = sum(e.tokens for e in encodings), sum(e.naive_tokens for e in encodings)
        empty = Answer.empty("ok", f"derived from the graph: {reason}; "
                             f"{calibrated(plan.route['gate']['calibration'])}", timer.done(),
                             budget=req.budget, **base)
        return replace(
            empty,
            answers=[rt.names[e] for e in d.endpoints], answer_ids=list(d.endpoints),
            triples=[t for triples, _, _ in lines for t in triples],
            passages=[p for _, _, passages in lines for p in passages],
            candidates=[{"id": e, "name": rt.names[e], "walks": w}
                        for e, w in zip(d.endpoints[:10], d.walks[:10])],
            tokens={**empty.tokens, "knowledge": knowledge, "naive": naive,
                    "tcr": knowledge / naive if naive else 1.0},
            citations=[c for _, citations, _ in lines for c in citations])

    def _retrieval_beside(self, req: Request, heads: list[int],
                          vectors: tuple[np.ndarray | None, np.ndarray | None],
                          plan: RelationPlan, budget: int) -> EncodedContext | None:
        """The retrieval context of a derived answer, the chain's facts left out, encoded in
        ``budget`` tokens; None when no token is left or retrieval finds nothing else."""
        if budget < 1:
            return None
        looked = replace(plan, compact=False)
        q_vec = self.retriever.question_vector(req, looked, *vectors)
        found = self.retriever.retrieve(req, heads, q_vec, looked)
        chain = set(plan.assessment.derivation.facts)
        kept = [(t, s) for t, s in zip(found.triples, found.scores) if t not in chain]
        if not kept:
            return None
        found = replace(found, triples=[t for t, _ in kept], scores=[s for _, s in kept])
        return (found.triples, *self.context.encode(replace(req, budget=budget), heads, found,
                                                    looked))

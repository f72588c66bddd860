"""The methods an evaluation compares, by name, each a ``Question -> Prediction`` callable.

Every method runs under the same reader (one LLM object, wrapped in :class:`CountingLLM`) and
the same knowledge budget B:

=================  ==========================================================================
``lokg``           the runtime as shipped: TAIMR retrieval, ITTC encoding, one call
``lokg-no-scos``   the same on a store built with ``scos_merge.enabled=false`` (``--store-no-scos``)
``lokg-no-ittc``   ``encoding="uniform"``: one template (balanced, s-r-o), cut by rank to fit B
``lokg-no-taimr``  ``retrieval="similarity"``: reachable entities ranked by cosine alone
``lokg-no-relknow`` policy ``lokg`` with the relation feeds off (the store's relation knowledge
                   unused)
``lokg-tcr``       ``source_sentences=True``: each triple's restored source sentence is its
                   verbose ITTC granularity; ``lokg`` asks with ``False`` (w/o TCR)
``chunk-rag``      dense top-k chunks of a documents store, packed into B (baselines.py)
``tcr-qf``         the online feedback loop inside one question over an in-memory overlay,
                   up to ``tcr_qf.max_rounds`` answers (tcr_qf.py); ``tcr-qf-answer``: its
                   ablation, answer-driven feedback (triples from the answer, not passages)
``neighbourhood``  the topic entities' 1-hop triples, truncated to B
``kaping``         top-20 of a ≤200-triple 1-hop pool by embedding similarity (baselines.py)
``tog``            LLM-driven beam search, width 3, depth 3, several calls (baselines.py)
=================  ==========================================================================

**Topic entities.** With ``entities="gold"`` (the default, as in ToG and the PathQuestion
literature) a question's topic entity keys from the dataset are given to the method; a question
without any is linked from its text. With ``entities="link"`` every question is linked from its
text by the runtime's linker. A gold key missing from the store gives an empty prediction with
status ``topic_not_in_store`` (a dataset/store mismatch, counted as wrong, never skipped).

With ``entities="gold,link"`` (:func:`make_methods` with several modes) every method runs
once per mode, as rows ``<method>@gold`` and ``<method>@link``, so that one run (and one
summary) shows what linking costs; the breakdown's *linked wrong* row counts the questions
linking lost (evaluation/breakdown.py).

**Policy.** ``lokg eval --policy`` sets the policy of the lokg methods (``lokg``, the
``lokg-no-*`` ablations but ``lokg-no-relknow``): ``lokg`` one call on the LOKG context,
``precision`` the answer derived from the graph or an abstention, ``route`` derived where the
same precision gate passes, else one call (runtime/relknow). Baselines never use relation knowledge.

**Calls and failures.** :class:`CountingLLM` counts every call a method makes and every call
that raised :class:`runtime.llm.LLMError`, whatever the method does with the failure (the
runtime falls back to its retrieval answer, flagged), so ``calls/q`` and ``failed_calls`` mean
the same for every method.

**Knowledge** (``Prediction.knowledge``, what a reading run's context recall reads): for the
lokg methods the lines of the triples the encoding kept (``Answer.triples[*].line``) joined in
their order — exactly ITTC's text, the knowledge block of the prompt, and there even when the
reader ``none`` builds no prompt; for ``chunk-rag`` the packed passages; for KAPING and ToG the
texts of their encodings (ToG: of every depth's call, joined).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from lokg.common.datasets import Question
from lokg.evaluation.runner import Method, Prediction
from lokg.evaluation import baselines, tcr_qf
from lokg.evaluation.breakdown import answer_path, question_breakdown
from lokg.evaluation.context import CountingLLM, EvalContext, MethodError

def _lokg(retrieval: str = "taimr", encoding: str = "ittc", no_scos: bool = False,
          relation_knowledge: bool = True, source_sentences: bool | None = None,
          online: str | None = None, passage_items: int | None = None):
    """A factory for the runtime under one retrieval/encoding (and store) setting. Without
    ``relation_knowledge`` the policy is ``lokg`` and the relation feeds are off (the store's
    relation knowledge is not used at all). ``source_sentences`` (None: not passed, the
    runtime's default) turns TCR's restored sentences on or off; ``passage_items`` (None: the
    runtime's ``query.passage_items``) sets the chunks offered to ITTC. ``online`` (a source of
    evaluation/tcr_qf.py) answers through the online feedback loop instead of one ask."""

    def factory(ctx: EvalContext) -> Method:
        rt = _runtime(ctx, no_scos)
        enricher = tcr_qf.Enricher(rt, source=online) if online else None

        def run(question: Question) -> Prediction:
            keys, status = ctx.topic_keys(rt, question)
            gold = ctx.gold_chain(rt, question)
            if status is not None:
                return Prediction([], status=status, details={"build_id": rt.build_id},
                                  breakdown=question_breakdown(question, gold, [], None, "none"))
            ctx.llm.reset()
            feeds = _feeds(relation_knowledge, source_sentences)
            if passage_items is not None:
                feeds["passage_items"] = passage_items

            def ask(view):
                return view.ask(question.question, entities=keys, budget=ctx.budget,
                                llm=ctx.llm, retrieval=retrieval, encoding=encoding,
                                policy=ctx.policy if relation_knowledge else "lokg", **feeds)

            if enricher is None:
                return _prediction(ctx.llm, question, ask(rt), gold)
            loop = enricher.answer(rt, ask)
            return tcr_qf.online_prediction(_prediction(ctx.llm, question, loop.answers[-1], gold),
                                            loop, ctx.llm)

        return run

    return factory


def _runtime(ctx: EvalContext, no_scos: bool):
    """The opened store a method asks: the one built without scos_merge when ``no_scos``."""
    rt = ctx.runtime_no_scos if no_scos else ctx.runtime
    if rt is None:
        raise MethodError("lokg-no-scos needs a store built with scos_merge.enabled=false: pass "
                          "--store-no-scos DIR (or --build to build one)")
    return rt


def _feeds(relation_knowledge: bool, source_sentences: bool | None) -> dict:
    """The ask's options for the relation feeds and TCR's restored sentences (none passed:
    the runtime's defaults)."""
    feeds = {} if relation_knowledge else {"relation_weight": 0.0, "chain_boost": False}
    if source_sentences is not None:
        feeds["source_sentences"] = source_sentences
    return feeds


def _prediction(llm: CountingLLM, question: Question, ans, gold_chain: list[str] | None
                ) -> Prediction:
    """The Prediction of a runtime Answer, with its calls counted by ``llm`` and its
    breakdown (evaluation/breakdown.py)."""
    tokens = ans.tokens
    path = answer_path(ans.route, ans.status, ans.answers, ans.llm_calls, ans.fallback)
    return Prediction(
        answers=list(ans.answers), status=ans.status, llm_calls=llm.calls,
        failed_calls=llm.failed, prompt_tokens=int(tokens["prompt"]),
        completion_tokens=int(tokens["completion"]),
        knowledge_tokens=int(tokens["knowledge"]), naive_tokens=int(tokens["naive"]),
        prompts=[ans.prompt] if llm.calls else [], triples=ans.triples, timings=ans.timings,
        error="; ".join(llm.errors) or (ans.fallback_reason if ans.fallback else None),
        details={"build_id": ans.build_id, "linked": ans.linked, "route": _route(ans),
                 "answer_ids": ans.answer_ids, "candidates": ans.candidates[:5],
                 "encoding": {k: ans.encoding.get(k) for k in ("mode", "dropped")}},
        knowledge="".join(t.get("line", "") for t in [*ans.passages, *ans.triples]),
        breakdown=question_breakdown(question, gold_chain, ans.linked, ans.route, path))


def _route(answer) -> dict | None:
    """Which path produced the answer and why (runtime ``Answer.route``, without the votes)."""
    if answer.route is None:
        return None
    keep = ("source", "reason", "context", "chain", "vote_share", "derivable", "flagged", "topics")
    return {k: answer.route.get(k) for k in keep}


def _baseline(name: str):
    def factory(ctx: EvalContext) -> Method:
        return getattr(baselines, name)(ctx)

    return factory


@dataclass(frozen=True)
class MethodSpec:
    name: str
    summary: str
    factory: Callable[[EvalContext], Method]
    needs_no_scos_store: bool = False
    #: meant for a store built from documents (a reading set): left out of ``all``
    documents_only: bool = False


METHODS: dict[str, MethodSpec] = {spec.name: spec for spec in (
    MethodSpec("lokg", "LOKG: TAIMR + ITTC, one call (w/o TCR)", _lokg(source_sentences=False)),
    MethodSpec("lokg-tcr", "LOKG with TCR: restored source sentences as ITTC's verbose level",
               _lokg(source_sentences=True), documents_only=True),
    MethodSpec("lokg-tcr-triples", "lokg-tcr with no passage offered to ITTC "
               "(query.passage_items 0): triples only", _lokg(source_sentences=True,
                                                             passage_items=0),
               documents_only=True),
    MethodSpec("lokg-no-scos", "LOKG on a store without SCOS", _lokg(no_scos=True), True),
    MethodSpec("lokg-no-ittc", "LOKG with the uniform template", _lokg(encoding="uniform")),
    MethodSpec("lokg-no-taimr", "LOKG with similarity retrieval", _lokg(retrieval="similarity")),
    MethodSpec("lokg-no-relknow", "LOKG without relation knowledge (policy lokg, feeds off)",
               _lokg(relation_knowledge=False)),
    MethodSpec("neighbourhood", "1-hop neighbourhood, truncated to B",
               _lokg(retrieval="neighbourhood", relation_knowledge=False)),
    MethodSpec("kaping", "KAPING: top-20 of ≤200 1-hop triples by similarity",
               _baseline("kaping")),
    MethodSpec("tog", "ToG: LLM beam search, width 3, depth 3", _baseline("tog")),
    MethodSpec("chunk-rag", "dense top-k chunks of a documents store, packed into B",
               _baseline("chunk_rag"), documents_only=True),
    MethodSpec("tcr-qf", "online query-driven feedback: passages retrieved and extracted into an "
               "overlay, answered again, up to tcr_qf.max_rounds (tcr_qf.py)",
               _lokg(source_sentences=True, online="passages"), documents_only=True),
    MethodSpec("tcr-qf-answer", "tcr-qf's ablation: triples extracted from the answer and its "
               "context instead of retrieved passages", _lokg(source_sentences=True,
                                                              online="answer"),
               documents_only=True),
)}


def method_names(text: str) -> list[str]:
    """``all`` (every method but the documents-only ones) or a comma-separated list of method
    names, validated, in the order given."""
    if text.strip() == "all":
        names = [n for n, spec in METHODS.items() if not spec.documents_only]
    else:
        names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in METHODS]
    if unknown or not names:
        raise MethodError(f"unknown method(s) {unknown or [text]}; choose from "
                          f"{', '.join(METHODS)} or 'all'")
    return list(dict.fromkeys(names))


def run_names(names: Sequence[str], modes: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Row (and run directory) name → (method, entity mode): with one mode the method's name,
    as every run had before the modes could be combined; with several ``<method>@<mode>``,
    the modes of one method side by side."""
    if len(modes) == 1:
        return {name: (name, modes[0]) for name in names}
    return {f"{name}@{mode}": (name, mode) for name in names for mode in modes}


def make_methods(names: list[str], ctx: EvalContext, modes: Sequence[str] | None = None
                 ) -> dict[str, Method]:
    """The methods by row name (:func:`run_names`), each on ``ctx`` in its entity mode
    (default: ``ctx``'s own)."""
    rows = run_names(names, modes or (ctx.entities,))
    return {row: METHODS[name].factory(replace(ctx, entities=mode))
            for row, (name, mode) in rows.items()}

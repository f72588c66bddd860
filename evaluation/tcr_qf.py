"""Online query-driven feedback, policy ``tcr-qf``, for the comparison with the
published TCR-QF method: the loop inside one question.

    answer → identify missing (runtime.feedback.missing_record) → retrieve passages for the
    sub-questions → extract → update an overlay graph → answer again

up to I_max answers (``tcr_qf.max_rounds``, default 3; the first is the plain runtime's) or
until nothing is missing, or a round has no sub-question it has not tried already, or finds no
triple it has not added already (either way the next answer would be the same). Retrieval, extraction, orientation, relation matching and de-duplication
against the graph are ``feedback_enrich``'s own (text/feedback_enrich.py) over the build's chunk
index; the triples go into an in-memory overlay (``Runtime.with_triples``, runtime/overlay.py),
never into the store. A sub-question is tried once per question: the same passages and
extractor give the same triples.

**Answer-driven feedback** (the ablation, ``source="answer"``): the triples are extracted from
the answer itself — its answers, the triples its reader was given and the source sentences
they cite, as sentences — instead of from retrieved passages. It needs an extractor that reads
text (``offline``, ``openai``): ``precomputed`` holds passages' stored extractions only.

Counted per question: every reader call of every round and every LLM extraction call (a cached
chunk makes none), their tokens in the prompt and completion totals, so ``calls/q`` and
``tok/q`` are the loop's; the knowledge (context recall) and answers are the last round's.
The first round is the runtime's own ``ask`` (it logs feedback as the runtime is configured
to); the overlay rounds log nothing.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from lokg.common.stage import StageError, published_encoder
from lokg.pipeline.config import TcrQfSettings
from lokg.evaluation.context import CountingLLM, MethodError
from lokg.evaluation.runner import Prediction
from lokg.runtime.feedback import missing_record
from lokg.runtime.overlay import ExtraTriple
from lokg.runtime.question_encoder import CachedEmbeddings
from lokg.text import feedback_enrich as fe
from lokg.text.feedback_answers import passage_candidates
from lokg.text.chunking import content_id
from lokg.text.settings import FeedbackEnrichSettings, TripleExtractSettings

SOURCES = ("passages", "answer")
#: Why a loop stopped: nothing missing, I_max answers, no sub-question not tried already, no
#: triple not added already.
STOPS = ("nothing_missing", "max_rounds", "nothing_new_asked", "nothing_found")


@dataclass
class Online:
    """One question's loop: every round's Answer (the last is the answer), the overlay's
    triples, the sub-questions each feedback step tried (new to this question), and why it
    stopped (:data:`STOPS`)."""

    answers: list
    extra: list[ExtraTriple] = field(default_factory=list)
    asked: list[int] = field(default_factory=list)
    stopped: str = ""
    extraction_calls: int = 0
    extraction_usage: dict = field(default_factory=lambda: {"prompt_tokens": 0,
                                                            "completion_tokens": 0})


class Enricher:
    """feedback_enrich's retrieval and extraction over one runtime's build, in memory: what a
    feedback record asks becomes overlay triples. ``work`` holds the extractor's cache (never
    under the store); ``encoder`` and ``extraction`` replace the store's passage encoder and
    the configured backend's :class:`~text.feedback_enrich.Extraction` (tests)."""

    def __init__(self, rt, *, source: str = "passages", config: Mapping | None = None,
                 work: str | Path | None = None, encoder=None, extraction=None):
        if source not in SOURCES:
            raise MethodError(f"tcr-qf source must be one of {', '.join(SOURCES)}; got {source!r}")
        config = dict(config if config is not None else rt.build.manifest.get("config") or {})
        problem = fe.chunk_index_problem(rt.build)
        if problem:
            raise MethodError(f"tcr-qf retrieves from the store's passages: {problem}")
        try:
            self.cfg = FeedbackEnrichSettings.of(config, StageError)
            backend = self.cfg.backend or TripleExtractSettings.of(config, StageError).backend
            if source == "answer" and backend == "precomputed":
                raise MethodError("answer-driven feedback extracts from the answer's text: backend "
                                  "precomputed only holds passages' stored extractions; set "
                                  "feedback_enrich.backend=offline (or openai)")
            if encoder is None and not (rt.build.path / "models" / "encoder.json").is_file():
                raise MethodError(f"tcr-qf: build {rt.build_id} has no encoder "
                                  "(models/encoder.json) to retrieve its passages with")
            encoder = _Remembering(
                encoder or published_encoder(fe.STAGE, rt.build, self.cfg["device"]))
            work = _work_dir(rt, work)
            config["triple_extract"] = {**TripleExtractSettings.of(config, StageError),
                                        "cache_dir": str(work / "extract-cache")}
            self.pub = fe.Published(rt.build, encoder)
            self.extraction = extraction or fe.Extraction(config, backend, work, work)
        except StageError as exc:
            raise MethodError(f"tcr-qf: {exc}") from None
        self.source, self.max_rounds = source, TcrQfSettings.of(config, MethodError).max_rounds
        self.bridge_ranks = fe.bridge_ranks(config, self.cfg)  # as the refresh bridges
        self.keep_questions = bool(rt.settings["feedback_questions"])

    def found(self, record: dict, answer, tried: set[str]) -> tuple[int, list[ExtraTriple]]:
        """(how many, triples) of the record's sub-questions not in ``tried`` (which they
        join) and the triples found for them."""
        if not self.keep_questions:  # the question as retrieval text only where the log keeps it
            record = {k: v for k, v in record.items() if k != "question"}
        todo = [sq for sq in fe.sub_questions([{**record, "id": "online"}])
                if sq.key not in tried]
        tried.update(sq.key for sq in todo)
        if not todo:
            return 0, []
        if self.source == "passages":
            cands = fe.retrieved(todo, self.pub, self.extraction, int(self.cfg["k"]),
                                 self.bridge_ranks)
        else:
            chunk = answer_passage(answer)
            cands = [c for sq in todo
                     for c in passage_candidates(sq, chunk, [], self.pub, self.extraction)]
        kept = fe.with_relations(cands, self.pub, float(self.cfg["relation_min_cosine"]))
        delta = fe.deduplicated(kept, self.pub, float(self.cfg["dedupe_threshold"]))
        return len(todo), [ExtraTriple(r["s_key"], r["relation"], r["o_key"], r["s_name"],
                                       r["o_name"], r["sentence"]) for r in delta.rows]

    def answer(self, rt, ask: Callable, max_rounds: int | None = None) -> Online:
        """The loop (module docstring) for one question; ``ask(runtime)`` answers it."""
        rounds = self.max_rounds if max_rounds is None else max_rounds
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise MethodError(f"tcr-qf max_rounds must be an integer >= 1; got {rounds!r}")
        calls, usage = self.extraction.calls, dict(self.extraction.usage)
        online, view, tried = Online([]), rt, set()
        while True:
            online.answers.append(ask(view))
            record = missing_record(online.answers[-1], rt.settings["feedback_bridges"])
            stop = "nothing_missing" if record is None else \
                "max_rounds" if len(online.answers) == rounds else ""
            if not stop:
                have = {t.key for t in online.extra}
                asked, found = self.found(record, online.answers[-1], tried)
                new = {t.key: t for t in found if t.key not in have}
                online.asked.append(asked)
                online.extra += new.values()
                stop = "" if new else "nothing_found" if asked else "nothing_new_asked"
            if stop:
                online.stopped, online.extraction_calls = stop, self.extraction.calls - calls
                online.extraction_usage = {k: v - usage[k]
                                           for k, v in self.extraction.usage.items()}
                return online
            view = rt.with_triples(online.extra)


class _Remembering:
    """The passage encoder with each passage text's vector kept: ``with_relations`` embeds
    every relation name of the graph at each call (1,169 texts on the musique subset, ~4 s on
    one CPU thread), the same texts every round of every question."""

    def __init__(self, encoder):
        self.encode_queries = encoder.encode_queries
        self.encode_passages = CachedEmbeddings(encoder, capacity=1 << 16,
                                                method="encode_passages")


def answer_passage(answer) -> dict:
    """The answer as a passage to extract from, in sentences: its answers, the triples its
    reader was given as "s r o." and the source sentences they cite (ITTC's rendered lines,
    "r | s (type) | o", are no text an extractor reads)."""
    lines = [*(f"{a}." for a in answer.answers),
             *(f"{t['s']} {t['r']} {t['o']}." for t in answer.triples),
             *(c["sentence"] for c in answer.citations if c.get("sentence"))]
    text = "\n".join(dict.fromkeys(lines))
    return {"chunk_id": content_id("answer", text), "doc_id": "", "text": text}


def _work_dir(rt, work: str | Path | None) -> Path:
    """The loop's scratch directory, refused inside the store (the store is never written)."""
    path = Path(work) if work is not None else Path(tempfile.mkdtemp(prefix="lokg-tcr-qf-"))
    store = Path(rt.build.root).resolve()
    if path.resolve().is_relative_to(store):
        raise MethodError(f"tcr-qf work directory {path} is inside the store {store}; the "
                          "online loop never writes the store")
    path.mkdir(parents=True, exist_ok=True)
    return path


def online_prediction(last: Prediction, online: Online, llm: CountingLLM) -> Prediction:
    """The last round's Prediction with every round's reader calls and tokens and the
    extraction's LLM calls and tokens added, and the loop in its details."""
    usage = online.extraction_usage
    return replace(
        last, llm_calls=llm.calls + online.extraction_calls,
        prompt_tokens=sum(int(a.tokens["prompt"]) for a in online.answers)
        + usage["prompt_tokens"],
        completion_tokens=sum(int(a.tokens["completion"]) for a in online.answers)
        + usage["completion_tokens"],
        prompts=[a.prompt for a in online.answers if a.llm_calls],
        details={**last.details, "online": {
            "rounds": len(online.answers), "stopped": online.stopped, "asked": online.asked,
            "overlay_triples": [list(t.key) for t in online.extra],
            "answers_by_round": [list(a.answers) for a in online.answers]}})

"""The query's config section (``query``), declared once (runtime/settings.py). A build may
carry its own values in its config; ``Runtime.open`` reads them here."""

from __future__ import annotations

from dataclasses import dataclass

from lokg.runtime.settings import (BOOL, COUNT, FILE, THREADS, WEIGHT, Settings, choice, integer,
                                   number, setting, text)

#: How the one call may answer (``query.reader``): one of the candidates | anything.
READER_MODES = ("choice", "free")
#: Which forced-choice picks count (``query.choice_check``): ones the derivation reaches | any
#: listed candidate.
CHOICE_CHECKS = ("derivation", "none")
#: What a derived chain's context holds (``query.derived_context``, ``query.deferred_context``).
DERIVED_CONTEXTS = ("retrieval", "chain")


@dataclass(frozen=True)
class QuerySettings(Settings, section="query"):
    """How the runtime answers (runtime/query.py): retrieval, the one call, the feedback log."""

    lambda_q: float = setting(1.0, WEIGHT, "weight of cos(enc(q), enc(a)) in S_final")
    max_candidates: int = setting(20, COUNT,
            "candidate answers whose best paths form the candidate set")
    bridge_candidates: int = setting(4, integer(0),
            "after them, candidates reached only through a feedback bridge ('asked with', written "
            "by feedback_enrich): ranked apart, so bridges never displace the facts' candidates")
    passages: int = setting(3, integer(0),
            "stores built from documents: the triples of this many chunks nearest the question "
            "(chunk_vectors.npy) join the candidate set; 0 = off")
    passage_ranking: str = setting("graph", choice("dense", "graph"),
            "how the query.passages chunks and the query.passage_items passages are chosen: "
            "'dense' = nearest the question by the "
            "store's encoder | 'graph' = personalized PageRank over the chunks and the entities "
            "extracted from them, seeded by the linked entities and the dense scores "
            "(runtime/passage_rank.py; bench/passage_recall.py, docs/BENCHMARKS.md)")
    passage_items: int = setting(16, integer(0),
            "stores built from documents: this many chunks, first in query.passage_ranking's "
            "order, are offered to ITTC beside the triples, each whole or as some of its "
            "sentences (query.passage_sentences), valued down the ranking; a triple an emitted "
            "passage holds is not paid for twice (runtime/ittc/passages.py); 0 = off, triples "
            "only")
    passage_sentences: str = setting("auto", choice("sources", "question", "auto"),
            "which sentences of a query.passage_items chunk its sentences option holds: "
            "'sources' = those the candidate triples were extracted from, worth their share of "
            "the chunk's tokens | 'question' = its fewest sentences best matching the question "
            "by the build's sentence_vectors.npy, worth their share of the match | 'auto' = "
            "'sources' when the question's match is concentrated (the best offered chunk's "
            "cosine at least 0.14 above the mean of the next four's), else 'question' (runtime/passage_items.py; builds "
            "without sentence vectors: 'sources')")
    focus_candidates: int = setting(5, integer(0),
            "top candidates that get ITTC's λ_boost (with linked entities)")
    min_link_cosine: float = setting(0.5, number(-1, 1),
            "vector fallback: nearest entity must reach this cosine")
    qualified_links: int = setting(4, integer(0),
            "stores extracted from documents: a name the question writes also links the entities "
            "whose names hold it as a run of words ('Manchuria' -> 'Soviet invasion of "
            "Manchuria'), when it has at most this many (more: a generic word); runtime/linker.py; "
            "0 = off")
    threads: int | None = setting(1, THREADS,
            "threads of the query path's numerics, process-wide, set at open: numpy's BLAS (every "
            "product a question makes is small; runtime.environment.limit_blas_threads) and the "
            "torch encoder's; null = leave them as they are")
    encoder_backend: str = setting("auto", choice("auto", "onnx", "torch"),
            "auto: the build's exported ONNX model (onnxruntime), else sentence-transformers | "
            "onnx | torch")
    cached_buckets: int = setting(256, COUNT,
            "path-cache buckets kept in memory (LRU); fewer: less memory, more bucket reads")
    reader: str = setting("choice", choice(*READER_MODES),
            "the one call: 'choice' = the reply must be one of the top choice_candidates (a "
            "grammar on the local model, validated for other backends; outside them = the top "
            "candidate, flagged) | 'free' = any answer list (strong endpoints, answers beyond the "
            "candidates)")
    choice_candidates: int = setting(5, COUNT, "candidates a forced choice lists at most")
    choice_margin: float = setting(1.0, WEIGHT,
            "forced choice lists only candidates whose S_final is within this of the top one; when "
            "none is, retrieval decides and no call is made (a weak reader cannot undo a clear "
            "lead). Fitted for the embedded SmolLM2 (bench/fit_choice_margin.py, "
            "docs/BENCHMARKS.md); a build may give a stronger reader more")
    choice_check: str = setting("derivation", choice(*CHOICE_CHECKS),
            "which forced-choice picks may replace retrieval's top candidate: 'derivation' = only "
            "ones the relation knowledge's derivation (the predicted chain from the topic) "
            "reaches, where it reaches any; when no listed candidate but the top could count, no "
            "call | 'none' = any listed one. Chosen on PathQuestion dev for the embedded SmolLM2 "
            "(bench/fit_choice_margin.py --checks, docs/BENCHMARKS.md)")
    derived_context: str = setting("chain", choice(*DERIVED_CONTEXTS),
            "what a derived answer's context holds (no call either way): 'chain' = the chain's "
            "facts alone, the evidence the answer rests on | 'retrieval' = its chain's facts "
            "first, then the retrieval context in the rest of the budget")
    deferred_context: str = setting("retrieval", choice(*DERIVED_CONTEXTS),
            "what policy route reads when the zero-call gate does not pass (a derived chain "
            "that the reader, or with reader none retrieval, answers from): 'retrieval' = the "
            "chain's facts first, then the retrieval context in the rest of the budget (where "
            "the chain is wrong, what retrieval found is the reader's second chance) | 'chain' "
            "= the chain's facts alone")
    relation_weight: float = setting(20.0, WEIGHT,
            "λ_rel: weight of the query-relation term in S_final, for stores with relation "
            "knowledge (models/relknow); 0 = off")
    chain_boost: bool = setting(True, BOOL,
            "ITTC's λ_boost for the facts of the predicted relation chain")
    feedback: bool = setting(True, BOOL,
            "the feedback log (runtime/feedback.py): what questions find missing, appended beside "
            "the builds (<store>/feedback/log; a store on S3: beside its local cache) for the "
            "scheduled refresh to fill (docs/ARCHITECTURE.md); the question text only with "
            "feedback_questions")
    feedback_dir: str | None = setting(None, FILE, "null = beside the builds")
    feedback_questions: bool = setting(False, BOOL,
            "the feedback log records the question text too")
    feedback_segment_mb: int = setting(16, COUNT, "a writer's segment rotates at this size")
    feedback_max_mb: int = setting(256, COUNT, "past this in all segments the oldest are deleted")
    feedback_bridges: int = setting(3, integer(0),
            "entities an answer reached beyond its topic that a record names (the next hop of a "
            "multi-hop question starts there; 0 = the topic and the chain stop only)")
    feedback_passages: int = setting(10, integer(0),
            "chunks nearest the question a record names (stores from documents): the passages the "
            "refresh extracts about the question's names — where a hop the links' paths never "
            "reach is written (0 = none; one question embedding per logged answer, no LLM call)")
    feedback_llm: str | None = setting(None, text(r".+", "an LLM backend such as local",
                                                   nullable=True),
            "an LLM backend that lists the missing facts as sub-questions after the answer "
            "(runtime/feedback_llm.py; one more call per logged answer); null = none, no call")

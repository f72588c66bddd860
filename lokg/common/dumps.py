"""What a dump holds: documents or triples. Ingest (``spark_jobs``) and the text stages read
the same answer from here, so a build never reads one dump two ways."""

from __future__ import annotations

from pathlib import Path

#: In a dump directory: the corpus file read instead of every document file when present.
CORPUS_FILES = ("corpus.json", "corpus.jsonl")


def looks_like_documents(dump: Path) -> bool:
    """``ingest.format=auto`` reads documents from a corpus folder or a JSON/JSONL file."""
    if dump.is_dir():
        return any((dump / name).is_file() for name in CORPUS_FILES)
    return dump.suffix in (".json", ".jsonl")


def build_format(configured: str, dump: Path) -> str:
    """``docs`` when the build reads documents (configured, or detected), else ``triples``."""
    if configured == "auto":
        return "docs" if looks_like_documents(dump) else "triples"
    return "docs" if configured == "docs" else "triples"

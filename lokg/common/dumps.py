"""What a dump holds and how a build reads it: its format, documents or triples, and the
``ingest`` settings. Ingest (``spark_jobs``) and the text stages read the same answer from
here, so a build never reads one dump two ways."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lokg.runtime.settings import BOOL, FILE, SHARE, STRINGS, Settings, choice, setting

#: Dump formats ``ingest.format`` accepts (``auto`` detects one from the files); the DAGs keep
#: a copy (dags/lokg_common.py, which cannot import the package), checked by tests/test_dags.py.
FORMATS = ("auto", "nt", "tsv", "pathquestion", "metaqa", "fb15k237", "synth", "docs")

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


@dataclass(frozen=True)
class IngestSettings(Settings, section="ingest"):
    """A dump into the entity, relation and triple tables (spark_jobs/ingest.py)."""

    format: str = setting("auto", choice(*FORMATS),
            "the dump's format; auto detects it from the files")
    max_malformed_share: float = setting(0.01, SHARE,
            "fail the stage above this share of malformed lines")
    languages: list[str] = setting(["en"], STRINGS,
            "literal language tags kept as names/aliases/descriptions ('' = untagged)")
    literals_as_edges: bool = setting(False, BOOL,
            "literal facts become entity attributes unless set")
    entities_file: str | None = setting(None, FILE,
            "optional JSONL/TSV of names, aliases, descriptions")

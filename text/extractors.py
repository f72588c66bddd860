"""Extraction backends of the ``triple_extract`` stage, chosen by name (``triple_extract.backend``).

A backend turns the text of one chunk into entities and triples::

    {"entities": [{"name": str, "type": str, "description": str}, ...],
     "triples": [[subject, relation phrase, object], ...],
     "usage": {"prompt_tokens": int, "completion_tokens": int}}   # usage: LLM backends only

``fingerprint`` names everything that changes its output (backend, model, prompt version): the
stage caches results per (fingerprint, chunk id), so a rerun pays only for new chunks.
``concurrency`` bounds the chunks in flight at once. A chunk a backend cannot extract (a reply
that stays malformed after its retries, an unreachable endpoint) raises
:class:`ChunkExtractionError`; the stage quarantines that chunk with the reason and goes on.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Protocol

from lokg.common.stage import StageError

#: Backend name -> "module:factory"; the factory takes the stage's config section.
BACKENDS: dict[str, str] = {
    "offline": "lokg.text.offline_extractor:OfflineExtractor",
    "openai": "lokg.text.openai_extractor:OpenAIExtractor",
}


class ChunkExtractionError(StageError):
    """One chunk could not be extracted; the stage quarantines it with this reason.

    ``usage``: the tokens its failed attempts spent (LLM backends; zeros otherwise), so the
    stage's token and cost report counts quarantined chunks too.
    """

    def __init__(self, message: str, *, usage: Mapping[str, int] | None = None):
        super().__init__(message)
        self.usage = dict(usage or {"prompt_tokens": 0, "completion_tokens": 0})


class Extractor(Protocol):
    name: str
    fingerprint: str
    concurrency: int

    def extract(self, text: str) -> dict:
        """Entities and triples of one chunk's text (the shape in the module docstring)."""


def make_extractor(cfg: Mapping) -> Extractor:
    """The backend ``cfg["backend"]`` names, built from the stage's config section."""
    name = cfg["backend"]
    if name not in BACKENDS:
        raise StageError(f"triple_extract.backend: unknown backend '{name}' "
                         f"(known: {', '.join(sorted(BACKENDS))}, precomputed)")
    module, factory = BACKENDS[name].split(":")
    make: Callable[[Mapping], Extractor] = getattr(importlib.import_module(module), factory)
    return make(cfg)

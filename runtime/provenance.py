"""Where a store's triples came from (DESIGN §8): each triple's restored source sentence, which
ITTC offers as its verbose granularity, and the citations of the triples an answer used.

Read from the build's ``triple_context`` and ``triple_sources`` tables with ``documents`` and
``sentences``; a build without them (older builds, a KB dump without context restoration) has
no provenance and every lookup returns nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from runtime.contract import Build

Triple = tuple[int, int, int]
#: Sources cited a triple at most: one triple extracted from many passages cites the first few.
CITATIONS_PER_TRIPLE = 3


class Provenance:
    """Restored sentences and sources of a build's triples, keyed by (s, r, o)."""

    def __init__(self, build: Build):
        tables = build.manifest.get("tables", {})
        self.sentence: dict[Triple, str] = {}
        self._sources: dict[Triple, list[tuple[str, str]]] = defaultdict(list)
        self._titles: dict[str, str] = {}
        self._sentences: dict[str, tuple[str, str]] = {}  # sentence_id -> (doc_id, text)
        if tables.get("triple_context", {}).get("rows"):
            t = build.read("triple_context", columns=["s", "r", "o", "text"])
            self.sentence = dict(zip(zip(*(t[c].to_pylist() for c in "sro")),
                                     t["text"].to_pylist()))
        if tables.get("triple_sources", {}).get("rows"):
            self._load_sources(build)

    def _load_sources(self, build: Build) -> None:
        t = build.read("triple_sources")
        for s, r, o, chunk, sentence in zip(*(t[c].to_pylist() for c in t.column_names)):
            self._sources[(s, r, o)].append((chunk, sentence))
        docs = build.read("documents", columns=["doc_id", "title"])
        self._titles = dict(zip(docs["doc_id"].to_pylist(), docs["title"].to_pylist()))
        sent = build.read("sentences", columns=["sentence_id", "doc_id", "text"])
        self._sentences = {sid: (doc, text) for sid, doc, text in
                           zip(*(sent[c].to_pylist() for c in sent.column_names))}

    def __bool__(self) -> bool:
        return bool(self.sentence or self._sources)

    def citations(self, used: Iterable[tuple[Triple, str]]) -> list[dict]:
        """The sources of the used triples (``(ids, rendered line)``), in their order."""
        out = []
        for ids, line in used:
            for chunk, sentence_id in self._sources.get(ids, ())[:CITATIONS_PER_TRIPLE]:
                doc_id, text = self._sentences.get(sentence_id, ("", ""))
                out.append({"triple": line, "title": self._titles.get(doc_id, ""),
                            "doc_id": doc_id, "chunk_id": chunk, "sentence_id": sentence_id,
                            "sentence": text})
        return out

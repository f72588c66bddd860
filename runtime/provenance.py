"""Where a store's triples came from: each triple's restored source sentence, which
ITTC offers as its verbose granularity, and the citations of the triples an answer used.

Read from the build's ``triple_context`` and ``triple_sources`` tables with ``documents`` and
``sentences``; a build without them (older builds, a KB dump without context restoration) has
no provenance and every lookup returns nothing. A triple cites the passages it was extracted
from (``basis`` "extraction"); one that was not extracted from text — a KB dump's triple whose
sentence was restored from its linked documents — cites the document of its restored sentence
(``basis`` "context"). A sentence restored from an entity description cites nothing: the
description is the graph's own data, not a document.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from lokg.runtime.contract import Build
from lokg.runtime.passage_rank import PassageGraph

Triple = tuple[int, int, int]
#: Sources cited a triple at most: one triple extracted from many passages cites the first few.
CITATIONS_PER_TRIPLE = 3


class Provenance:
    """Restored sentences and sources of a build's triples, keyed by (s, r, o)."""

    def __init__(self, build: Build):
        tables = build.manifest.get("tables", {})
        self.sentence: dict[Triple, str] = {}
        self._restored_from: dict[Triple, str] = {}  # triple -> its restored sentence's id
        self._sources: dict[Triple, list[tuple[str, str]]] = defaultdict(list)
        self._titles: dict[str, str] = {}
        # sentence_id -> (doc_id, first chunk holding it, text)
        self._sentences: dict[str, tuple[str, str, str]] = {}
        self._chunk_sentences: dict[str, list[str]] = defaultdict(list)  # in text order
        self._sentence_rows: dict[str, int] = {}  # sentence_id -> its row of sentence_vectors
        self.sentence_vectors: np.ndarray | None = None
        self._chunk_docs: list[str] = []  # chunk row -> its document's id
        self._chunk_texts: list[str] = []  # chunk row -> its text
        if tables.get("triple_context", {}).get("rows"):
            t = build.read("triple_context", columns=["s", "r", "o", "sentence_id", "text"])
            triples = list(zip(*(t[c].to_pylist() for c in "sro")))
            self.sentence = dict(zip(triples, t["text"].to_pylist()))
            self._restored_from = dict(zip(triples, t["sentence_id"].to_pylist()))
        self._passages: list[list[Triple]] = []  # chunk row -> the triples sourced there
        self._chunk_ids: list[str] = []  # chunk row -> its id
        self.chunk_vectors: np.ndarray | None = None
        self._graph: PassageGraph | None = None  # built on the first ranking (passage_graph)
        self._graph_lock = threading.Lock()
        if tables.get("sentences", {}).get("rows") and (self.sentence or tables.get(
                "triple_sources", {}).get("rows")):
            self._load_documents(build)
        if tables.get("triple_sources", {}).get("rows"):
            self._load_sources(build)
        if tables.get("chunks", {}).get("rows"):  # linked text too: the passages feedback names
            self._load_passages(build)

    def _load_documents(self, build: Build) -> None:
        docs = build.read("documents", columns=["doc_id", "title"])
        self._titles = dict(zip(docs["doc_id"].to_pylist(), docs["title"].to_pylist()))
        sent = build.read("sentences", columns=["sentence_id", "doc_id", "chunk_id", "text"])
        self._sentences = {sid: (doc, chunk, text) for sid, doc, chunk, text in
                           zip(*(sent[c].to_pylist() for c in sent.column_names))}
        for sid, (_, chunk, _) in self._sentences.items():  # the table is in text order
            self._chunk_sentences[chunk].append(sid)
        path = build.path / "sentence_vectors.npy"  # older builds have none
        vectors = np.load(path, mmap_mode="r") if path.is_file() else None
        if vectors is not None and vectors.ndim == 2 and len(vectors) == sent.num_rows:
            self._sentence_rows = {sid: i for i, sid in enumerate(sent["sentence_id"].to_pylist())}
            self.sentence_vectors = vectors

    def _load_sources(self, build: Build) -> None:
        t = build.read("triple_sources")
        for s, r, o, chunk, sentence in zip(*(t[c].to_pylist() for c in t.column_names)):
            self._sources[(s, r, o)].append((chunk, sentence))

    def _load_passages(self, build: Build) -> None:
        """The chunk vectors (memory-mapped) and, per chunk row, the triples it sourced."""
        path = build.path / "chunk_vectors.npy"
        if not path.is_file():
            return
        vectors = np.load(path, mmap_mode="r")
        table = build.read("chunks", columns=["chunk_id", "doc_id", "text"])
        chunks = table.column("chunk_id").to_pylist()
        if vectors.ndim != 2 or len(vectors) != len(chunks):
            return
        self._chunk_docs = table.column("doc_id").to_pylist()
        self._chunk_texts = table.column("text").to_pylist()
        row = {chunk: i for i, chunk in enumerate(chunks)}
        self._passages = [[] for _ in chunks]
        self._chunk_ids = chunks
        for triple, sources in self._sources.items():
            for chunk, _ in sources:
                if chunk in row and triple not in self._passages[row[chunk]][-1:]:
                    self._passages[row[chunk]].append(triple)
        self.chunk_vectors = vectors

    def passage_triples(self, question: np.ndarray, passages: int) -> list[Triple]:
        """The triples sourced in the ``passages`` chunks most similar to the question vector
        (the same encoder embedded both), best chunk first, each triple once."""
        return self.triples_of(self._nearest_rows(question, passages))

    def ranked_passages(self, question: np.ndarray | None, entities: Sequence[int], n: int,
                        graph: bool) -> tuple[list[int], list[float]]:
        """(rows, scores) of the ``n`` best chunks, best first: by the dense scores, or with
        ``graph`` by the personalized PageRank (:meth:`ranked_rows`; its mass the score)."""
        if self.chunk_vectors is None or n <= 0:
            return [], []
        dense = self.dense_scores(question)
        if graph:
            rows, mass = self.passage_graph().top_scored(entities, dense, n)
            return rows, mass
        if dense is None:
            return [], []
        rows = np.argsort(-dense, kind="stable")[:n].tolist()
        return rows, dense[rows].tolist()

    def triples_of(self, rows: list[int]) -> list[Triple]:
        """The triples sourced in the chunks at ``rows``, in that order, each once."""
        return list(dict.fromkeys(t for i in rows for t in self._passages[i]))

    def ranked_rows(self, question: np.ndarray | None, entities: Sequence[int],
                    passages: int) -> list[int]:
        """The rows of the ``passages`` chunks with the most personalized PageRank mass."""
        if self.chunk_vectors is None or passages <= 0:
            return []
        return self.passage_graph().top(entities, self.dense_scores(question), passages)

    def passage_graph(self) -> PassageGraph:
        """The build's entity–passage graph, made once, on first use."""
        with self._graph_lock:
            if self._graph is None:
                n_entities = 1 + max((max(s, o) for s, _, o in self._sources), default=-1)
                self._graph = PassageGraph(self._passages, n_entities)
            return self._graph

    def dense_scores(self, question: np.ndarray | None, rows: Sequence[int] | None = None
                     ) -> np.ndarray | None:
        """Every chunk's dot product with the question vector, or those of the chunks at
        ``rows`` in that order (None: no usable vector)."""
        if question is None or self.chunk_vectors is None or \
                question.shape[-1] != self.chunk_vectors.shape[1]:
            return None
        vectors = self.chunk_vectors if rows is None else self.chunk_vectors[list(rows)]
        return vectors @ np.asarray(question, np.float32).reshape(-1)

    @property
    def extracted(self) -> bool:
        """Whether the build's triples were extracted from its passages (a store built from
        documents; a KB dump with linked text has chunks but no extraction sources)."""
        return bool(self._sources) and self.chunk_vectors is not None

    @property
    def chunk_triples(self) -> list[list[Triple]]:
        """Per chunk row, the triples sourced there (empty without chunk vectors)."""
        return self._passages

    def chunk_id(self, row: int) -> str:
        """The id of the chunk at ``row`` of the chunks table."""
        return self._chunk_ids[row]

    def passage(self, row: int) -> tuple[str, str, str, str]:
        """(chunk id, doc id, title, text) of the chunk at ``row``."""
        doc = self._chunk_docs[row]
        return self._chunk_ids[row], doc, self._titles.get(doc, ""), self._chunk_texts[row] or ""

    def chunk_sentences(self, chunk_id: str) -> list[tuple[str, str]]:
        """(sentence id, text) of the sentences that start in the chunk, in text order."""
        return [(sid, self._sentences[sid][2]) for sid in self._chunk_sentences.get(chunk_id, ())]

    def sentence_match(self, question: np.ndarray | None, sentence_ids: Sequence[str]
                       ) -> np.ndarray | None:
        """Each sentence's dot product with the question vector (the build's sentence vectors,
        the same encoder); None without a usable vector or a vector for every sentence."""
        vectors = self.sentence_vectors
        if question is None or vectors is None or question.shape[-1] != vectors.shape[1]:
            return None
        rows = [self._sentence_rows.get(sid) for sid in sentence_ids]
        if None in rows:
            return None
        return vectors[rows] @ np.asarray(question, np.float32).reshape(-1)

    def sources(self, triple: Triple) -> list[tuple[str, str]]:
        """(chunk id, sentence id) of every passage the triple was extracted from."""
        return self._sources.get(triple, [])

    def nearest_chunks(self, question: np.ndarray, passages: int) -> list[str]:
        """The ids of the ``passages`` chunks most similar to the question vector, best first."""
        return [self._chunk_ids[i] for i in self._nearest_rows(question, passages)]

    def _nearest_rows(self, question: np.ndarray, passages: int) -> list[int]:
        scores = self.dense_scores(question)
        if scores is None or passages <= 0:
            return []
        return np.argsort(-scores, kind="stable")[:passages].tolist()

    def citations(self, used: Iterable[tuple[Triple, str]]) -> list[dict]:
        """The sources of the used triples (``(ids, rendered line)``), in their order."""
        out = []
        for ids, line in used:
            for basis, chunk, sentence_id in self._cited(ids):
                doc_id, _, text = self._sentences.get(sentence_id, ("", "", ""))
                out.append({"triple": line, "title": self._titles.get(doc_id, ""),
                            "doc_id": doc_id, "chunk_id": chunk, "sentence_id": sentence_id,
                            "sentence": text, "basis": basis})
        return out

    def _cited(self, ids: Triple) -> list[tuple[str, str, str]]:
        """(basis, chunk_id, sentence_id) of what a triple cites: the passages it was
        extracted from, else the document sentence its context was restored from."""
        extracted = self._sources.get(ids, ())
        if extracted:
            return [("extraction", c, s) for c, s in extracted[:CITATIONS_PER_TRIPLE]]
        restored = self._sentences.get(self._restored_from.get(ids, ""))
        return [("context", restored[1], self._restored_from[ids])] if restored else []

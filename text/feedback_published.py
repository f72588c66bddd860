"""What enrichment reads of the store's published build — its chunk index, graph and
encoder — and how triples and names are compared with the graph's."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lokg.runtime.contract import Build
from lokg.runtime.encoder import SentenceEncoder
from lokg.runtime.linker import normalise
from lokg.text.chunking import content_id
from lokg.text.feedback_questions import INVERSE
from lokg.text.triple_context import readable_relation
from lokg.text.triple_extract import entity_key, surface


class Published:
    """What enrichment reads of the store's CURRENT build."""

    def __init__(self, build: Build, encoder: SentenceEncoder | None):
        self.build, self.encoder = build, encoder
        self.chunks = build.read("chunks").to_pylist()
        self.row_of = {c["chunk_id"]: i for i, c in enumerate(self.chunks)}
        by_doc: dict[str, list[dict]] = {}
        for s in build.read("sentences").to_pylist():
            by_doc.setdefault(s["doc_id"], []).append(s)
        self.sentences = {c["chunk_id"]: [(s["sentence_id"], s["text"])
                                          for s in by_doc.get(c["doc_id"], ())
                                          if c["start"] <= s["start"] and s["end"] <= c["end"]]
                          for c in self.chunks}
        self.vectors = np.load(build.path / "chunk_vectors.npy")
        ent = build.read("entities", columns=["id", "key", "name", "aliases"])
        self.keys = ent["key"].to_pylist()
        self.names = ent["name"].to_pylist()
        self.id_of = {k: i for i, k in enumerate(self.keys)}
        self.by_form: dict[str, str] = {}
        self.forms_of: dict[str, set[str]] = {}
        for key, name, aliases in zip(self.keys, self.names, ent["aliases"].to_pylist()):
            forms = {entity_key(f) for f in (name, *(aliases or ()))}
            self.forms_of[key] = forms
            for form in sorted(forms):
                self.by_form.setdefault(form, key)
        rel = build.read("relations", columns=["id", "name"])
        self.relations = rel["name"].to_pylist()
        self._named: Names | None = None

    @property
    def named(self) -> Names:
        """The entity names by word (built on first use: only names nothing linked need it)."""
        if self._named is None:
            self._named = Names(self.names)
        return self._named

    def forms(self, key: str, name: str) -> set[str]:
        """The folded forms that name entity ``key`` (its name, aliases, the name asked)."""
        return self.forms_of.get(key, set()) | {entity_key(name)}

    def end(self, key: str | None, written: str) -> tuple[str, str]:
        """(key, name) of a triple's end: ``key``, else the entity its folded name names, else
        a new entity keyed by that folded name."""
        folded = entity_key(written)
        key = key or self.by_form.get(folded, folded)
        i = self.id_of.get(key)
        return key, self.names[i] if i is not None else surface(written)

    def fingerprint(self, cfg: Mapping, backend: str) -> str:
        return content_id(*sorted(c["chunk_id"] for c in self.chunks), backend, cfg["k"])

    def nearest(self, texts: list[str], k: int, skips: list[int] | None = None
                ) -> list[list[int]]:
        """Rows of the ``k`` chunks nearest each text by cosine after its first ``skip``,
        best first."""
        queries = self.encoder.encode_queries(texts)
        scores = queries @ self.vectors.T
        skips = skips or [0] * len(texts)
        return [list(np.argsort(-row, kind="stable")[skip:skip + k])
                for row, skip in zip(scores, skips)]

    def graph_texts(self, keys: set[str]) -> dict[str, list[str]]:
        """The graph's triples about each entity key as folded "h · r · t" texts."""
        ids = [self.id_of[k] for k in keys if k in self.id_of]
        out: dict[str, list[str]] = {k: [] for k in keys}
        if not ids:
            return out
        t = self.build.read("triples")
        hit = pc.or_(pc.is_in(t["s"], pa.array(ids)), pc.is_in(t["o"], pa.array(ids)))
        for s, r, o in zip(*(t.filter(hit)[c].to_pylist() for c in ("s", "r", "o"))):
            line = triple_text(self.names[s], self.relations[r], self.names[o])
            for e in (s, o):
                out.setdefault(self.keys[e], []).append(line)
        return out


def triple_text(head: str, relation: str, tail: str) -> str:
    """The folded "h · r · t" a triple is compared by (relation as words, no leading ``~``)."""
    return f"{entity_key(head)} · {readable_relation(relation.lstrip(INVERSE)).lower()} · " \
           f"{entity_key(tail)}"


def edit_distance(a: str, b: str) -> float:
    """Levenshtein distance over the longer length: 0 for equal texts, 1 for nothing shared."""
    if a == b:
        return 0.0
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1] / max(len(a), len(b))


def near_duplicate(text: str, others: list[str], threshold: float) -> int | None:
    """Index of the first of ``others`` within ``threshold`` of ``text``, else None."""
    for i, other in enumerate(others):
        longest = max(len(text), len(other))
        if abs(len(text) - len(other)) <= threshold * longest \
                and edit_distance(text, other) <= threshold:
            return i
    return None


def loose(text: str) -> str:
    """A name folded to compare a written form with the graph's: the linker's fold with the
    accents dropped ("Aschenbrödel" and "Aschenbrodel" are one)."""
    text = unicodedata.normalize("NFKD", text)
    return normalise("".join(c for c in text if not unicodedata.combining(c)))


class Names:
    """The graph's entity names, loosely folded and indexed by word."""

    def __init__(self, names: list[str]):
        self.loose = [loose(name) for name in names]
        self.by_word: dict[str, set[int]] = {}
        for i, name in enumerate(self.loose):
            for word in set(name.split()):
                self.by_word.setdefault(word, set()).add(i)

    def meant(self, name: str) -> list[int]:
        """The entities a written name may mean: those of the same loose form, else those of
        the fewest words that hold its words in order and are at least half made of them
        ("Hayek" → "Friedrich Hayek", "Golden State" → "Golden State Warriors", but not
        "TEUs" → "3.16 million TEUs in 2013")."""
        key = loose(name)
        words = key.split()
        if not words:
            return []
        ids = set.intersection(*(self.by_word.get(w, set()) for w in words))
        same = sorted(i for i in ids if self.loose[i] == key)
        if same:
            return same
        held = [i for i in ids if f" {key} " in f" {self.loose[i]} "
                and 2 * len(words) >= len(self.loose[i].split())]
        fewest = min((len(self.loose[i].split()) for i in held), default=0)
        return sorted(i for i in held if len(self.loose[i].split()) == fewest)

"""Stage ``feedback_enrich`` (DESIGN §9): what questions found missing, looked up in the store's
own documents and written as a **delta** of triples the next build takes in.

It reads the store being refreshed, not this build: the feedback log beside its builds
(``runtime.feedback.read_log``, which skips torn or malformed lines with a reason) and the
chunk index of the **published** build (``CURRENT``: its ``chunks``, ``sentences``,
``chunk_vectors.npy`` and encoder) — this build's own chunk vectors only exist after
``triple_context``. The driver hands the store root over as the pseudo-input ``store``.

For each open sub-question (e, r, ?) (``~r``: (?, r, e); a bare topic mention when nothing
linked) the ``k`` chunks nearest its text by cosine are extracted with the configured backend
(the ``triple_extract`` backends and their cache, ``precomputed``: the passage's own OpenIE
triples, from ``feedback_enrich.precomputed_file`` when set, else triple_extract's file). A triple is kept when it answers the sub-question: the entity on the side the
relation asks about (by folded name or alias) and the extracted phrase close to the relation
(cosine of the two texts with the store's encoder ≥ ``relation_min_cosine``); it is written
with the sub-question's own relation, so it lands in the graph's relation, not beside it. A
mention has no relation: its triples keep the graph relation nearest their phrase, else the
phrase. Kept triples closer than ``dedupe_threshold`` (normalised edit distance of
"h · r · t") to a triple of the graph about the same entity, or to one already kept, are
dropped.

A name a question wrote that nothing linked (a record's ``unlinked``: "Aschenbrodel" where the
graph has "Aschenbrödel", "Hayek" where it has "Friedrich Hayek") asks which entity it names
(relation :data:`ALIAS`): the one entity the graph's names allow — the same name with accents
dropped, else the shortest names holding its words that are at least half made of them —
written in a passage among the ``k`` nearest the name, becomes an **alias** of that entity in
the delta (``entities.jsonl``), which the next build links. Its re-opening, closing and depth
are those of any sub-question.

Deltas persist in ``<store>/feedback/deltas/<id>.parquet`` + ``<id>.json``; the id is the
published build enriched from, so a retried refresh replaces its own delta. A sub-question an
earlier delta answered is closed; one that found nothing is recorded with the fingerprint of
what it was tried on (chunk set, backend, k) and retried only when that changes — the same
passages and extractor give the same nothing. The stage's output is every persisted delta in
one dump (``triples.tsv``, ``entities.jsonl`` for new entities and aliases) plus the provenance with the
feedback ids (``sources.parquet``): a delta's triples stay in every later build.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lokg.pipeline.stage import Laps, StageError, stage_input, torch_threads
from lokg.runtime.contract import Build, Store
from lokg.runtime.encoder import EncoderError, SentenceEncoder
from lokg.runtime.feedback import BRIDGE, log_dir, now, read_log
from lokg.runtime.linker import common_nouns, normalise
from lokg.runtime.query_settings import QuerySettings
from lokg.text.chunking import content_id
from lokg.text.settings import FeedbackEnrichSettings, TripleExtractSettings
from lokg.text.triple_context import readable_relation
from lokg.text.triple_extract import (ChunkCache, as_triple, best_sentence, cache_root, entity_key,
                                 openie_passages, precomputed_file, relation_key, surface)

STAGE = "feedback_enrich"
INVERSE = "~"
#: The relation of a sub-question asking which entity a name the question wrote names.
ALIAS = "="
DELTA_SCHEMA = pa.schema([
    ("s_key", pa.string()), ("relation", pa.string()), ("o_key", pa.string()),
    ("s_name", pa.string()), ("o_name", pa.string()), ("phrase", pa.string()),
    ("chunk_id", pa.string()), ("sentence_id", pa.string()), ("sentence", pa.string()),
    ("feedback_ids", pa.list_(pa.string()))])
SOURCE_SCHEMA = pa.schema([
    ("s_key", pa.string()), ("relation", pa.string()), ("o_key", pa.string()),
    ("chunk_id", pa.string()), ("sentence_id", pa.string()), ("delta_id", pa.string()),
    ("feedback_id", pa.string())])


def deltas_dir(store_root: str | Path) -> Path:
    """Where a store's deltas persist: beside ``builds/`` and the log, never inside a build."""
    return Path(store_root) / "feedback" / "deltas"


@dataclass
class SubQuestion:
    """One missing fact, merged over every feedback record that asks it."""

    entity: str  # entity key; "" for a topic mention nothing linked
    name: str
    relation: str  # canonical relation, "~name" walks it backwards; "" for a mention
    text: str
    feedback_ids: list[str] = field(default_factory=list)
    asked: list[tuple[str, str]] = field(default_factory=list)  # (time, build_id) per record
    skip: int = 0  # passages nearest the text already tried (a re-opened sub-question)
    #: chunk ids to extract instead of those nearest the text: the passages nearest the
    #: question that asked it (a record's ``passages``)
    passages: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """(entity, relation), or the folded name of an entity named without a key; a name
        retrieved by other words (the question, an LLM's sub-question) or asked of a
        question's passages is another question."""
        key = f"{self.entity}\t{self.relation}\t{entity_key(self.name) if not self.entity else ''}"
        if self.passages:
            return f"{key}\t{content_id(*self.passages)}"
        return key if self.entity or entity_key(self.text) == entity_key(self.name) \
            else f"{key}\t{content_id(self.text)}"


def sub_questions(records: list[dict]) -> list[SubQuestion]:
    """The sub-questions of the log, oldest first, one per (entity, relation) or name: a
    record's missing facts, its mentions (a chain's relation may be a guess — on a graph of
    free-text phrases it nearly always is — while its topic is not; retrieved by the question
    where the log kept it) and the bridge entities the answer reached (the next hop)."""
    return _merged(records, _asks)


def alias_questions(records: list[dict]) -> list[SubQuestion]:
    """One sub-question per name the questions wrote that nothing linked (a record's
    ``unlinked``; relation :data:`ALIAS`): which entity of the graph does it name?"""
    return _merged(records, lambda record: [
        SubQuestion("", name, ALIAS, _question(record) or name)
        for name in record.get("unlinked", ()) if entity_key(name)])


def _question(record: dict) -> str:
    question = record.get("question")
    return question if isinstance(question, str) else ""


def _merged(records: list[dict], asks) -> list[SubQuestion]:
    """``asks(record)``'s sub-questions over the records, merged by key, oldest first."""
    found: dict[str, SubQuestion] = {}
    for record in records:
        for sq in asks(record):
            sq = found.setdefault(sq.key, sq)
            if record["id"] not in sq.feedback_ids:
                sq.feedback_ids.append(record["id"])
            sq.asked.append((record.get("time", ""), record["build_id"]))
    return list(found.values())


def _asks(record: dict) -> list[SubQuestion]:
    """One record's sub-questions: missing facts, mentions, bridges; and, where the record
    names the passages nearest its question, each of them — and each name the question wrote
    that nothing linked — asked of those passages (the hop the links' paths never reach)."""
    question = _question(record)
    asks = [SubQuestion(m["entity"], str(m.get("name") or m["entity"]), m["relation"],
                        str(m.get("text") or "")) for m in record["missing"]]
    asks += [SubQuestion("", m, "", question or m)
             for m in record["mentions"] if isinstance(m, str) and entity_key(m)]
    asks += [SubQuestion("", b["name"], "", b["text"]) for b in record.get("bridges", ())
             if entity_key(b["name"])]
    passages = tuple(record.get("passages", ()))
    if not passages:
        return asks
    unlinked = [SubQuestion("", n, "", n) for n in record.get("unlinked", ()) if entity_key(n)]
    linked = [m for m in record["mentions"] if isinstance(m, str) and entity_key(m)]
    anchor = max(linked, key=lambda m: len(entity_key(m).split()), default="")
    bridge = [SubQuestion("", anchor, BRIDGE, anchor)] if anchor else []
    return asks + [replace(sq, passages=passages) for sq in asks + unlinked + bridge]


@dataclass
class Tried:
    """What the latest earlier delta that enriched a sub-question made of it."""

    answered: bool
    fingerprint: str
    depth: int | None  # passages tried down to this rank (None: a delta before depths)
    from_build: str
    written: str  # when the delta was persisted (the log's time format)

    def asked_after(self, sq: SubQuestion) -> bool:
        """Whether a record of a later build than the one enriched from asked ``sq`` after the
        delta was written: its question still found something missing with the delta in."""
        return any(t > self.written and b != self.from_build for t, b in sq.asked)


def earlier(root: Path, own_id: str | None) -> dict[str, Tried]:
    """Sub-question key -> what the latest earlier delta enriching it made of it."""
    metas = [json.loads(m.read_text(encoding="utf-8"))
             for m in (sorted(root.glob("*.json")) if root.is_dir() else ()) if m.stem != own_id]
    state: dict[str, Tried] = {}
    for data in sorted(metas, key=lambda d: d.get("written", "")):
        depth = data.get("depth", {})
        for key in (*data["answered"], *data["found_nothing"]):
            state[key] = Tried(key in data["answered"], data["fingerprint"], depth.get(key),
                               data.get("from_build", ""), data.get("written", "~"))
    return state


# ---- the published build: chunk index, graph, encoder --------------------------------------
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


# ---- names the questions wrote that nothing linked --------------------------------------------
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


def aliases(sqs: list[SubQuestion], pub: Published, k: int) -> Delta:
    """For each unlinked name (:data:`ALIAS`) the entity it means — the only one the graph's
    names allow (:meth:`Names.meant`), itself a name (not "gravel walk" for "Walk"), written (its name or the name asked) in a passage
    among the ``k`` nearest the name's text after its ``skip`` — as an alias of that entity,
    which the next build links; a name the graph already gives that entity, a name of none or
    several entities, or one no such passage writes, answers nothing."""
    delta = Delta()
    rows = pub.nearest([sq.text for sq in sqs], k, [sq.skip for sq in sqs]) if sqs else []
    for sq, near in zip(sqs, rows):
        meant = pub.named.meant(sq.name)
        if len(meant) != 1 or common_nouns(pub.names, meant) \
                or normalise(sq.name) == normalise(pub.names[meant[0]]):
            continue
        texts = [f" {loose(pub.chunks[row]['text'])} " for row in near]
        if not any(f" {form} " in text for form in (pub.named.loose[meant[0]], loose(sq.name))
                   for text in texts):
            continue
        entry = delta.aliases.setdefault(pub.keys[meant[0]],
                                         {"name": pub.names[meant[0]], "aliases": []})
        if sq.name not in entry["aliases"]:
            entry["aliases"].append(sq.name)
        delta.answered[sq.key] = sq.feedback_ids
    return delta


# ---- extraction of the retrieved passages -----------------------------------------------------
class Extraction:
    """Each retrieved chunk's extracted triples with the configured backend, once per chunk."""

    def __init__(self, config: Mapping, backend: str, dump: Path, out: Path):
        extract_cfg = {**TripleExtractSettings.of(config, StageError), "backend": backend}
        # an OpenIE file of its own: the build may read a sparser one than enrichment does
        own = FeedbackEnrichSettings.of(config, StageError).precomputed_file
        extract_cfg["precomputed_file"] = own or extract_cfg["precomputed_file"]
        self.backend, self.failed = backend, 0
        self.calls = 0  # chunks an LLM backend extracted (a cached chunk makes no call)
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}
        self.results: dict[str, list] = {}
        if backend == "precomputed":
            self.by_doc = _openie_by_document(precomputed_file(extract_cfg, dump))
        else:
            from lokg.text.extractors import make_extractor

            self.extractor = make_extractor(extract_cfg)
            self.cache = ChunkCache(cache_root(extract_cfg, out), self.extractor.fingerprint)

    def triples(self, chunk: dict) -> list:
        """The chunk's triples (precomputed: its document's); a failing chunk has none."""
        if chunk["chunk_id"] not in self.results:
            if self.backend == "precomputed":
                found = self.by_doc.get(chunk["doc_id"], [])
            else:
                from lokg.text.triple_extract import extract_one

                result, cached, reason = extract_one(self.extractor, self.cache, chunk)
                self.failed += bool(reason)
                usage = {} if cached else result.get("usage") or {}
                self.calls += bool(usage)
                for k in self.usage:
                    self.usage[k] += int(usage.get(k, 0))
                found = [] if reason else result.get("triples") or []
            self.results[chunk["chunk_id"]] = [t for t in found if as_triple(t)]
        return self.results[chunk["chunk_id"]]


def _openie_by_document(path: Path) -> dict[str, list]:
    """A HippoRAG-style OpenIE file's triples by the document id its passage has."""
    return {doc_id: doc.get("extracted_triples") or []
            for doc_id, doc in openie_passages(path, STAGE) if doc_id is not None}


# ---- which extracted triples answer a sub-question -------------------------------------------
@dataclass
class Candidate:
    """An extracted triple of a passage retrieved for a sub-question, oriented as it asks."""

    sq: SubQuestion
    chunk: dict
    triple: tuple[str, str, str]  # as extracted: head, relation phrase, tail
    s: tuple[str, str] = ("", "")  # (key, name) in the graph's keys; new entities: folded name
    o: tuple[str, str] = ("", "")
    relation: str = ""
    sentences: list = field(default_factory=list)  # (sentence_id, text) of the chunk


def retrieved(sqs: list[SubQuestion], pub: Published, extraction: Extraction,
              k: int, bridge_ranks: range) -> list[Candidate]:
    """The triples of the ``k`` chunks nearest each sub-question (after the ``skip`` it tried;
    a question's passages: those) whose entity is on the side its relation asks about (a
    mention: either side); a :data:`BRIDGE` sub-question's passages at ``bridge_ranks`` of
    its list (nearest first) also get the bridge (:func:`bridged`)."""
    searched = [sq for sq in sqs if not sq.passages]
    texts = [sq.text or f"{sq.name} {readable_relation(sq.relation.lstrip(INVERSE))}"
             for sq in searched]
    nearest = iter(pub.nearest(texts, k, [sq.skip for sq in searched]) if searched else ())
    out = []
    for sq in sqs:
        rows = [pub.row_of[c] for c in sq.passages if c in pub.row_of] if sq.passages \
            else next(nearest)
        for row in rows:
            chunk = pub.chunks[row]
            sentences = pub.sentences[chunk["chunk_id"]]
            if sq.relation != BRIDGE:
                out += passage_candidates(sq, chunk, sentences, pub, extraction)
                continue
            rank = sq.passages.index(chunk["chunk_id"])
            out += bridged(sq, chunk, sentences, pub, extraction, rank in bridge_ranks)
    return out


def bridged(sq: SubQuestion, chunk: dict, sentences: list, pub: Published,
            extraction: Extraction, bridge: bool = True) -> list[Candidate]:
    """Every triple of a passage nearest the question (as a mention's: the graph relation
    nearest its phrase), and where ``bridge``, (the linked name, :data:`BRIDGE`, the passage's
    topic — the end most of its triples share, first seen) citing the sentence that names the
    topic, unless the topic is the name: the passage's facts and the path from the question
    to them. Each bridge is an edge of the name that takes a place among its top paths."""
    triples = [tuple(t) for t in extraction.triples(chunk)
               if entity_key(t[0]) and entity_key(t[2]) and entity_key(t[0]) != entity_key(t[2])]
    about = replace(sq, relation="")
    out = [Candidate(about, chunk, t, pub.end(None, t[0]), pub.end(None, t[2]),
                     sentences=sentences) for t in triples]
    ends: dict[str, list[str]] = {}
    for head, _, tail in triples:
        for end in (head, tail):
            ends.setdefault(entity_key(end), []).append(end)
    topic = max(ends.values(), key=len)[0] if ends and bridge else ""
    if topic and entity_key(topic) != entity_key(sq.name):
        out.append(Candidate(sq, chunk, (sq.name, BRIDGE, topic), pub.end(None, sq.name),
                             pub.end(None, topic), BRIDGE, sentences))
    return out


def passage_candidates(sq: SubQuestion, chunk: dict, sentences: list, pub: Published,
                       extraction: Extraction) -> list[Candidate]:
    """The triples extracted from one passage that are oriented as ``sq`` asks."""
    cands = (oriented(Candidate(sq, chunk, tuple(triple), sentences=sentences), pub)
             for triple in extraction.triples(chunk))
    return [c for c in cands if c is not None]


def oriented(cand: Candidate, pub: Published) -> Candidate | None:
    """The candidate with graph keys on both ends, or None when the entity is not where the
    sub-question's relation points from (``r``: the head; ``~r``: the tail). A name asked
    about (a mention, a bridge) is also met by its :func:`qualified` forms, and the triple is
    then written about the name asked: the passage of "Maharashtra" joins the graph's
    "Maharashtra state", which a question reached, instead of the separate "Maharashtra"."""
    sq, (head, _, tail) = cand.sq, cand.triple
    forms = pub.forms(sq.entity, sq.name) if sq.entity else {entity_key(sq.name)}
    sides = [(head, tail, False), (tail, head, True)]
    if sq.relation:
        sides = [sides[sq.relation.startswith(INVERSE)]]

    def names(written: str) -> bool:
        return entity_key(written) in forms or (
            not sq.entity and (qualified(written, sq.name) or qualified(sq.name, written)))

    for own, other, backwards in sides:
        if names(own) and not names(other) and entity_key(other):
            ends = (pub.end(sq.entity or None, own if entity_key(own) in forms else sq.name),
                    pub.end(None, other))
            cand.s, cand.o = ends[::-1] if backwards else ends
            return cand
    return None


def qualified(longer: str, shorter: str) -> bool:
    """``longer`` is the name ``shorter`` with a qualifier: after a comma ("Fredericton, New
    Brunswick") or in lower-case words ("Maharashtra state") — not another name that starts
    with it ("Neil Young Harvest", "Golden State Warriors")."""
    longer, shorter = surface(longer), surface(shorter)
    rest = longer[len(shorter):]
    if not rest or not longer.casefold().startswith(shorter.casefold()) \
            or not any(c.isupper() or c.isdigit() for c in shorter):
        return False
    return rest.startswith(",") or (rest.startswith(" ") and entity_key(rest) != "" and
                                    not any(c.isupper() or c.isdigit() for c in rest))


def with_relations(cands: list[Candidate], pub: Published, min_cosine: float) -> list[Candidate]:
    """Candidates whose phrase is close to the relation asked (cosine of the two as words),
    written with that relation; a mention's triple takes the nearest graph relation, else its
    own phrase."""
    phrases = sorted({readable_relation(c.triple[1]).lower() for c in cands})
    wanted = sorted({readable_relation(r).lower() for r in pub.relations}
                    | {readable_relation(c.sq.relation.lstrip(INVERSE)).lower()
                       for c in cands if c.sq.relation})
    if not phrases:
        return []
    vectors = pub.encoder.encode_passages(phrases + wanted)
    sims = vectors[:len(phrases)] @ vectors[len(phrases):].T
    row = {p: i for i, p in enumerate(phrases)}
    col = {w: j for j, w in enumerate(wanted)}
    kept = []
    for c in cands:
        scores = sims[row[readable_relation(c.triple[1]).lower()]]
        if c.sq.relation:
            name = c.sq.relation.lstrip(INVERSE)
            if scores[col[readable_relation(name).lower()]] >= min_cosine:
                c.relation = name
                kept.append(c)
            continue
        best = int(np.argmax(scores)) if len(wanted) else -1
        near = [r for r in pub.relations if readable_relation(r).lower() == wanted[best]] \
            if best >= 0 and scores[best] >= min_cosine else []
        c.relation = near[0] if near else relation_key(c.triple[1])
        kept.append(c)
    return kept


@dataclass
class Delta:
    """The triples one refresh adds, and what became of each sub-question it enriched."""

    rows: list[dict] = field(default_factory=list)
    answered: dict[str, list[str]] = field(default_factory=dict)  # key -> feedback ids
    duplicates: int = 0
    # entity key -> {"name", "aliases"}: names questions wrote for the entity (aliases())
    aliases: dict[str, dict] = field(default_factory=dict)


def deduplicated(cands: list[Candidate], pub: Published, threshold: float) -> Delta:
    """Candidates not within ``threshold`` of a graph triple about the same entity, merged
    when two about the same entity are near each other (the feedback ids of both are then
    answered by one row). A text seen before is not compared again: a passage's triple comes
    once per sub-question asked of it."""
    graph = pub.graph_texts({k for c in cands for k in (c.s[0], c.o[0])})
    delta = Delta()
    kept: dict[str, list[tuple[str, int]]] = {}  # entity key -> (text, row) of rows about it
    seen: dict[str, int] = {}  # text -> its row, or -1: near a graph triple
    for c in cands:
        text = triple_text(c.s[1], c.relation, c.o[1])
        row = seen.get(text)
        if row is None:
            row = _near_row(text, graph.get(c.s[0], []) + graph.get(c.o[0], []),
                            kept.get(c.s[0], []) + kept.get(c.o[0], []), threshold)
        if row is None:
            row = len(delta.rows)
            delta.rows.append(_row(c))
            for key in {c.s[0], c.o[0]}:
                kept.setdefault(key, []).append((text, row))
        else:
            delta.duplicates += 1
        seen[text] = row
        if row < 0:
            continue
        ids = delta.rows[row]["feedback_ids"]
        ids.extend(i for i in c.sq.feedback_ids if i not in ids)
        delta.answered.setdefault(c.sq.key, c.sq.feedback_ids)
    return delta


def _near_row(text: str, graph: list[str], kept: list[tuple[str, int]],
              threshold: float) -> int | None:
    """-1 when ``text`` is near a graph triple, else the row of the first kept text near it,
    else None (``text`` is new)."""
    if near_duplicate(text, graph, threshold) is not None:
        return -1
    hit = near_duplicate(text, [t for t, _ in kept], threshold)
    return kept[hit][1] if hit is not None else None


def _row(c: Candidate) -> dict:
    sentence_id = best_sentence(c.triple[0], c.triple[2], c.sentences)
    text = dict(c.sentences).get(sentence_id, "")
    return {"s_key": c.s[0], "relation": c.relation, "o_key": c.o[0], "s_name": c.s[1],
            "o_name": c.o[1], "phrase": c.triple[1], "chunk_id": c.chunk["chunk_id"],
            "sentence_id": sentence_id or "", "sentence": text, "feedback_ids": []}


# ---- persisted deltas and the stage's output -------------------------------------------------
def persist(root: Path, delta_id: str, delta: Delta, tried: list[SubQuestion],
            meta: dict, k: int) -> None:
    """``<id>.parquet`` then ``<id>.json`` (written last: a delta without it is not one), with
    how deep each sub-question's passages were tried and when."""
    root.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(delta.rows, schema=DELTA_SCHEMA),
                   root / f"{delta_id}.parquet")
    record = {**meta, "delta_id": delta_id, "triples": len(delta.rows), "aliases": delta.aliases,
              "answered": sorted(delta.answered),
              "found_nothing": sorted(sq.key for sq in tried if sq.key not in delta.answered),
              "feedback_ids": {sq.key: sq.feedback_ids for sq in tried},
              "depth": {sq.key: sq.skip + k for sq in tried}, "written": now()}
    tmp = root / f".{delta_id}.json.tmp"
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(root / f"{delta_id}.json")


def consolidated(root: Path, out: Path) -> dict:
    """Every persisted delta as one dump ingest reads (``triples.tsv``, ``entities.jsonl``)
    and the provenance ``triple_context`` maps onto the graph (``sources.parquet``)."""
    out.mkdir(parents=True, exist_ok=True)
    ids = sorted(p.stem for p in root.glob("*.json")) if root.is_dir() else []
    sources, lines, names = {c: [] for c in SOURCE_SCHEMA.names}, {}, {}
    aliases: dict[str, list[str]] = {}
    for delta_id in ids:
        for key, entry in json.loads((root / f"{delta_id}.json").read_text(
                encoding="utf-8")).get("aliases", {}).items():
            names.setdefault(key, entry["name"])
            aliases.setdefault(key, [])
            aliases[key] += [a for a in entry["aliases"] if a not in aliases[key]]
        for row in pq.read_table(root / f"{delta_id}.parquet").to_pylist():
            triple = (row["s_key"], row["relation"], row["o_key"])
            lines[triple] = f"{triple[0]}\t{triple[1]}\t{triple[2]}\n"
            names.setdefault(row["s_key"], row["s_name"])
            names.setdefault(row["o_key"], row["o_name"])
            for feedback_id in row["feedback_ids"]:
                for column, value in zip(SOURCE_SCHEMA.names, (*triple, row["chunk_id"],
                                         row["sentence_id"], delta_id, feedback_id)):
                    sources[column].append(value)
    (out / "triples.tsv").write_text("".join(lines[t] for t in sorted(lines)), encoding="utf-8")
    (out / "entities.jsonl").write_text("".join(
        json.dumps({"key": k, "name": names[k], **({"aliases": aliases[k]} if k in aliases
                                                   else {})}, ensure_ascii=False) + "\n"
        for k in sorted(names)), encoding="utf-8")
    pq.write_table(pa.table(sources, schema=SOURCE_SCHEMA), out / "sources.parquet")
    return {"deltas": len(ids), "delta_triples": len(lines),
            "delta_aliases": sum(map(len, aliases.values()))}


def published(store: Store) -> tuple[Build | None, str]:
    """The CURRENT build when it has a chunk index to retrieve from, else why not."""
    current = store.current_id()
    if current is None:
        return None, "nothing to enrich from: the store has no published build"
    build = store.build(current)
    problem = chunk_index_problem(build)
    return (None, f"nothing to enrich from: {problem}") if problem else (build, "")


def chunk_index_problem(build: Build) -> str:
    """Why ``build`` has no chunk index to retrieve passages from ("" when it has one)."""
    if not build.manifest["tables"].get("chunks", {}).get("rows") or \
            not (build.path / "chunk_vectors.npy").is_file():
        return f"build {build.build_id} has no chunks (no documents)"
    return ""


def _open(sqs: list[SubQuestion], state: dict[str, Tried], fingerprint: str,
          cfg: Mapping) -> tuple[list[SubQuestion], dict]:
    """The sub-questions to enrich, most asked first — new ones; ones that found nothing on
    other passages; and, **re-opened** at the next ``k`` passages (down to ``max_passages``),
    ones asked again after their delta was written (its question still lacks something) —
    and how many were closed as answered, as tried, or re-opened."""
    k, deepest = int(cfg["k"]), int(cfg["max_passages"])
    todo, counts = [], {"closed_answered": 0, "closed_tried": 0, "reopened": 0}
    for sq in sqs:
        st = state.get(sq.key)
        if st is not None and st.depth is not None and st.depth < deepest \
                and st.asked_after(sq) and not sq.passages:  # a question's passages: all tried
            sq.skip = st.depth
            counts["reopened"] += 1
        elif st is not None and (st.answered or st.fingerprint == fingerprint):
            counts["closed_answered" if st.answered else "closed_tried"] += 1
            continue
        todo.append(sq)
    limit = int(cfg["max_sub_questions"])
    return sorted(todo, key=lambda sq: -len(sq.feedback_ids))[:limit], counts


def _encoder(build: Build, cfg: Mapping) -> SentenceEncoder:
    spec = json.loads((build.path / "models" / "encoder.json").read_text(encoding="utf-8"))
    try:
        return SentenceEncoder.from_spec(spec, device=str(cfg["device"]))
    except EncoderError as exc:
        raise StageError(f"{STAGE}: {exc}") from None


def bridge_ranks(config: Mapping, cfg: Mapping) -> range:
    """The ranks of a question's passages that get a bridge: past the runtime's own passage
    seeds (``query.passages``: their triples already enter the question's context), at most
    ``bridge_passages`` of them. On 50 MuSiQue questions a bridge to each of the 10 nearest
    passages took 20 % of the contexts' lines, and lost more golds than it joined
    (docs/BENCHMARKS.md "Fewer bridges")."""
    seeds = QuerySettings.of(config, StageError).passages
    return range(seeds, seeds + int(cfg["bridge_passages"]))


def enrich(config: Mapping, cfg: Mapping, build: Build, sqs: list[SubQuestion],
           dump: Path, out: Path) -> dict:
    """Enrich the open sub-questions from ``build``'s passages; persist the delta."""
    backend = cfg["backend"] or TripleExtractSettings.of(config, StageError).backend
    root, k = deltas_dir(build.root), int(cfg["k"])
    with torch_threads(cfg.get("threads")):
        pub = Published(build, _encoder(build, cfg))
        fingerprint = pub.fingerprint(cfg, backend)
        todo, closed = _open(sqs, earlier(root, build.build_id), fingerprint, cfg)
        extraction = Extraction(config, backend, dump, out)
        named = aliases([sq for sq in todo if sq.relation == ALIAS], pub, k)
        found = retrieved([sq for sq in todo if sq.relation != ALIAS], pub, extraction, k,
                          bridge_ranks(config, cfg))
        cands = with_relations([c for c in found if c.relation != BRIDGE], pub,
                               float(cfg["relation_min_cosine"]))
        cands += [c for c in found if c.relation == BRIDGE]
        delta = deduplicated(cands, pub, float(cfg["dedupe_threshold"]))
        delta.answered.update(named.answered)
        delta.aliases = named.aliases
    if todo:
        persist(root, build.build_id, delta, todo,
                {"from_build": build.build_id, "fingerprint": fingerprint, "backend": backend}, k)
    return {"backend": backend, **closed, "enriched": len(todo), "answered": len(delta.answered),
            "found_nothing": len(todo) - len(delta.answered), "candidates": len(cands),
            "delta_triples_new": len(delta.rows), "duplicates": delta.duplicates,
            "aliases_new": sum(len(e["aliases"]) for e in delta.aliases.values()),
            "failed_chunks": extraction.failed}


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    cfg = FeedbackEnrichSettings.of(config, StageError)
    store = Store(stage_input(inputs, STAGE, "store"))
    out, lap = Path(out_dir), Laps()
    log = read_log(log_dir(store.root))
    sqs = sub_questions(log.records) + alias_questions(log.records)
    report: dict = {"log_records": len(log.records), "skipped_log_lines": len(log.skipped),
                    "skipped": [f"{where}: {why}" for where, why in log.skipped[:20]],
                    "sub_questions": len(sqs)}
    build, reason = published(store)
    if build is not None and sqs:
        report.update(from_build=build.build_id,
                      **enrich(config, cfg, build, sqs, stage_input(inputs, STAGE, "dump"), out))
    else:
        report["nothing_to_enrich"] = reason or "no feedback in the log"
    lap("enrich")
    report.update(consolidated(deltas_dir(store.root), out / "feedback_delta"))
    lap("write")
    report["step_seconds"] = lap.seconds
    return {"outputs": {"feedback_delta": str(out / "feedback_delta")}, "report": report}


if __name__ == "__main__":
    from lokg.pipeline.driver import stage_main

    stage_main(STAGE)

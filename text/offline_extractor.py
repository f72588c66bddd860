"""The ``offline`` extraction backend: spaCy's small English pipeline plus dependency rules.

It needs no LLM endpoint and no network (the model is a pip-installed wheel, loaded from disk),
and it is deterministic, so a build from documents works on any machine. It was chosen over the
embedded SmolLM2-135M with a JSON grammar and over a model-free pattern extractor by agreement
with gpt-3.5's OpenIE triples on MuSiQue: docs/BENCHMARKS.md.

Entities are spaCy's named entities (typed from their NER label) and the noun phrases that the
rules use as arguments (type ``concept``). Triples are read off the dependency parse: a verb's
subject with its direct object, its prepositional objects ("born in"), its passive agent
("published by") and a copula's attribute ("is"); clauses without a subject of their own (a
participle, a relative or conjoined clause) inherit the subject they attach to, and a personal
pronoun subject stands for the chunk's first subject, its topic.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping

from lokg.common.stage import StageError
from lokg.text.extractors import ChunkExtractionError

#: Bump whenever a rule below changes what :meth:`OfflineExtractor.extract` returns.
RULES_VERSION = 1

#: spaCy NER label -> entity type; noun phrases outside any entity are ``concept``.
ENTITY_TYPES = {
    "PERSON": "person", "NORP": "group", "ORG": "organization", "GPE": "location",
    "LOC": "location", "FAC": "location", "PRODUCT": "product", "EVENT": "event",
    "WORK_OF_ART": "work", "LAW": "law", "LANGUAGE": "language", "DATE": "date", "TIME": "date",
    "PERCENT": "quantity", "MONEY": "quantity", "QUANTITY": "quantity", "ORDINAL": "quantity",
    "CARDINAL": "quantity",
}
CONCEPT = "concept"
PLACES = {"GPE", "LOC"}
PERSONAL_PRONOUNS = {"he", "she", "it", "they"}
RELATIVE_TAGS = {"WDT", "WP"}  # "which", "who", "that" as the subject of a relative clause
COPULAS = {"be", "become"}
SUBJECT_DEPS = {"nsubj", "nsubjpass"}
INHERITING_DEPS = {"conj", "xcomp", "advcl"}  # clauses that may share their head's subject
MODIFIER_DEPS = {"acl", "relcl"}  # clauses whose subject is the noun they modify
ARGUMENT_POS = {"NOUN", "PROPN", "NUM", "PRON"}
LEADING_JUNK = {"det", "case", "punct", "cc", "predet"}  # and pronouns ("its"), prepositions

_PIPELINES: dict[str, object] = {}
_PIPELINES_LOCK = threading.Lock()


def load_pipeline(model: str):
    """The spaCy pipeline installed as package ``model``, loaded once per process (~1 s)."""
    with _PIPELINES_LOCK:
        if model not in _PIPELINES:
            try:
                import spacy
                _PIPELINES[model] = spacy.load(model)
            except (ImportError, OSError) as exc:
                raise StageError(
                    f"triple_extract.offline_model: cannot load spaCy model '{model}' ({exc}); "
                    f"spaCy and the default model are an extra: pip install 'lokg[documents]' "
                    f"(or, in a checkout, bash infra/setup.sh --extras)") from None
        return _PIPELINES[model]


class OfflineExtractor:
    """Entities and triples of a chunk from spaCy's parse, without any LLM."""

    name = "offline"
    concurrency = 1  # spaCy's small model parses a chunk in milliseconds on one core

    def __init__(self, cfg: Mapping):
        self.model = cfg["offline_model"]
        self._nlp = load_pipeline(self.model)
        import spacy
        self.fingerprint = (f"offline/rules-{RULES_VERSION}/spacy-{spacy.__version__}/"
                            f"{self.model}-{self._nlp.meta.get('version', '?')}")

    def extract(self, text: str) -> dict:
        """The chunk's entities and triples (text/extractors.py has the shape)."""
        if not isinstance(text, str):
            raise ChunkExtractionError(f"chunk text must be a string, got {type(text).__name__}")
        if len(text) > self._nlp.max_length:
            raise ChunkExtractionError(f"chunk of {len(text)} characters exceeds spaCy's "
                                       f"max_length {self._nlp.max_length}")
        if not text.strip():
            return {"entities": [], "triples": []}
        return _Reader(self._nlp(text)).read()


class _Reader:
    """One parsed chunk: names its argument phrases, then reads triples off the parse."""

    def __init__(self, doc):
        self.doc = doc
        self.spans: dict[int, object] = {}  # token index -> the phrase that names it
        for chunk in doc.noun_chunks:
            self.spans.update((t.i, chunk) for t in chunk)
        for ent in doc.ents:
            self.spans.update((t.i, ent) for t in ent)
        self.entities: dict[str, dict] = {}
        self.triples: dict[tuple[str, str, str], None] = {}  # ordered set
        self.topic: str | None = None

    def read(self) -> dict:
        """Every triple of every verb and apposition, then the remaining named entities."""
        for token in self.doc:
            if token.pos_ in ("VERB", "AUX") and token.dep_ not in ("aux", "auxpass"):
                self._verb(token)
            elif token.dep_ == "appos":  # "Atlantic City, New Jersey": a place in a place
                places = {token.ent_type_, token.head.ent_type_} <= PLACES
                self._add(self.name(token.head), "located in" if places else "is",
                          self.name(token))
        for ent in self.doc.ents:
            self._entity(ent)
        return {"entities": list(self.entities.values()),
                "triples": [list(t) for t in self.triples]}

    def _verb(self, verb) -> None:
        """The verb's triples: each subject with each of its objects."""
        subjects = [s for s in map(self.name, self.subjects(verb)) if s]
        if not subjects:
            return
        if self.topic is None:
            self.topic = subjects[0]
        for relation, obj in self.objects(verb):
            for subject in subjects:
                self._add(subject, relation, self.name(obj))

    def subjects(self, verb) -> list:
        """Tokens naming who or what the verb is about, inherited where the clause has none."""
        own = [s for c in verb.children if c.dep_ in SUBJECT_DEPS for s in _with_conjuncts(c)]
        if verb.dep_ in MODIFIER_DEPS:  # "a journal (which is) published by ...": the journal
            return [s for s in own if s.tag_ not in RELATIVE_TAGS] or [
                self._copula_subject(verb.head)]
        if own:
            return own
        if verb.dep_ in INHERITING_DEPS and verb.head.pos_ in ("VERB", "AUX"):
            return self.subjects(verb.head)
        return []

    def _copula_subject(self, noun):
        """``X is a journal published by Y``: the journal published by Y is X itself."""
        head = noun.head
        if noun.dep_ == "attr" and head.lemma_ in COPULAS:
            subjects = [c for c in head.children if c.dep_ in SUBJECT_DEPS]
            if subjects:
                return subjects[0]
        return noun

    def objects(self, verb) -> Iterator[tuple[str, object]]:
        """(relation phrase, object token) pairs of the verb's complements."""
        base = _verb_phrase(verb)
        for child in verb.children:
            if child.dep_ in ("dobj", "attr", "oprd", "dative"):
                yield from ((base, o) for o in _with_conjuncts(child))
                if child.dep_ == "attr":
                    yield from _prep_objects(child, f"{base} {child.text.lower()}")
            elif child.dep_ in ("prep", "agent"):
                yield from _prep_objects(verb, base, only=child)
            elif child.dep_ == "acomp":
                yield from _prep_objects(child, f"{base} {child.text.lower()}")

    def name(self, token) -> str:
        """The phrase naming ``token`` (its entity, else its noun chunk with an "of" phrase),
        articles stripped; a personal pronoun or "the journal" stands for the topic. Also
        records the entity."""
        if token.lower_ in PERSONAL_PRONOUNS:
            return self.topic or ""
        if token.pos_ not in ARGUMENT_POS or token.pos_ == "PRON":
            return ""
        if self._means_topic(token):
            return self.topic
        span = self.spans.get(token.i, self.doc[token.i:token.i + 1])
        of = [p for p in token.children if p.dep_ == "prep" and p.lower_ == "of"]
        pobj = [c for p in of for c in p.children if c.dep_ == "pobj"]
        if token.pos_ == "NOUN" and token.ent_type_ == "" and pobj:
            end = self.spans.get(pobj[0].i, self.doc[pobj[0].i:pobj[0].i + 1]).end  # "art"
            span = self.doc[span.start:max(end, span.end)]
        return self._entity(span)

    def _means_topic(self, token) -> bool:
        """"The journal" after "X is a peer-reviewed journal": a definite common noun that
        names the topic's kind."""
        if self.topic is None or token.pos_ != "NOUN":
            return False
        kind = self.entities.get(self.topic, {}).get("description", "")
        return token.lower_ in kind.lower().split() and any(
            c.dep_ == "det" and c.lower_ in ("the", "this") for c in token.children)

    def _entity(self, span) -> str:
        """Record ``span`` as an entity and return its name ("" for an empty one)."""
        words = list(span)
        while words and (words[0].dep_ in LEADING_JUNK or words[0].pos_ in ("DET", "ADP", "PRON")):
            words = words[1:]
        name = span.doc[words[0].i:words[-1].i + 1].text.strip() if words else ""
        if name and name not in self.entities:
            kind = ENTITY_TYPES.get(getattr(span, "label_", ""), CONCEPT)
            self.entities[name] = {"name": name, "type": kind, "description": ""}
        return name

    def _add(self, subject: str, relation: str, obj: str) -> None:
        """Keep a triple whose two ends are distinct names (neither a prefix of the other); a copula's first object becomes
        the subject's description."""
        if not subject or not obj or subject.startswith(obj) or obj.startswith(subject):
            return
        self.triples[(subject, relation, obj)] = None
        entity = self.entities.get(subject)
        if entity is not None and relation in ("is", "was", "are", "were") and \
                not entity["description"]:
            entity["description"] = obj


def _with_conjuncts(token) -> list:
    """``token`` and the tokens coordinated with it ("X and Y")."""
    return [token] + [c for c in token.conjuncts if c.pos_ == token.pos_ or c.pos_ in ARGUMENT_POS]


def _verb_phrase(verb) -> str:
    """The relation words of a verb: negation, the verb as written and its particle."""
    words = [c for c in verb.children if c.dep_ == "neg" and c.i < verb.i] + [verb]
    words += [c for c in verb.children if c.dep_ == "prt"]
    if verb.dep_ == "xcomp" and verb.head.pos_ in ("VERB", "AUX"):
        words = [verb.head] + words
    return " ".join(w.text.lower() for w in sorted(words, key=lambda w: w.i))


def _prep_objects(head, base: str, only=None) -> Iterator[tuple[str, object]]:
    """(``base prep``, object) for the prepositions hanging off ``head`` ("born in" Warsaw)."""
    for prep in ([only] if only is not None else head.children):
        if prep.dep_ not in ("prep", "agent"):
            continue
        for obj in (c for c in prep.children if c.dep_ == "pobj"):
            for o in _with_conjuncts(obj):
                yield f"{base} {prep.text.lower()}", o

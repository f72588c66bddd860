"""Entity linking: which entities of the store does a question talk about (step 1).

Exact and normalised string match first. Every entity's name, aliases and source key are folded
by :func:`normalise` (casefold, underscores and punctuation → spaces, whitespace collapsed, so
``Yixin_Prince_Gong``, ``yixin prince gong`` and ``yixin-prince-gong`` are one string), and the
question's words are scanned **longest span first**: a span that matches claims its words, and
shorter spans inside it are not tried. Spans made only of stop words never link on their own
(``the``, ``is``, ``of`` …), so a KG that has an entity called "The" cannot hijack every question.
One surface form may name several entities; up to ``max_per_span`` are kept, the best connected
(highest in-degree) first.

An entity that only query-driven feedback added to the graph and whose name is a common noun
(no capital, no digit: "continent") is a **fallback** surface form: it links (method
``fallback``) only when no other span of the question does, and it claims no words. Otherwise
one extracted "Africa *is* continent" would take over every question that says "continent"
from the topic its other words name (the vector fallback's "coldest continent").

A named span also links its **qualified forms**, method ``qualified``: the entities whose
name is itself written as a name (a capital or digit first) and contains the span's words as a
run of words ("Manchuria" → "Soviet invasion of Manchuria", "Silverton" → "Silverton,
Colorado", "Maharashtra" → "Chief Minister of Maharashtra"; not the extracted phrase "seizure
of Manchuria"). A graph extracted from text splits one place or event over such names, each
holding some of its facts, and a question names only one of them. Only a span with at most
``max_qualified`` such forms links them: a specific name has few, a generic word ("State",
"River") has many and links none. They claim no words and come after the span's own links.

When nothing matches (or only fallback forms do) and the store has an encoder (the optional
extra), the FAISS/vector fallback embeds the question and takes the nearest entity if its
cosine passes ``min_cosine``.
Callers that already know their entities pass ids and skip all of this.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

_NON_WORD = re.compile(r"[^\w]+|_+")
#: Possessive clitics fold away: "Gong 's father" and "Gong's father" both give "gong father".
_POSSESSIVE = re.compile(r"(?<=\w)\s*['’]s\b", re.I)

#: The build file of the folded surface forms (entity id, form), written at publish.
LINKER_FORMS_FILE = "reports/linker_forms.parquet"

STOP_WORDS = frozenset(
    "a an the of in on at to for from by with and or is are was were be been what which who whom "
    "whose where when why how s does do did has have had that this these those it its his her "
    "their there as about into than then name names called".split()
)


def normalise(text: str) -> str:
    """Fold a surface form for matching: NFKC, casefold, possessives, punctuation, spaces."""
    text = unicodedata.normalize("NFKC", text)
    text = _POSSESSIVE.sub(" ", text)
    return " ".join(_NON_WORD.sub(" ", text.casefold()).split())


def folded(text: str | None) -> str:
    """Case folded, runs of whitespace as one space: the light fold that compares a title or a
    reached entity with a name (``normalise`` also drops punctuation and possessives)."""
    return " ".join((text or "").casefold().split())


def surface_forms(names: Sequence[str], keys: Sequence[str],
                  aliases: Sequence[Sequence[str] | None]) -> list[tuple[int, str]]:
    """(entity, form) for every name, key and alias of the entities: what the linker matches;
    a form ending in a disambiguator ("John Smith (actor)", ``john_smith_(actor)``) also
    without it, since questions name the entity, not the disambiguator."""
    return [(i, variant) for i, (name, key, more) in enumerate(zip(names, keys, aliases))
            for form in (name, key, *(more or ())) for variant in _and_bare(form)]


def _and_bare(form: str) -> list[str]:
    """A form, and the same without its trailing disambiguator when it has one."""
    bare = _DISAMBIGUATOR.sub("", form) if form else ""
    return [form, bare] if bare and bare != form else [form]


#: A trailing parenthesised qualifier of a name or key.
_DISAMBIGUATOR = re.compile(r"[\s_]*\([^()]*\)[\s_]*$")


def folded_forms(forms: Iterable[tuple[int, str]]) -> tuple[list[int], list[str]]:
    r"""The forms :func:`normalise`\ d (empty ones dropped), as entity and form columns."""
    ids, folded = [], []
    for entity_id, form in forms:
        key = normalise(form) if form else ""
        if key:
            ids.append(int(entity_id))
            folded.append(key)
    return ids, folded


@dataclass(frozen=True)
class Link:
    """One linked entity and the evidence for it."""

    id: int
    span: str  # the question words (normalised) that named it, or the question for a fallback
    method: str  # exact | normalised | vector | given | fallback | qualified
    score: float  # 1.0 for string matches, the cosine for the vector fallback

    def to_dict(self) -> dict:
        return {"id": self.id, "span": self.span, "method": self.method, "score": self.score}


#: The method of a link to a fallback entity (module docstring): taken only when nothing else links.
FALLBACK = "fallback"
#: The method of a link to a qualified form of a linked name (module docstring).
QUALIFIED = "qualified"


def common_nouns(names: Sequence[str], ids: Iterable[int]) -> frozenset[int]:
    """Those of ``ids`` whose name has no capital letter and no digit: a common noun
    ("continent"), not a name ("Antarctica", "1990")."""
    return frozenset(i for i in ids if not any(c.isupper() or c.isdigit() for c in names[i]))


class Linker:
    """Surface-form index over a store's entities; :meth:`link` maps a question to entity ids."""

    def __init__(self, surface_forms: Iterable[tuple[int, str]], degree: np.ndarray | None = None,
                 *, max_span_words: int = 12, max_per_span: int = 3, folded: bool = False,
                 fallback: Iterable[int] = (), max_qualified: int = 0,
                 names: Sequence[str] | None = None):
        r"""``folded``: the forms are already :func:`normalise`\ d (:func:`folded_forms`, which a
        build writes at publish so that opening a store does not fold every name again).
        ``fallback``: entities linked only when no other one is; ``max_qualified``: a named
        span links its qualified forms when it has at most this many (0 = never; module
        docstring), among the entities whose ``names`` start with a capital or digit (all
        when not given)."""
        index: dict[str, set[int]] = {}
        longest = 1
        for entity_id, form in surface_forms:
            if not form:
                continue
            key = form if folded else normalise(form)
            if not key:
                continue
            index.setdefault(key, set()).add(int(entity_id))
            longest = max(longest, key.count(" ") + 1)
        self.degree = degree
        self.fallback = frozenset(int(i) for i in fallback)
        self.max_per_span = max_per_span
        self.max_qualified = max_qualified
        self.names = names
        self.max_span_words = min(max_span_words, longest)
        self._index = {k: self._order(v) for k, v in index.items()}
        self._by_word: dict[str, list[str]] | None = None  # word -> forms; built on first use

    def _order(self, ids: set[int]) -> tuple[int, ...]:
        if self.degree is None:
            return tuple(sorted(ids))
        return tuple(sorted(ids, key=lambda i: (-int(self.degree[i]), i)))

    def with_forms(self, forms: Iterable[tuple[int, str]], degree: np.ndarray | None,
                   fallback: Iterable[int] = (), names: Sequence[str] | None = None) -> Linker:
        """A new index: this one's forms plus ``(entity, form)`` pairs (unfolded), ranked by
        ``degree``, with ``fallback`` entities added to this one's and ``names`` for all
        (an overlay's entities, degrees, the common nouns among them and names,
        runtime/overlay.py)."""
        pairs = [(i, key) for key, ids in self._index.items() for i in ids]
        pairs += [(i, normalise(form)) for i, form in forms]
        return Linker(pairs, degree, max_per_span=self.max_per_span, folded=True,
                      fallback=self.fallback | frozenset(fallback),
                      max_qualified=self.max_qualified,
                      names=self.names if names is None else names)

    def __len__(self) -> int:
        return len(self._index)

    def lookup(self, form: str) -> tuple[int, ...]:
        """Entities whose name, alias or key folds to the same string as ``form``."""
        return self._index.get(normalise(form), ())

    def link(self, question: str) -> list[Link]:
        """String matches, longest span first, in question order within a span length; the
        fallback entities' matches only when there is no other."""
        words = normalise(question).split()
        taken = [False] * len(words)
        found: list[tuple[int, Link]] = []
        spare: list[tuple[int, Link]] = []  # matches of fallback entities: claim no words
        raw = question.casefold()
        for length in range(min(self.max_span_words, len(words)), 0, -1):
            for start in range(len(words) - length + 1):
                span_words = words[start:start + length]
                if any(taken[start:start + length]) or all(w in STOP_WORDS for w in span_words):
                    continue
                span = " ".join(span_words)
                ids = self._index.get(span, ())
                primary = [i for i in ids if i not in self.fallback]
                method = "exact" if span in raw else "normalised"
                spare += [(start, Link(i, span, FALLBACK, 1.0)) for i in ids
                          if i in self.fallback][: self.max_per_span]
                if primary:
                    taken[start:start + length] = [True] * length
                    found += [(start, Link(i, span, method, 1.0))
                              for i in primary[: self.max_per_span]]
        links = named_first(question, _in_question_order(found or spare))
        return links + self._qualified_links(question, links) if self.max_qualified else links

    def qualified_forms(self, span: str) -> tuple[int, ...]:
        """The entities whose folded name holds the folded ``span`` as a run of words, and is
        longer; none when there are more than ``max_qualified`` (a generic word)."""
        if self._by_word is None:  # a race builds it twice, the same
            by_word: dict[str, list[str]] = {}
            for form in self._index:
                for word in set(form.split()):
                    by_word.setdefault(word, []).append(form)
            self._by_word = by_word
        words = span.split()
        if not words or any(w not in self._by_word for w in words):
            return ()
        rarest = min(words, key=lambda w: len(self._by_word[w]))
        padded = f" {span} "
        found = dict.fromkeys(i for form in self._by_word[rarest]
                              if form != span and padded in f" {form} "
                              for i in self._index[form] if self._named(i))
        return tuple(found) if len(found) <= self.max_qualified else ()

    def qualified_forms_of(self, name: str) -> tuple[int, ...]:
        """:meth:`qualified_forms` of an entity's name (a candidate answer's, a bridge such as
        "Fredericton, New Brunswick" → "…, Canada"), when it is written as a name and does not
        start with a stop word."""
        span = normalise(name)
        if not _qualifiable(span) or not _written_as_name(name):
            return ()
        return self.qualified_forms(span)

    def _named(self, entity: int) -> bool:
        """Written as a name: a capital or digit first (no names given: every entity but a
        fallback)."""
        if entity in self.fallback:
            return False
        return self.names is None or _written_as_name(self.names[entity])

    def _qualified_links(self, question: str, links: list[Link]) -> list[Link]:
        """The qualified forms of the spans the question writes as names, each entity once."""
        seen = {link.id for link in links}
        out = []
        for link in links:
            if link.method == FALLBACK or not _qualifiable(link.span) \
                    or not _written_with_capitals(question, link.span):
                continue
            for i in self.qualified_forms(link.span):
                if i not in seen:
                    seen.add(i)
                    out.append(Link(i, link.span, QUALIFIED, link.score))
        return out


def _written_as_name(text: str) -> bool:
    """A capital or digit first: how a name is written (an empty text is none)."""
    return text[:1].isupper() or text[:1].isdigit()


def _qualifiable(span: str) -> bool:
    """A folded span whose qualified forms may link: not empty, not starting with a stop word
    ("the world" of "the World Series": the name is longer than the span)."""
    return bool(span) and span.split()[0] not in STOP_WORDS


def _in_question_order(found: list[tuple[int, Link]]) -> list[Link]:
    """Each entity once (the first, i.e. longest, span that named it), by where that span
    starts in the question."""
    seen: set[int] = set()
    first = []
    for start, link in found:
        if link.id not in seen:
            seen.add(link.id)
            first.append((start, link))
    return [link for _, link in sorted(first, key=lambda item: item[0])]


def _written_with_capitals(question: str, span: str) -> bool:
    """The span, as the question writes it, has a capital letter or a digit ("Publix", "1990")."""
    match = re.search(r"\W+".join(map(re.escape, span.split())), question, re.IGNORECASE)
    return match is not None and any(c.isupper() or c.isdigit() for c in match.group(0))


def written_names(question: str) -> list[str]:
    """The spans a question writes as names: runs of capitalised words or numbers past its
    first word, and quoted phrases."""
    quoted = re.findall(r'"([^"]{2,80})"', question)
    words = re.findall(r"[\w'-]+", question)
    runs, run = [], []
    for i, word in enumerate(words + [""]):
        if i > 0 and _written_as_name(word):
            run.append(word)
            continue
        if run:
            runs.append(" ".join(run))
        run = []
    return list(dict.fromkeys(quoted + runs))


def name_mentions(question: str, limit: int = 5) -> list[str]:
    """What a question was about when nothing links: the names it writes, else its content
    words."""
    found = written_names(question)
    if not found:
        words = re.findall(r"[\w'-]+", question)
        found = [w for w in words if normalise(w) not in STOP_WORDS and len(w) > 2]
    return found[:limit]


def unlinked_names(question: str, spans: Iterable[str], limit: int = 5) -> list[str]:
    """The names the question writes that no linked span covers ("Aschenbrodel" when only
    "country" and "composer" linked, "Golden State" beside a link of "state")."""
    covered = [f" {normalise(span)} " for span in spans]
    out = []
    for name in written_names(question):
        key = normalise(name)
        if key and not all(w in STOP_WORDS for w in key.split()) \
                and not any(f" {key} " in span for span in covered):
            out.append(name)
    return out[:limit]


def named_first(question: str, links: list[Link]) -> list[Link]:
    """Where the question writes some linked span as a name (capitals, digits), drop the links
    of spans it writes in lower case: "the *country* where the Bubye River is found" names the
    river, and "country" (an entity of graphs extracted from text) is only a common noun. A
    question in lower case throughout (PathQuestion's) keeps every link."""
    named = [link for link in links if _written_with_capitals(question, link.span)]
    return named if named else links


#: Quote and apostrophe styles a user does not tell apart (typographic → typewriter).
_QUOTE_STYLES = str.maketrans({"“": '"', "”": '"', "„": '"', "‟": '"', "″": '"',
                               "‘": "'", "’": "'", "‚": "'", "‛": "'", "′": "'"})


def spelling(text: str) -> str:
    """How a user compares two spellings: NFKC, one quote style, runs of whitespace as one
    space. Unlike :func:`normalise` it keeps case and punctuation ('The "Golden" River' is
    not 'The Golden River')."""
    text = unicodedata.normalize("NFKC", text).translate(_QUOTE_STYLES)
    return " ".join(text.split())


def spelled_topics(question: str, links: list[Link],
                   forms_of: Callable[[int], Sequence[str]]) -> list[int]:
    """The entities a relation chain should be derived from: every linked entity, except that
    where several name-matched links compete for one mention and some of them — not all — are
    spelled in the question exactly as written (:func:`spelling`, case kept; else case
    folded), only those. The generator's 'The "Golden" River' and 'The Golden River' fold to
    one span; deriving from both lets the other film's answers rank first. ``forms_of``: an
    entity's name, key and aliases (a disambiguator is not written: "John Smith" spells
    "John Smith (actor)" too)."""
    by_span: dict[str, list[int]] = {}
    for link in links:
        if link.method in ("exact", "normalised"):
            by_span.setdefault(link.span, []).append(link.id)
    dropped: set[int] = set()
    for span, ids in by_span.items():
        if len(ids) > 1:
            kept = _written_verbatim(question, span, ids, forms_of)
            dropped.update(i for i in ids if i not in kept)
    return [i for i in dict.fromkeys(link.id for link in links) if i not in dropped]


def _written_verbatim(question: str, span: str, ids: list[int],
                      forms_of: Callable[[int], Sequence[str]]) -> set[int]:
    """Those of ``ids`` with a form folding to ``span`` that the question writes verbatim,
    case kept where that singles some out, else case folded; all of them when none is."""
    written = spelling(question)
    for fold in (str, str.casefold):
        text = fold(written)
        found = {i for i in ids for given in forms_of(i) for form in _and_bare(given)
                 if form and normalise(form) == span
                 and _contains_words(text, fold(spelling(form)))}
        if found:
            return found
    return set(ids)


def _contains_words(text: str, phrase: str) -> bool:
    """``phrase`` occurs in ``text`` not inside a longer word."""
    return bool(phrase) and re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text) is not None


def vector_fallback(question: str, embed: Callable[[Sequence[str]], np.ndarray],
                    search: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]],
                    *, min_cosine: float, k: int = 1) -> list[Link]:
    """Nearest entities of the embedded question whose cosine reaches ``min_cosine``."""
    query = np.asarray(embed([question]), dtype=np.float32)
    scores, rows = search(query, k)
    return [Link(int(r), question, "vector", float(s))
            for s, r in zip(scores[0], rows[0]) if r >= 0 and s >= min_cosine]

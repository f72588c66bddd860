"""How a question's words and a relation's name are read, before any encoder sees them.

Why a module of its own: relation knowledge (runtime/relknow/), its fit
(training/relation_knowledge.py), the query path and the feedback log's sub-questions read
questions and relation names the same way; this is that one reading, text in and words out (no
numpy, no encoder).

* **Masking** (:func:`mask_topic`): the topic's mention becomes :data:`PLACEHOLDER` and filler
  words go, so questions are compared by how they ask, not by whom they ask about.
* **Spans** (:func:`question_spans`, :func:`head_spans`): the word spans a matcher compares with
  relation names.
* **Hop runs** (:func:`hop_runs`): the runs of words between joins, the topic and punctuation,
  each naming one hop or one per part split at a bare "of", from the topic outward.
* **Relation names as words** (:func:`relation_texts`) whatever the naming scheme (``/a/b/c``,
  ``a.b.c``, ``__a__b__c``, camel case, plain words).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from lokg.runtime.linker import STOP_WORDS, normalise

#: Stands in for the topic mention (a plain word the sentence encoder reads naturally).
PLACEHOLDER = "someone"
#: Stop words a masked question keeps ("of" orders the hops: "the sex of the father of X").
KEPT_STOP_WORDS = frozenset({"of"})
#: Longest question span (words) the zero-shot matcher compares with relation names.
MAX_SPAN_WORDS = 4
#: Names of one segment sharing leading words with this many others lose those words.
SHARED_PREFIX_NAMES = 3
#: Words that join the hops of a chain question ("X *'s* son *'s* wife", "follow A, *then*
#: B", "the C *belonging to* the B") or close its asked head ("which C *does* … *have*"); each
#: run of content words between them names at least one hop (:func:`hop_runs`).
HOP_JOINS = frozenset("'s then belonging to is are was do does did has have had".split())
#: Words after which "of" joins two hops ("the capital *of the* country"); before any other
#: word it may join two (nationality of dad) or sit inside one (place of birth).
HOP_JOIN_AFTER_OF = frozenset({"the", "a", "an"})
#: Words that frame a question rather than name a relation ("starting from X, *follow* …:
#: what do *you reach*", "*tell me* …").
FRAME_WORDS = frozenset("starting start follow reach reached you me give tell list find "
                        "show".split())
#: Readings of a :attr:`HopRuns.range` (fewest, most), tightest first: the hops a question names
#: are its fewest (its bare "of"s sit inside phrases: "place of birth"), its most ("the
#: nationality of dad of X"), or any between.
HOP_READINGS: dict[str, Callable[[tuple[int, int]], tuple[int, int]]] = {
    "fewest": lambda r: (r[0], r[0]), "most": lambda r: (r[1], r[1]), "range": lambda r: r}
_HOP_TOKENS = re.compile(r"['\u2019]s\b|\w+|[^\w\s]")
_HOP_WORD = re.compile(r"\w")
#: Stands in for the topic among :func:`hop_tokens` (no token of a text looks like it).
PLACEHOLDER_TOKEN = "\x00topic"
_SEGMENT_SPLIT = re.compile(r"[./]+|__+")
_CAMEL_SPLIT = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def relation_segments(name: str) -> list[list[str]]:
    """A relation name as lower-case words per segment, whatever its naming scheme:
    ``/film/film/directed_by``, ``film.film.directed_by``, ``__film__film__directed_by``
    (segments), ``filmFilmDirectedBy`` or ``directed_by`` (one segment)."""
    segments = [seg for seg in _SEGMENT_SPLIT.split(name) if seg.strip("_- ")]
    out = []
    for seg in segments or [name]:
        words = _CAMEL_SPLIT.sub(" ", seg).replace("_", " ").replace("-", " ").lower().split()
        out.append(words or [seg])
    return out


def relation_text(name: str) -> str:
    """The words of a relation name: its last segment (``…/place_of_birth`` → "place of
    birth"), camel case split."""
    return " ".join(relation_segments(name)[-1])


def relation_texts(names: Sequence[str]) -> list[str]:
    """:func:`relation_text` of every relation of a store, and for names of one segment the
    leading words shared by at least :data:`SHARED_PREFIX_NAMES` names dropped (domain words
    that a scheme without separators keeps: ``filmFilmDirectedBy`` → "directed by",
    ``has_genre`` → "genre")."""
    segments = [relation_segments(n) for n in names]
    single = [seg[0] if len(seg) == 1 else None for seg in segments]
    prefixes = Counter(tuple(w[:i]) for w in single if w for i in range(1, len(w)))
    out = []
    for seg, w in zip(segments, single):
        cut = max((i for i in range(1, len(w)) if prefixes[tuple(w[:i])] >= SHARED_PREFIX_NAMES),
                  default=0) if w else 0
        out.append(" ".join(seg[-1][cut:]))
    return out


def mask_topic(question: str, forms: Iterable[str]) -> str:
    """The normalised question with every mention of a topic form replaced by the placeholder,
    and its stop words but :data:`KEPT_STOP_WORDS` dropped.

    Forms (names, keys, aliases of the topic entities) are tried longest first; a form that does
    not occur leaves the question as it is (a given entity the question never spells out).
    Filler words ("what is the name of the") differ between paraphrases of one question and
    weigh heavily in a nearly order-blind sentence embedding; "of" stays because it marks the
    order of the hops.
    """
    words = replace_forms(normalise(question).split(),
                          (tuple(normalise(f).split()) for f in forms if f), PLACEHOLDER)
    return " ".join(w for w in words if w in KEPT_STOP_WORDS or w not in STOP_WORDS)


def replace_forms(words: list[str], forms: Iterable[tuple[str, ...]], by: str) -> list[str]:
    """``words`` with every occurrence of a form (a word sequence; empty ones ignored)
    replaced by ``by``, the longest forms first."""
    for form in sorted({f for f in forms if f}, key=lambda f: (-len(f), f)):
        out, i, n = [], 0, len(form)
        while i < len(words):
            if tuple(words[i:i + n]) == form:
                out.append(by)
                i += n
            else:
                out.append(words[i])
                i += 1
        words = out
    return words


def question_words(masked: str) -> list[str]:
    """Distinct words of a masked question (the placeholder and stop words excluded), in order."""
    return list(dict.fromkeys(w for w in masked.split()
                              if w != PLACEHOLDER and w not in STOP_WORDS))


def question_spans(masked: str, max_words: int = MAX_SPAN_WORDS) -> list[tuple[int, int, str]]:
    """(start, end, text) of every span without the placeholder that is not only stop words."""
    words = masked.split()
    out = []
    for n in range(1, max_words + 1):
        for i in range(len(words) - n + 1):
            span = words[i:i + n]
            if PLACEHOLDER in span or all(w in STOP_WORDS for w in span):
                continue
            out.append((i, i + n, " ".join(span)))
    return out


def head_spans(masked: str) -> list[str]:
    """The prefixes (up to :data:`MAX_SPAN_WORDS`) of the masked question's first run of
    content words, cut at the first stop word ("of" is kept in masked text) or the topic:
    what a question asks for when it opens with it ("which *sovereign state* does …")."""
    run = []
    for word in masked.split():
        if word == PLACEHOLDER or word in STOP_WORDS:
            break
        run.append(word)
    return [" ".join(run[:n]) for n in range(1, min(len(run), MAX_SPAN_WORDS) + 1)]


def hop_tokens(text: str) -> list[str]:
    """Casefolded words, possessive "'s" and punctuation marks as tokens."""
    text = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")
    return _HOP_TOKENS.findall(text)


@dataclass(frozen=True)
class HopRuns:
    """The runs of words a question names its hops in (:func:`hop_runs`), ordered from the
    topic outward; each run is its parts split at a bare "of" ("place of birth": "place",
    "birth"), each part its content words."""

    runs: tuple[tuple[str, ...], ...]
    #: the topic was found in the question (else the walking order is a guess)
    anchored: bool = True

    @property
    def range(self) -> tuple[int, int]:
        """The fewest and most hops the wording can name: a run each, or a part each."""
        return len(self.runs), sum(map(len, self.runs))

    def hops(self, reading: str) -> list[str] | None:
        """One text per hop, from the topic outward, under a reading that fixes their number
        (fewest: a run's parts together; most: each part); None under any other."""
        if reading == "fewest":
            return [" ".join(run) for run in self.runs]
        if reading == "most":
            return [part for run in self.runs for part in run]
        return None


def hop_runs(question: str, forms: Iterable[str]) -> HopRuns:
    """The topic (any of ``forms``), punctuation and :data:`HOP_JOINS` cut the question into
    runs; those with content words (not stop or :data:`FRAME_WORDS`) name its hops. Runs after
    the topic walk outward in reading order ("X's son's wife", "from X, follow A, then B"),
    runs before it from the nearest ("the capital of the country of X"). A reading, not a
    parse: whether a store's questions keep to it is measured when its knowledge is fitted
    (``relknow.HOP_RANGE_TRUST``)."""
    tokens = replace_forms(hop_tokens(question), (tuple(hop_tokens(f)) for f in forms if f),
                           PLACEHOLDER_TOKEN)
    before: list[tuple[str, ...]] = []
    after: list[tuple[str, ...]] = []
    for run, past_topic in _runs(tokens):
        parts = tuple(" ".join(w for w in p if _content(w)) for p in _of_parts(run))
        parts = tuple(p for p in parts if p)
        if parts:
            (after if past_topic else before).append(parts)
    return HopRuns(tuple(after + before[::-1]), PLACEHOLDER_TOKEN in tokens)


def _runs(tokens: Sequence[str]) -> list[tuple[list[str], bool]]:
    """Tokens between joins, the topic and punctuation ("of" before an article or the topic
    joins too), each with whether the topic came before it."""
    runs, run, past_topic = [], [], False
    for i, word in enumerate(tokens):
        after = tokens[i + 1] if i + 1 < len(tokens) else PLACEHOLDER_TOKEN
        joins = word in HOP_JOINS or word == PLACEHOLDER_TOKEN or not _HOP_WORD.match(word) \
            or (word == "of" and (after in HOP_JOIN_AFTER_OF or after == PLACEHOLDER_TOKEN))
        if joins:
            runs.append((run, past_topic))
            run, past_topic = [], past_topic or word == PLACEHOLDER_TOKEN
        else:
            run.append(word)
    return [(r, past) for r, past in runs + [(run, past_topic)] if r]


def _of_parts(run: Sequence[str]) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    for word in run:
        if word == "of":
            parts.append([])
        else:
            parts[-1].append(word)
    return parts


def _content(word: str) -> bool:
    return word not in STOP_WORDS and word not in FRAME_WORDS

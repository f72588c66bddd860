"""Question spans matched to relations by the encoder: how well a span of words describes each
relation (its name, and the training questions' words for it), the spans a question names
relations with, and the relations its asked-for word names."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from lokg.runtime.linker import STOP_WORDS
from lokg.runtime.question_text import (KEPT_STOP_WORDS, PLACEHOLDER, head_spans,
                                        question_spans)
from lokg.runtime.relknow.derivation import reach
from lokg.runtime.relknow.facts import Facts

if TYPE_CHECKING:
    from lokg.runtime.relknow.learned import Learned

#: The sentence encoder as relation knowledge calls it: texts in, unit vectors [n, d] out.
Embed = Callable[[list[str]], np.ndarray]
#: Most hops a zero-shot chain may have (orders tried: at most 3! = 6).
MAX_ZERO_SHOT_HOPS = 3
#: Cosines this close to a span's best relation are a tie (names that embed alike).
ZERO_SHOT_TIE = 1e-5
#: Relations this close to a span's best are its substitutes when no chain of the best ones
#: instantiates: "nationality" names person_nationality before actor_nationality, and an
#: actor has only the second.
ZERO_SHOT_NEAR = 0.15
#: Substitutes tried per span, the nearest first.
ZERO_SHOT_SUBSTITUTES = 2
#: Relations this close to a span's best read it as well ("director" embeds about as near the
#: relation film as directed_by): when the chain of the best ones walks a hop backwards, one
#: of these whose chain walks fewer backwards is taken instead.
ZERO_SHOT_SWAP = 0.02
#: Relations this close to the best match of the asked-for word also name the answer's kind.
ANSWER_TYPE_MARGIN = 0.15
#: Words that make a question ask for what shares something with its topic ("films that
#: share the director of X", "who co-starred with X"): a round trip out and back.
SHARING_WORDS = frozenset({"same", "share", "shares", "shared", "sharing", "co", "also",
                           "fellow", "together"})


def span_similarities(know: Learned, texts: Sequence[str], embed: Embed
                      ) -> np.ndarray:
    """[len(texts), |relations|] (columns in relation order): how well each text describes
    each relation — the cosine to the relation's name and, with labelled knowledge, to
    the training questions' words for it (the lexicon's words whose most probable relation
    it is, ``RelationKnowledge.described_by``), whichever is higher. An unseen synonym
    ("offspring") is near a word the training questions used for the relation ("child")
    where the name alone ("children") may not be."""
    vectors = np.asarray(embed(list(texts)), dtype=np.float32)
    distinct, row_of = know.distinct_relation_vectors()
    sims = (vectors @ distinct.T)[:, row_of]
    words, columns = know.described_by()
    if words:
        by_word = vectors @ np.asarray(embed(words), dtype=np.float32).T
        sims = sims.T.copy()
        np.maximum.at(sims, columns, by_word.T)
        sims = sims.T
    return sims


def zero_shot_hops(know: Learned, masked: str, embed: Embed,
                   facts: Facts | None = None, topics: Sequence[int] = (),
                   cosine: float | None = None) -> list[tuple[float, int, int, int]]:
    """(cosine, start, end, relation) of every span whose best relation passes ``cosine``
    (θ_zs when None).

    Relations whose names embed alike tie up to float noise (two relations both called
    "capital"): among those within :data:`ZERO_SHOT_TIE` of a span's best, one with facts
    from a topic entity wins, then the first in relation order — never the noise."""
    spans = question_spans(masked)
    if not spans or not len(know.relation_vectors):
        return []
    sims = span_similarities(know, [t for _, _, t in spans], embed)
    cos = sims.max(axis=1)
    subjects = np.asarray(list(topics), dtype=np.int64)
    threshold = know.zero_shot_cosine if cosine is None else cosine
    out = []
    for (a, b, _), row, c in zip(spans, sims, cos):
        if c < threshold:
            continue
        tied = [know.relation_order[int(i)] for i in np.flatnonzero(row >= c - ZERO_SHOT_TIE)]
        if facts is not None and len(subjects) and len(tied) > 1:
            tied.sort(key=lambda r: reach(facts, subjects, r))  # stable: relation order
        out.append((float(c), a, b, tied[0]))
    return out


def span_substitutes(know: Learned, masked: str, embed: Embed,
                     hops: Sequence[tuple[float, int, int, int]],
                     near: float = ZERO_SHOT_NEAR) -> list[tuple[int, ...]]:
    """The chosen spans' relations (:func:`named_in_order`) with one swapped for one of its
    span's :data:`ZERO_SHOT_SUBSTITUTES` nearest others within ``near``
    (:data:`ZERO_SHOT_NEAR`), least cosine given up first: what ``composition.predict_spans``
    tries when the best relations make no chain (two families name one word: person_ and
    actor_nationality), and, within :data:`ZERO_SHOT_SWAP`, when their chain walks
    backwards."""
    words = masked.split()
    chosen = chosen_spans(hops, len(words))
    if not chosen:
        return []
    sims = span_similarities(know, [" ".join(words[a:b]) for _, a, b, _ in chosen], embed)
    swaps = []
    for i, (row, (c, _, _, best)) in enumerate(zip(sims, chosen)):
        near_ones = np.flatnonzero(row >= c - near)  # ascending: the stable sort's tie order
        close = [int(k) for k in near_ones[np.argsort(-row[near_ones], kind="stable")]
                 if know.relation_order[int(k)] != best]
        swaps += [(c - float(row[k]), i, know.relation_order[k])
                  for k in close[:ZERO_SHOT_SUBSTITUTES]]
    base = [h[3] for h in chosen]
    out = []
    for _, i, relation in sorted(swaps):
        swapped = base[:i] + [relation] + base[i + 1:]
        if len(set(swapped)) == len(swapped):
            out.append(tuple(swapped))
    return out


def span_readings(know: Learned, masked: str, embed: Embed,
                  hops: Sequence[tuple[float, int, int, int]], near: float = ZERO_SHOT_NEAR
                  ) -> list[dict[int, float]]:
    """Per chosen span (:func:`chosen_spans`): the relations it may name — its best and those
    within ``near`` (:data:`ZERO_SHOT_NEAR`) of it — with their cosines."""
    words = masked.split()
    chosen = chosen_spans(hops, len(words))
    if not chosen:
        return []
    sims = span_similarities(know, [" ".join(words[a:b]) for _, a, b, _ in chosen], embed)
    order = know.relation_order
    return [{order[int(k)]: float(row[k]) for k in np.flatnonzero(row >= row.max() - near)}
            for row in sims]


def span_words(hops: Sequence[tuple[float, int, int, int]], masked: str) -> int:
    """The content words of the chosen spans (:func:`chosen_spans`; "of" aside), at most
    :data:`MAX_ZERO_SHOT_HOPS`: the most hops their wording can name ("nationality of
    actors": the actors, then their nationality)."""
    words = masked.split()
    return min(MAX_ZERO_SHOT_HOPS, sum(w not in KEPT_STOP_WORDS for _, a, b, _ in
                                       chosen_spans(hops, len(words)) for w in words[a:b]))


def weakest_hop(know: Learned, masked: str, embed: Embed,
                facts: Facts, topics: Sequence[int]) -> list[tuple[float, int, int, int]]:
    """The best span's best relation, whatever its cosine: the one hop of a question no
    span names at θ_zs — a question asks for some relation ("who acted in X": "acted" may be
    under θ_zs from the relation film, whose backward hop from a film is its cast)."""
    hops = zero_shot_hops(know, masked, embed, facts, topics, cosine=-1.0)
    return sorted(hops, key=lambda h: (-h[0], h[1]))[:1]


def answer_type(know: Learned, masked: str, embed: Embed,
                margin: float = ANSWER_TYPE_MARGIN) -> frozenset[int]:
    """The relations the question's first word names when it is not the topic ("*films*
    someone direct", "*country* produced someone", "*directed* someone"): what the answer
    is the object of — its best relation and those within ``margin``
    (:data:`ANSWER_TYPE_MARGIN`) of it, if it passes θ_zs."""
    words = masked.split()
    if not words or words[0] == PLACEHOLDER or words[0] in STOP_WORDS:
        return frozenset()
    return near_best(know, span_similarities(know, [words[0]], embed)[0], margin)


def near_best(know: Learned, sims: np.ndarray, margin: float) -> frozenset[int]:
    """The relations of one span's similarity row within ``margin`` of its best, if that
    passes θ_zs (else none)."""
    best = float(sims.max()) if len(sims) else 0.0
    if best < know.zero_shot_cosine:
        return frozenset()
    return frozenset(know.relation_order[int(i)]
                     for i in np.flatnonzero(sims >= best - margin))


def head_kind(know: Learned, masked: str, embed: Embed
              ) -> frozenset[int]:
    """The relations the question's best head span (:func:`head_spans`) names: its best
    relation, if it passes θ_zs, and those within :data:`ANSWER_TYPE_MARGIN` of it."""
    spans = head_spans(masked)
    if not spans or not len(know.relation_vectors):
        return frozenset()
    sims = span_similarities(know, spans, embed)
    return near_best(know, sims[int(np.argmax(sims.max(axis=1)))], ANSWER_TYPE_MARGIN)


def described_fit(know: Learned, masked: str, embed: Embed
                  ) -> dict[int, float]:
    """Relation → how well the question's best span describes it (:func:`span_similarities`,
    at least 0)."""
    spans = [t for _, _, t in question_spans(masked)]
    if not spans or not len(know.relation_vectors):
        return {}
    best = np.maximum(span_similarities(know, spans, embed).max(axis=0), 0.0)
    return dict(zip(know.relation_order, best.tolist()))


def described_size(know: Learned, masked: str, embed: Embed,
                   facts: Facts, topics: Sequence[int]) -> int:
    """How many relations the question's spans describe: non-overlapping spans matching
    one at θ_zs (:func:`zero_shot_hops`, :func:`chosen_spans`)."""
    hops = zero_shot_hops(know, masked, embed, facts, topics)
    return len(chosen_spans(hops, len(masked.split())))


def chosen_spans(hops: Sequence[tuple[float, int, int, int]], n_words: int
                 ) -> list[tuple[float, int, int, int]]:
    """The best-scoring non-overlapping spans (at most :data:`MAX_ZERO_SHOT_HOPS`), in
    question order."""
    taken = np.zeros(n_words, dtype=bool)
    chosen = []
    for hop in sorted(hops, key=lambda h: (-h[0], h[1])):
        if not taken[hop[1]:hop[2]].any():
            taken[hop[1]:hop[2]] = True
            chosen.append(hop)
    return sorted(chosen[:MAX_ZERO_SHOT_HOPS], key=lambda h: h[1])


def shared_span(hops: Sequence[tuple[float, int, int, int]], masked: str) -> int | None:
    """What the question shares: with a sharing word (:data:`SHARING_WORDS`) the index in
    :func:`named_in_order` of the first span after it (-1 when none is); without one, the
    first of two spans naming one relation with a word between them that is no stop word
    ("the writer of the films written by X": out along written_by and back; "cause of death"
    is one relation named once) and not the topic ("the mother of X's parents" walks parents
    twice: the topic between them only says which hop comes first); else None."""
    words = masked.split()
    chosen = chosen_spans(hops, len(words))
    at = sharing_word(masked)
    if at is not None:
        return next((k for k, h in enumerate(chosen) if h[1] > at), -1)
    return next((i for i, j in itertools.combinations(range(len(chosen)), 2)
                 if chosen[i][3] == chosen[j][3]
                 and any(w not in STOP_WORDS and w != PLACEHOLDER
                         for w in words[chosen[i][2]:chosen[j][1]])), None)


def sharing_word(masked: str) -> int | None:
    """The position of the question's first sharing word (:data:`SHARING_WORDS`), if any."""
    return next((i for i, w in enumerate(masked.split()) if w in SHARING_WORDS), None)


def kind_only(hops: Sequence[tuple[float, int, int, int]], masked: str) -> bool:
    """Whether the question's one chosen span is its first word alone: it names the answer's
    kind and no relation besides ("which *country* is X from", X an actor: no span names
    actor_nationality, which a small encoder may put far from "country")."""
    return [h[1:3] for h in chosen_spans(hops, len(masked.split()))] == [(0, 1)]


def named_in_order(hops: Sequence[tuple[float, int, int, int]], n_words: int
                   ) -> tuple[int, ...]:
    """The relations of :func:`chosen_spans`."""
    return tuple(h[3] for h in chosen_spans(hops, n_words))

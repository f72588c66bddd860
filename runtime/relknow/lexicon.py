"""The lexicon: lift(w, r) = P(r on the path | w in the question) / P(r on the path) over the
training questions (words in enough of them); a question *names* r when one of its words has
lift ≥ θ_lift (picked on dev). Which relations a question's words name, and which of its
words a chain leaves unexplained."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from lokg.runtime.linker import STOP_WORDS
from lokg.runtime.question_text import PLACEHOLDER, question_spans, question_words
from lokg.runtime.relknow.facts import hop_relation
from lokg.runtime.relknow.spans import ANSWER_TYPE_MARGIN, Embed, near_best, span_similarities

if TYPE_CHECKING:
    from lokg.runtime.relknow.learned import Learned


def lexicon_hops(know: Learned, masked: str) -> list[tuple[float, int, int, int]]:
    """(P(r | w), start, end, r) of every word or name phrase (:func:`name_phrases`)
    naming a relation (lift ≥ θ_lift): the most probable relation given the word, ties by
    lift (lift alone favours rare relations). Words are assigned surest first, and a word
    whose most probable relations tie takes one no other word has taken ("son" names
    children and gender equally when every son-question asks a gender; "gender" names
    gender: son → children)."""
    words = masked.split()
    options = {}
    for i, w in enumerate(words):
        named = know.word_relations(w)
        if named and w not in STOP_WORDS:
            options[i] = named
    spans = name_phrases(know, words, options)
    taken: set[int] = set()
    out = []
    for i, j in sorted(spans, key=lambda s: (-spans[s][0][0], -spans[s][0][1], s)):
        best = spans[i, j][0][0]
        tied = [o for o in spans[i, j] if o[0] == best]
        conf, _, r = next((o for o in tied if o[2] not in taken), tied[0])
        taken.add(r)
        out.append((conf, i, j, r))
    return out


def name_phrases(know: Learned, words: Sequence[str], options: Mapping[int, list]
                 ) -> dict[tuple[int, int], list[tuple[float, float, int]]]:
    """The naming words (``options``: position → ``Learned.word_relations``) by span: a run
    of distinct ones with only stop words between, all words of the name of a relation
    each names, is one span naming those relations ("place of death", "death place":
    place_of_death once, not place_of_birth and place_of_death as two hops); others are
    one word each. A repeated word is a repeated hop ("the father of the father")."""
    spans: dict[tuple[int, int], list[tuple[float, float, int]]] = {}
    run: list[int] = []
    shared: list[tuple[float, float, int]] = []  # the run's relations, once it is a phrase
    for i in [*sorted(options), None]:
        if run and i is not None and all(w in STOP_WORDS for w in words[run[-1] + 1:i]):
            joined = phrase_relations(know, [words[k] for k in (*run, i)],
                                      [options[k] for k in (*run, i)])
            if joined:
                run, shared = [*run, i], joined
                continue
        if run:
            spans[run[0], run[-1] + 1] = shared if len(run) > 1 else options[run[0]]
        run, shared = ([] if i is None else [i]), []
    return spans


def phrase_relations(know: Learned, words: Sequence[str], named: Sequence[list]
                     ) -> list[tuple[float, float, int]]:
    """The relations every one of ``words`` (distinct) names and has in its name, each
    with its best (P(r | w), lift) over the words, most probable first ([]: none)."""
    if len(set(words)) < len(words):
        return []
    best: dict[int, tuple[float, float]] | None = None
    for word, options in zip(words, named):
        mine = {r: (p, lift) for p, lift, r in options if word in know.name_words.get(r, ())}
        best = mine if best is None else {r: max(best[r], mine[r])
                                          for r in best.keys() & mine.keys()}
    return sorted(((p, lift, r) for r, (p, lift) in best.items()),
                  key=lambda x: (-x[0], -x[1], x[2]))


def meanings(know: Learned, word: str, relation: int) -> frozenset[int]:
    """The relations that account for a naming word whose own (most probable) relation is
    ``relation``: that one, and those the word names (lift ≥ θ_lift) that have the word in
    their name ("place" and place_of_death) or whose association with it is at least half
    its own's, in pointwise mutual information (log lift): "place" may name origin about as
    strongly as place_of_birth, and "work" spouse as profession. Not a weak second meaning:
    "profession" may name spouse weakly and profession strongly, and "X's wife's profession"
    is no (spouse, spouse, spouse)."""
    lifts = know.lexicon.get(word, {})
    half = math.sqrt(lifts.get(relation, 0.0))  # log(lift) ≥ log(own) / 2
    return frozenset({relation, *(r for r, lift in lifts.items() if lift >= know.lift_threshold
                                  and (lift >= half or word in know.name_words.get(r, ())))})


def unnamed_hop(know: Learned, masked: str,
                hops: Sequence[tuple[float, int, int, int]], voted: tuple[int, ...]) -> bool:
    """Whether the voted chain walks a hop no word of the question stands for: fewer
    words name relations (``hops``, :func:`lexicon_hops`) than it has hops, and every
    content word names one — a word the lexicon does not know could be the extra hop.
    Knowledge learned from 3-hop questions asked "the gender of X's daughter" votes
    (parents, children, gender), which a graph holding X's mother walks."""
    return 1 < len(hops) < len(voted) and \
        all(know.names([w]) for w in question_words(masked))


def unexplained(know: Learned, masked: str, chain: tuple[int, ...] | None,
                embed: Embed | None) -> tuple[str, ...]:
    """The content words of a question the chain's relations do not explain: a word the
    lexicon says names relations, none of which the chain walks ("the *ethnicity* of X's
    kid's father" followed (children, nationality)) and — with an encoder — that does
    not describe a walked one alone (:func:`describes_walked`), and a word no
    span holding it describes a walked relation: one within :data:`ANSWER_TYPE_MARGIN`
    of the span's best relation, which passes θ_zs ("the *grandgender* of X's
    parents" followed (parents, parents): nothing in it reads as parents). Knowledge
    learned from 2-hop questions votes 2-hop chains for 3-hop ones unanimously, and a
    gate fitted on 2-hop dev cannot see the hop left out; this can."""
    if chain is None:
        return ()
    walked = frozenset(hop_relation(h, know.n_relations) for h in chain)
    encoded = embed is not None and know.relation_vectors.shape[1] > 0
    out = [w for w in question_words(masked) if know.names([w]) and
           not know.names([w]) & walked and
           not (encoded and describes_walked(know, w, walked, embed))]
    if encoded:
        out += [w for w in undescribed(know, masked, walked, embed) if w not in out]
    return tuple(out)


def describes_walked(know: Learned, word: str, walked: frozenset[int],
                     embed: Embed) -> bool:
    """Whether the word alone describes a walked relation (within
    :data:`ANSWER_TYPE_MARGIN` of its best, which passes θ_zs): the training questions'
    word for a sibling relation ("nationality" named actor_nationality; a person's chain
    walks person_nationality, near it), which the lexicon alone calls unexplained."""
    return bool(near_best(know, span_similarities(know, [word], embed)[0],
                          ANSWER_TYPE_MARGIN) & walked)


def undescribed(know: Learned, masked: str, walked: frozenset[int],
                embed: Embed) -> list[str]:
    """The content words no span holding them describes a walked relation (see
    :func:`unexplained`), in question order."""
    words, spans = masked.split(), question_spans(masked)
    if not spans:
        return []
    sims = span_similarities(know, [t for _, _, t in spans], embed)
    describes = [bool(near_best(know, row, ANSWER_TYPE_MARGIN) & walked) for row in sims]
    covered = np.zeros(len(words), dtype=bool)
    for (a, b, _), ok in zip(spans, describes):
        covered[a:b] |= ok
    return list(dict.fromkeys(w for i, w in enumerate(words) if not covered[i]
                              and w != PLACEHOLDER and w not in STOP_WORDS))

"""Relation knowledge: which relations a question asks for, and answers the graph already proves.

Why. TAIMR's topology score never looks at which relations a question asks for, and a question
whose relation chain is known needs no LLM at all when the graph instantiates that chain: the
walk's endpoints *are* the answer. This module is the query-time half (numpy only, so the
runtime imports it without torch); ``training/relation_knowledge.py`` fits the artefact it reads.

Artefact ``models/relknow/`` (written by the ``relation_knowledge`` stage):

* ``relknow.json`` — settings, the thresholds picked on the dev split, the chains (canonical
  relation names hop by hop), the lexicon and the relations' priors, the functional relations
  and exclusive relation pairs learned from the KG, and the fit report;
* ``vectors.npz`` — ``question_vectors`` float32 [n, d] (unit norm, topic masked) and
  ``question_chain`` int32 [n] (index into the chains) of the training questions, and
  ``relation_vectors`` float32 [|R*|, d] (each canonical relation's name as text); d = 0 when
  the stage ran without an encoder (then the lexicon predicts and zero-shot is off).

The pieces:

* **Masking** (runtime/question_text.py, which reads questions and relation names as words
  for every piece here). The topic entity's mention is replaced by a placeholder and filler
  words are dropped before a question is embedded or counted, so neighbours are found by *how*
  a question asks, not by whom it asks about ("gender of someone father" is one template across
  thousands of people).
* **Lexicon.** lift(w, r) = P(r on the path | w in the question) / P(r on the path) over the
  training questions, for words in at least ``min_support`` questions; a question *names* r when
  one of its words has lift ≥ θ_lift (picked on dev).
* **Chain predictor.** The k (10) most similar training questions (cosine of the masked
  embeddings) vote for their chain, weighted by their similarity. Each voted chain is followed
  from the topic entity; the predicted chain is the best-voted one that instantiates, its
  *share* its weight over the weight of the instantiating chains and its *support* its weight
  over all votes (PQ-2H dev: following the top chain regardless is right for 82 % of the
  questions, the top instantiating one for 95 %). When no voted chain instantiates, or there is
  no encoder, the lexicon's words give the chain: each naming word is one hop, and every order
  of those hops is tried from the topic (:meth:`RelationKnowledge.predict_spans`). Voted
  chains longer than the question (knowledge learned on 3-hop questions, asked 2-hop ones)
  are shortened: their sub-chains vote, the longest that instantiates wins, when no voted
  chain instantiates, the one that does walks nothing a naming word names, or it has more
  hops than the two or more words naming relations while every content word names one
  (:meth:`RelationKnowledge.shortened`, :meth:`RelationKnowledge.unnamed_hop`).
* **Zero-shot fallback** (a store fitted without labelled questions): question spans are
  matched to relation names by the encoder (cosine ≥ θ_zs), and the named relations are
  ordered the same way. A span's relation within :data:`ZERO_SHOT_SWAP` of its best is a
  near tie the encoder's noise decides: it is read instead when its chains walk fewer hops
  backwards (:meth:`RelationKnowledge.predict_spans`). A question no span names at θ_zs
  reads its best span's relation (:meth:`RelationKnowledge.weakest_hop`).
* **Unfamiliar wording** (labelled knowledge, the nearest training question's cosine below
  :data:`UNFAMILIAR_COSINE`: relation phrases no training question used, "the native town of
  the helmer of X"): spans are matched to relations by the encoder — to the relation's name and
  to the training questions' words for it (:meth:`RelationKnowledge.span_similarities`) — and
  the number of relations they describe picks among the voted chains one with as many hops
  that holds the vote or is held by it; when no voted chain instantiates, the votes go
  behind one hop the topic has, the one the spans describe best
  (:meth:`RelationKnowledge.bridged`). A voted chain one neighbour alone holds
  (:data:`LONE_VOTE`), or none, gives way to a chain composed hop by hop from every vote
  (:meth:`RelationKnowledge.per_hop`), and the precision gate does not pass such wording
  (:attr:`Gate.familiar`).
* **Hops the wording names** (``question_text.hop_runs``): joins ("'s", "then", "belonging
  to", "of the", the asked head's verb), punctuation and the topic cut a question into runs of
  words; each run with a content word names a hop, or one per part split at a bare "of". The
  fit measures how the store's training questions keep to that (``hop_range_agreement``: their
  fewest, their most, or any between); where a reading holds for :data:`HOP_RANGE_TRUST` of
  them, a chain of a length it rules out gives way to an allowed vote or composed chain
  (:meth:`RelationKnowledge.ranged`). Where the reading fixes the count (one hop per run, or
  per part), unfamiliar wording is decoded run by run from the topic outward, each hop the
  relation its run describes, where the graph walks (:meth:`RelationKnowledge.decoded`).
* **Inverse hops.** A chain hop walks a relation forward (subject → object) or backwards
  (object → subject, written ``~name``: "which films did X direct" is ``~directed_by``);
  chains learned from gold paths keep their directions, and the span predictors try
  backward hops when no chain with fewer of them instantiates. A sharing word ("films that
  share the director of X") makes the round trip r, ~r a candidate.
* **Relation names as words** whatever the naming scheme (``/a/b/c``, ``a.b.c``,
  ``__a__b__c``, camel case, plain words; ``question_text.relation_texts``): what the
  zero-shot matcher embeds.
* **Derivation.** The chain is followed from the topic entities over the store's triples
  (relational composition, either direction); the facts on walks that reach an endpoint form
  the compact context, the endpoints — ranked by how many walks reach them — the derived
  answer (after a round trip, without the topic itself).
* **Checks.** Derivability (≥ 1 endpoint). Consistency: a *functional* relation (≤ 1 object per
  subject on all but a ``tolerance`` share of its subjects, learned from the KG) with two values
  for one subject, or two facts joining the same two entities whose relations are *exclusive*
  (they share an entity pair on at most a ``tolerance`` share of the rarer relation's facts,
  e.g. a parents b and a children b) — on the derived context this includes every store fact
  that joins the two entities of a chain fact, i.e. a second path between them (paths of one
  hop; longer second paths are not learned).
* **Gates.** One :class:`Gate` rule — the chain instantiates with at most m answers, share ≥ τ,
  support ≥ σ, a consistent context and, optionally, every chain relation named by the
  lexicon. The precision gate is m = 1 on familiar wording whose every content word the chain
  explains (:meth:`RelationKnowledge.unexplained`); its (τ, σ) and the routing gate's
  (m, τ, σ, lexicon) are picked on dev by the fixed procedure of ``training/relation_knowledge.py``
  (without dev questions the precision gate is m = 0: it passes nothing).
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from lokg.runtime.errors import LokgError
from lokg.runtime.linker import STOP_WORDS
from lokg.runtime.question_text import (HOP_READINGS, PLACEHOLDER, HopRuns, head_spans,
                                   question_spans, question_words, relation_text)

ARTEFACT = "relknow"  # artefact name; published as models/relknow/
MODEL_FILE = "relknow.json"
VECTORS_FILE = "vectors.npz"
FORMAT_VERSION = 1
#: Most hops a zero-shot chain may have (orders tried: at most 3! = 6).
MAX_ZERO_SHOT_HOPS = 3
#: Cosines this close to a span's best relation are a tie (names that embed alike).
ZERO_SHOT_TIE = 1e-5
#: Relations this close to a span's best are its substitutes when no chain of the best ones
#: instantiates: "nationality" names person_nationality (0.89) before actor_nationality (0.74),
#: and an actor has only the second.
ZERO_SHOT_NEAR = 0.15
#: Substitutes tried per span, the nearest first.
ZERO_SHOT_SUBSTITUTES = 2
#: Relations this close to a span's best read it as well (MiniLM puts "director" 0.586 from
#: the relation film, 0.584 from directed_by): when the chain of the best ones walks a hop
#: backwards, one of these whose chain walks fewer backwards is taken instead.
ZERO_SHOT_SWAP = 0.02
#: Below this cosine of the nearest training question a labelled store's wording is unfamiliar
#: (in-domain questions sit at ~0.99, unseen wording at ~0.55): the question's spans, matched
#: to relations, say how many hops the voted chain should have and bridge the topic's hop.
UNFAMILIAR_COSINE = 0.8
#: A voted chain whose support is under this many neighbours' worth of the vote (support × k)
#: is one neighbour's guess: on unfamiliar wording its hops are composed from every vote
#: instead (:meth:`RelationKnowledge.per_hop`).
LONE_VOTE = 1.5
#: The most voted hops :meth:`RelationKnowledge.per_hop` composes chains from.
PER_HOP_HOPS = 6
#: Chains kept per hop when unfamiliar wording is decoded run by run
#: (:meth:`RelationKnowledge.decoded`).
DECODE_BEAM = 16
#: Share of a store's training questions whose chain length a reading must allow for the
#: runtime to bound chains by it (:meth:`RelationKnowledge.ranged`): a graph whose questions
#: fold hops into one word ("grandmother") or a verb ("where does X's son work") gets none.
HOP_RANGE_TRUST = 0.99
#: Relations this close to the best match of the asked-for word also name the answer's kind.
ANSWER_TYPE_MARGIN = 0.15
#: What can predict a question's chain (:attr:`Prediction.source`): the kNN vote and the rules
#: that revise it, the lexicon, the zero-shot matcher, or nothing.
PREDICTORS = ("knn", "knn_shortened", "knn_resized", "knn_bridged", "knn_per_hop", "knn_typed",
              "knn_appended", "knn_ranged", "runs_decoded", "lexicon", "zero_shot", "none")
#: Marks a chain hop walked from object to subject (``~film.film.directed_by``).
INVERSE_PREFIX = "~"
#: Words that make a question ask for what shares something with its topic ("films that
#: share the director of X", "who co-starred with X"): a round trip out and back.
SHARING_WORDS = frozenset({"same", "share", "shares", "shared", "sharing", "co", "also",
                           "fellow", "together"})

Triple = tuple[int, int, int]


class RelknowError(LokgError, ValueError):
    """A relation-knowledge artefact or argument is unusable; the message names it."""


# ============================================================================================
# the store's facts, indexed for derivation and checks


class Facts:
    """The store's triples indexed by (subject, hop, object) for both walking directions: hop
    ``r`` follows relation r forward, hop ``r + n_relations`` (:func:`inverse_hop`) walks it
    from object to subject ("which films did X direct" walks ``directed_by`` backwards). The
    objects of (s, hop) are one ``searchsorted`` range, so derivation and checks never scan
    the graph."""

    def __init__(self, s, r, o, n_relations: int):
        s, r, o = (np.asarray(x, dtype=np.int64) for x in (s, r, o))
        if not len(s) == len(r) == len(o):
            raise RelknowError("facts: columns s, r, o differ in length")
        self.n_relations = int(max(n_relations, int(r.max()) + 1 if len(r) else 1))
        self.width = 2 * self.n_relations  # hop ids: forward relations, then their inverses
        key = np.concatenate([s * self.width + r, o * self.width + r + self.n_relations])
        obj = np.concatenate([o, s])
        order = _sort_pairs(key, obj)
        self.key, self.obj = key[order], obj[order]
        self.n_facts = len(s)
        self._entities = int(obj.max()) + 1 if len(obj) else 1
        self._pairs: tuple[np.ndarray, np.ndarray] | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.n_facts

    def _range(self, subject: int, hop: int) -> tuple[int, int]:
        k = int(subject) * self.width + int(hop)
        return (int(np.searchsorted(self.key, k, "left")),
                int(np.searchsorted(self.key, k, "right")))

    def objects(self, subject: int, hop: int) -> np.ndarray:
        lo, hi = self._range(subject, hop)
        return self.obj[lo:hi]

    def step(self, subjects: np.ndarray, hop: int) -> tuple[np.ndarray, np.ndarray]:
        """For subjects (an array): (index of the subject, entity reached) of every step along
        ``hop`` (a forward fact (s, r, ·), or for an inverse hop a fact (·, r, s))."""
        k = subjects.astype(np.int64) * self.width + int(hop)
        lo, hi = np.searchsorted(self.key, k, "left"), np.searchsorted(self.key, k, "right")
        sizes = hi - lo
        parent = np.repeat(np.arange(len(subjects)), sizes)
        pos = np.repeat(lo - (np.cumsum(sizes) - sizes), sizes) + np.arange(int(sizes.sum()))
        return parent, self.obj[pos]

    def subjects(self, hop: int) -> np.ndarray:
        """The entities a hop starts from (sorted): subjects of a forward hop's relation,
        objects of an inverse hop's."""
        return np.unique(self.key[self.key % self.width == int(hop)] // self.width)

    def fact(self, start: int, hop: int, end: int) -> Triple:
        """The stored triple behind one step from ``start`` to ``end`` along ``hop``."""
        if hop >= self.n_relations:
            return (int(end), int(hop) - self.n_relations, int(start))
        return (int(start), int(hop), int(end))

    def joining(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For entity pairs (two arrays): every fact joining a pair, either direction, as
        (index of the pair, triples [m, 3]) — two ``searchsorted`` over an index of the facts
        by entity pair, so hubs cost no more than anyone (scanning a hub's facts did: 0.3 s
        for one consistency check on FB15k-237)."""
        keys, triples = self._by_pair()
        wanted = self._pair_key(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
        lo, hi = np.searchsorted(keys, wanted, "left"), np.searchsorted(keys, wanted, "right")
        sizes = hi - lo
        parent = np.repeat(np.arange(len(wanted)), sizes)
        pos = np.repeat(lo - (np.cumsum(sizes) - sizes), sizes) + np.arange(int(sizes.sum()))
        return parent, triples[pos].astype(np.int64)

    def _pair_key(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.minimum(a, b) * self._entities + np.maximum(a, b)

    def _by_pair(self) -> tuple[np.ndarray, np.ndarray]:
        """The facts sorted by entity pair (made on first use: only consistency checks ask)."""
        with self._lock:
            if self._pairs is None:
                forward = self.key % self.width < self.n_relations
                s, o = self.key[forward] // self.width, self.obj[forward]
                r = self.key[forward] % self.width
                keys = self._pair_key(s, o)
                order = np.argsort(keys, kind="stable")
                dtype = np.int32 if self._entities < 2**31 else np.int64
                self._pairs = (keys[order], np.stack([s, r, o], axis=1)[order].astype(dtype))
            return self._pairs

    def between(self, a: int, b: int) -> list[Triple]:
        """Every fact joining a and b, in either direction (:meth:`joining` of one pair)."""
        _, triples = self.joining(np.array([a]), np.array([b]))
        return [tuple(t) for t in triples.tolist()]


def _sort_pairs(key: np.ndarray, obj: np.ndarray) -> np.ndarray:
    """``np.lexsort((obj, key))`` for non-negative ids: one stable argsort of the pair packed
    into an int64 where that cannot overflow (~2.5x faster when a store opens)."""
    if not len(key):
        return np.zeros(0, dtype=np.int64)
    span = int(obj.max()) + 1
    if key.min() < 0 or obj.min() < 0 or int(key.max()) >= np.iinfo(np.int64).max // span:
        return np.lexsort((obj, key))
    return np.argsort(key * span + obj, kind="stable")


def inverse_hop(hop: int, n_relations: int) -> int:
    """The same relation walked the other way."""
    return hop + n_relations if hop < n_relations else hop - n_relations


def canonical_hops(inverse_pairs: Iterable[tuple[int, int]], n_relations: int
                   ) -> dict[int, int]:
    """Hop → the hop that states the same facts (:func:`learn_inverses`): b → ~a, ~b → a, and
    for a symmetric relation ~a → a."""
    out: dict[int, int] = {}
    for a, b in inverse_pairs:
        if a == b:
            out[inverse_hop(a, n_relations)] = a
        else:
            out[b], out[inverse_hop(b, n_relations)] = inverse_hop(a, n_relations), a
    return out


def round_trip(chain: Sequence[int], n_relations: int) -> bool:
    """Whether some hop is followed by the same relation walked back."""
    return any(b == inverse_hop(a, n_relations) for a, b in zip(chain, chain[1:]))


def hop_relation(hop: int, n_relations: int) -> int:
    """The relation a hop walks, whichever its direction."""
    return hop % n_relations


def hop_id(name: str, relation_id: Callable[[str], int], n_relations: int) -> int:
    """The hop a chain names: ``rel`` forward, ``~rel`` (:data:`INVERSE_PREFIX`) backwards."""
    relation, inverse = split_hop(name)
    return int(relation_id(relation)) + (n_relations if inverse else 0)


def split_hop(name: str) -> tuple[str, bool]:
    """(relation name, walked backwards) of a chain hop as written (``~rel`` or ``rel``)."""
    if name.startswith(INVERSE_PREFIX):
        return name[len(INVERSE_PREFIX):], True
    return name, False


def hop_name(hop: int, relation_name: Callable[[int], str], n_relations: int) -> str:
    """A hop as chains and routes write it (:func:`hop_id`'s inverse)."""
    name = relation_name(hop_relation(hop, n_relations))
    return INVERSE_PREFIX + name if hop >= n_relations else name


# ============================================================================================
# derivation


@dataclass
class Derivation:
    """A chain followed from the topic entities: endpoints (most walks first) and the facts on
    the walks that reach them (the compact context)."""

    chain: tuple[int, ...]
    topics: tuple[int, ...]
    endpoints: list[int]
    walks: list[int]
    facts: list[Triple]
    reason: str  # why there are no endpoints ("" when derivable)
    #: where a walk found no fact: the 0-based hop and the entities it had reached (the missing
    #: knowledge is (e, chain[stop_hop], ?) for each; -1 and () when it did not stop so)
    stop_hop: int = -1
    stop_from: tuple[int, ...] = ()

    @property
    def derivable(self) -> bool:
        return bool(self.endpoints)


def derive(facts: Facts, topics: Sequence[int], chain: Sequence[int], *,
           max_frontier: int = 1000) -> Derivation:
    """Follow the hops of ``chain`` (either direction, :class:`Facts`) from ``topics``; walks
    may revisit entities (a parent's children include the topic), as relational composition
    does, but after a round trip (a hop, then the same relation back) a topic is an endpoint
    only when nothing else is reached ("films that share the director of X" are the
    director's films but X)."""
    chain, topics = tuple(int(r) for r in chain), tuple(int(t) for t in topics)
    frontier = np.array(sorted(set(topics)), dtype=np.int64)
    walks = np.ones(len(frontier), dtype=np.int64)
    hops: list[tuple[np.ndarray, np.ndarray]] = []  # (start, end) of every step, per hop
    reason = "" if chain else "empty chain"
    for i, hop in enumerate(chain):
        parent, obj = facts.step(frontier, hop)
        if not len(obj):
            return Derivation(chain, topics, [], [], [], f"no fact for hop {i + 1} ({hop}) from "
                              f"{len(frontier)} entit(y/ies)", i, tuple(frontier.tolist()))
        hops.append((frontier[parent], obj))
        frontier, inverse = np.unique(obj, return_inverse=True)
        walks = np.bincount(inverse, weights=walks[parent], minlength=len(frontier)).astype(np.int64)
        if len(frontier) > max_frontier:
            reason = f"hop {i + 1} reaches {len(frontier)} entities (> {max_frontier})"
            break
    if reason:
        return Derivation(chain, topics, [], [], [], reason)
    others = ~np.isin(frontier, topics)
    if others.any() and round_trip(chain, facts.n_relations):
        frontier, walks = frontier[others], walks[others]
    alive, kept = frontier, []
    for i in reversed(range(len(hops))):
        start, end = hops[i]
        on = np.isin(end, alive)
        kept.append([facts.fact(a, chain[i], b) for a, b in zip(start[on], end[on])])
        alive = np.unique(start[on])
    ranked = sorted(zip(walks.tolist(), frontier.tolist()), key=lambda x: (-x[0], x[1]))
    out = list(dict.fromkeys(t for hop in reversed(kept) for t in hop))
    return Derivation(chain, topics, [e for _, e in ranked], [w for w, _ in ranked], out, "")


class HopDomains:
    """The entity types a hop starts from (those of a sample of its subjects), to tell a fact
    the graph lacks from an ill-typed sub-question: (Oriel College, ~instrument family, ?) is
    no gap, (fabio quist, profession, ?) is one. Computed per hop on first use."""

    SAMPLE = 256

    def __init__(self, facts: Facts, types_of: Callable[[int], Sequence[str]]):
        self.facts, self.types_of = facts, types_of
        self._domains: dict[int, frozenset[str]] = {}

    def domain(self, hop: int) -> frozenset[str]:
        got = self._domains.get(hop)
        if got is None:
            subjects = self.facts.subjects(hop)
            sample = subjects[::max(1, len(subjects) // self.SAMPLE)][:self.SAMPLE]
            got = self._domains[hop] = frozenset(t for e in sample.tolist()
                                                 for t in self.types_of(e))
        return got

    def range(self, hop: int) -> frozenset[str]:
        """The types of the entities ``hop`` reaches (its inverse hop's domain)."""
        return self.domain(inverse_hop(hop, self.facts.n_relations))

    def fits(self, entity: int, hop: int) -> bool:
        """Whether entities of ``entity``'s types start ``hop`` (yes when either is untyped)."""
        mine, domain = set(self.types_of(entity)), self.domain(hop)
        return not mine or not domain or bool(mine & domain)


# ============================================================================================
# consistency


def pair_signature(f1: Triple, f2: Triple) -> tuple[int, int, bool]:
    """(smaller relation, larger relation, same direction) of two facts on one entity pair."""
    same = f1[0] == f2[0]
    return (min(f1[1], f2[1]), max(f1[1], f2[1]), same)


@dataclass
class Consistency:
    ok: bool
    issues: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


class Checker:
    """Functional relations and exclusive relation pairs, and the check of a context."""

    def __init__(self, functional: Iterable[int], exclusive: Iterable[tuple[int, int, bool]]):
        self.functional = frozenset(int(r) for r in functional)
        self.exclusive = frozenset((int(a), int(b), bool(s)) for a, b, s in exclusive)

    def check(self, context: Sequence[Triple], facts: Facts | None = None) -> Consistency:
        """Flag a functional relation with two values for one subject (in the context, or in
        the store for a subject the context uses it on, when ``facts`` is given) and two facts
        on one entity pair with exclusive relations (with ``facts``, every store fact joining
        the two entities of a context fact counts: a second path between them)."""
        issues: list[dict] = []
        context = list(dict.fromkeys(tuple(int(x) for x in t) for t in context))
        values: dict[tuple[int, int], set[int]] = {}
        for s, r, o in context:
            if r in self.functional:
                values.setdefault((s, r), set()).add(o)
        for (s, r), objs in values.items():
            if facts is not None:
                objs = objs | set(facts.objects(s, r).tolist())
            if len(objs) > 1:
                issues.append({"kind": "functional", "subject": s, "relation": r,
                               "objects": sorted(objs)})
        pairs: dict[tuple[int, int], set[Triple]] = {}
        for t in context:
            if t[0] != t[2]:
                pairs.setdefault((min(t[0], t[2]), max(t[0], t[2])), set()).add(t)
        for group in self._with_store_facts(pairs, facts):
            for f1, f2 in itertools.combinations(sorted(group), 2):
                if pair_signature(f1, f2) in self.exclusive:
                    issues.append({"kind": "contradiction", "facts": [list(f1), list(f2)]})
        return Consistency(not issues, issues)

    @staticmethod
    def _with_store_facts(pairs: dict[tuple[int, int], set[Triple]], facts: Facts | None
                          ) -> list[set[Triple]]:
        """Each pair's context facts, with every store fact joining the pair when ``facts``
        is given (one :meth:`Facts.joining` for all the pairs)."""
        groups = list(pairs.values())
        if facts is None or not pairs:
            return groups
        parent, triples = facts.joining(*np.array(list(pairs), dtype=np.int64).T)
        for i, t in zip(parent.tolist(), triples.tolist()):
            groups[i].add(tuple(t))
        return groups


def learn_functional(s, r, o, *, tolerance: float, min_subjects: int) -> tuple[list[int], dict]:
    """Relations with ≤ 1 object per subject on all but a ``tolerance`` share of their subjects
    (at least ``min_subjects`` subjects); and per relation (subjects, subjects with several)."""
    s, r, o = (np.asarray(x, dtype=np.int64) for x in (s, r, o))
    if not len(s):
        return [], {}
    sr, counts = np.unique(np.stack([r, s], axis=1), axis=0, return_counts=True)
    rels, inverse = np.unique(sr[:, 0], return_inverse=True)
    subjects = np.bincount(inverse)
    multi = np.bincount(inverse, weights=counts > 1).astype(np.int64)
    keep = (subjects >= min_subjects) & (multi <= tolerance * subjects)
    stats = {int(x): (int(n), int(m)) for x, n, m in zip(rels, subjects, multi)}
    return sorted(int(x) for x in rels[keep]), stats


def learn_inverses(s, r, o, *, min_share: float, min_support: int) -> list[tuple[int, int]]:
    """Relation pairs (a, b) where b states a's facts the other way round ((s, a, o) and
    (o, b, s)) on at least ``min_share`` of the facts of each (both with ≥ ``min_support``
    facts); a = b is a symmetric relation. ``film.actor.film`` ≈ ``~film.film.starring``: the
    span predictors walk one of them, so a chain out along one and back along the other is
    seen as the round trip it is. a is the relation with more facts (ties: the lower id)."""
    s, r, o = (np.asarray(x, dtype=np.int64) for x in (s, r, o))
    if not len(s):
        return []
    width = int(max(s.max(), o.max())) + 1
    n_rel = int(r.max()) + 1
    fwd = s * width + o
    order = np.argsort(fwd, kind="stable")
    fwd, fwd_r = fwd[order], r[order]
    back = o * width + s
    lo, hi = np.searchsorted(fwd, back, "left"), np.searchsorted(fwd, back, "right")
    sizes = hi - lo
    back_r = np.repeat(r, sizes)
    pos = np.repeat(lo - (np.cumsum(sizes) - sizes), sizes) + np.arange(int(sizes.sum()))
    pairs, counts = np.unique(fwd_r[pos] * n_rel + back_r, return_counts=True)
    n_facts = np.bincount(r, minlength=n_rel)
    out = set()
    for pair, c in zip(pairs.tolist(), counts.tolist()):
        a, b = divmod(pair, n_rel)
        small = min(n_facts[a], n_facts[b])
        if small >= min_support and c >= min_share * max(n_facts[a], n_facts[b]):
            if (n_facts[b], -b) > (n_facts[a], -a):
                a, b = b, a
            out.add((int(a), int(b)))
    return sorted(out)


def learn_exclusive(s, r, o, *, tolerance: float, min_support: int
                    ) -> tuple[list[tuple[int, int, bool]], dict]:
    """Relation pairs that join one entity pair on at least one but at most a ``tolerance``
    share of the rarer relation's facts (which has ≥ ``min_support``): the few joint pairs are
    contradictions (pairs that never co-occur can never meet in a context of this KG)."""
    s, r, o = (np.asarray(x, dtype=np.int64) for x in (s, r, o))
    off = s != o
    s, r, o = s[off], r[off], o[off]
    if not len(s):
        return [], {"pairs_with_several_facts": 0}
    a, b = np.minimum(s, o), np.maximum(s, o)
    order = np.lexsort((s, r, b, a))
    a, b, s, r = a[order], b[order], s[order], r[order]
    n_facts = np.bincount(r)
    first = np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1])]
    several = int((np.diff(np.r_[np.flatnonzero(first), len(a)]) > 1).sum())
    joint: dict[tuple[int, int, bool], set[tuple[int, int]]] = {}
    gap = 1
    while gap < len(a):
        i = np.flatnonzero((a[gap:] == a[:-gap]) & (b[gap:] == b[:-gap]))
        if not len(i):
            break
        j = i + gap
        for x, y in zip(i.tolist(), j.tolist()):
            sig = pair_signature((int(s[x]), int(r[x]), 0), (int(s[y]), int(r[y]), 0))
            joint.setdefault(sig, set()).add((int(a[x]), int(b[x])))
        gap += 1
    out = []
    for (r1, r2, same), pairs in joint.items():
        rarer = min(int(n_facts[r1]), int(n_facts[r2]))
        if rarer >= min_support and len(pairs) <= tolerance * rarer:
            out.append((r1, r2, same))
    return sorted(out), {"pairs_with_several_facts": several, "signatures": len(joint)}


def _reach(facts: Facts, subjects: np.ndarray, relation: int) -> int:
    """0 when the subjects have forward facts of the relation, 1 backward ones only, 2 none."""
    if len(facts.step(subjects, relation)[1]):
        return 0
    return 1 if len(facts.step(subjects, inverse_hop(relation, facts.n_relations))[1]) else 2


def of_type(facts: Facts, endpoints: Sequence[int], relations: Iterable[int],
            share: float = 0.5, objects: bool = True) -> bool:
    """Whether at least ``share`` of the (first 50) endpoints are objects (or subjects) of
    one of the relations: the endpoints are of the kind the relation's name says."""
    ends = np.asarray(endpoints[:50], dtype=np.int64)
    hit = np.zeros(len(ends), dtype=bool)
    for r in relations:
        hop = inverse_hop(r, facts.n_relations) if objects else r
        hit[np.unique(facts.step(ends, hop)[0])] = True
    return bool(hit.mean() >= share) if len(ends) else False


def ending_in(chains: Sequence[tuple[int, ...]], relations: Iterable[int], n_relations: int
              ) -> list[tuple[int, ...]]:
    """The chains one hop longer along a relation of the asked kind, where they do not end in
    one ("which country produced the films starring X": X → films → their country)."""
    kinds = sorted(set(relations))
    return [c + (r,) for c in chains if len(c) < MAX_ZERO_SHOT_HOPS
            and hop_relation(c[-1], n_relations) not in kinds for r in kinds]


def walked_back(by_end: Mapping[tuple[int, ...], Sequence[tuple[int, ...]]], n_relations: int
                ) -> tuple[int, int]:
    """(longest, fewest backward hops) of the chains that instantiate (the groups of
    :meth:`RelationKnowledge._by_endpoints` but the ``()`` key); (0, 0) when none does."""
    chains = [c for key, group in by_end.items() if key for c in group]
    if not chains:
        return 0, 0
    return (max(len(c) for c in chains),
            min(sum(h >= n_relations for h in c) for c in chains))


def fewer_backward(other: Mapping[tuple[int, ...], Sequence[tuple[int, ...]]],
                   than: Mapping[tuple[int, ...], Sequence[tuple[int, ...]]],
                   n_relations: int) -> bool:
    """Whether ``other``'s instantiating chains are as long as ``than``'s and walk fewer
    hops backwards (:func:`walked_back`)."""
    long_other, back_other = walked_back(other, n_relations)
    long_than, back_than = walked_back(than, n_relations)
    return long_other >= long_than and back_other < back_than


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
    at = next((i for i, w in enumerate(words) if w in SHARING_WORDS), None)
    if at is not None:
        return next((k for k, h in enumerate(chosen) if h[1] > at), -1)
    return next((i for i, j in itertools.combinations(range(len(chosen)), 2)
                 if chosen[i][3] == chosen[j][3]
                 and any(w not in STOP_WORDS and w != PLACEHOLDER
                         for w in words[chosen[i][2]:chosen[j][1]])), None)


def kind_only(hops: Sequence[tuple[float, int, int, int]], masked: str) -> bool:
    """Whether the question's one chosen span is its first word alone: it names the answer's
    kind and no relation besides ("which *country* is X from", X an actor: no span names
    actor_nationality, which MiniLM puts under 0.42 from "country")."""
    return [h[1:3] for h in chosen_spans(hops, len(masked.split()))] == [(0, 1)]


def named_in_order(hops: Sequence[tuple[float, int, int, int]], n_words: int
                   ) -> tuple[int, ...]:
    """The relations of :func:`chosen_spans`."""
    return tuple(h[3] for h in chosen_spans(hops, n_words))


def directions(order: Sequence[int], n_relations: int) -> list[tuple[int, ...]]:
    """Every walking direction of a relation order, fewer backward hops first."""
    options = itertools.product(*[(r, inverse_hop(r, n_relations)) for r in order])
    return sorted(options, key=lambda c: sum(h >= n_relations for h in c))


def round_trips(order: Sequence[int], n_relations: int) -> list[tuple[int, ...]]:
    """Out along the relation named nearest the topic and back, then the other named relations
    (question order reversed): "which films share the director of X" is X → director → the
    director's films, "what genres do the films that share the director of X have" one hop
    more; both directions of the trip, forward out first."""
    near, rest = order[-1], tuple(reversed(order[:-1]))
    return [(h, inverse_hop(h, n_relations)) + rest
            for h in (near, inverse_hop(near, n_relations))]


# ============================================================================================
# predictions and gates


@dataclass(frozen=True)
class Vote:
    chain: tuple[int, ...]
    weight: float
    derivable: bool


@dataclass
class Prediction:
    """The chain followed for a question: the best-voted chain that instantiates from the topic
    entities, its share of the instantiating votes, and the votes it won against."""

    source: str  # one of PREDICTORS
    chain: tuple[int, ...] | None
    share: float  # weight of the chain / weight of every instantiating chain
    support: float  # weight of the chain / weight of every vote
    votes: list[Vote]
    named: frozenset[int]  # relations the lexicon says the question names
    derivation: Derivation | None = None
    reason: str = ""
    n_relations: int = 0  # hops ≥ this walk a relation backwards (0: forward hops only)
    #: when no voted chain instantiates: the walks of the best-voted chains (vote order, at
    #: most :data:`MAX_STOPS`) that stopped for want of a fact — what the graph may be missing
    #: (DESIGN §9; the runtime keeps those whose hop fits the entities' types)
    stops: tuple[Derivation, ...] = ()
    #: the kNN vote's: cosine of the nearest training question (how familiar the wording is)
    nearest: float = 0.0
    #: the kNN vote's nearest training question is under :data:`UNFAMILIAR_COSINE`
    unfamiliar: bool = False
    #: the question's content words the chain does not explain
    #: (:meth:`RelationKnowledge.unexplained`): a hop it may be missing
    unexplained: tuple[str, ...] = ()

    @property
    def relations(self) -> frozenset[int]:
        """The relations the chain walks, whichever the direction."""
        n = self.n_relations
        return frozenset(hop_relation(h, n) if n else h for h in self.chain or ())

    def share_of(self, chain: Sequence[int]) -> float:
        """A chain's share of the instantiating votes (0 for one that does not instantiate)."""
        chain = tuple(chain)
        total = sum(v.weight for v in self.votes if v.derivable)
        return next((v.weight / total for v in self.votes if v.chain == chain and v.derivable),
                    0.0) if total > 0 else 0.0


#: Stopped walks a prediction keeps (the votes the route record shows).
MAX_STOPS = 5


def held_support(votes: Sequence[Vote], chain: Sequence[int]) -> float:
    """The weight of the votes whose chain is ``chain`` or holds it with one hop left out,
    over the weight of all the votes: the neighbours' support of a chain none of them voted
    for as it is (a shortened or a composed chain). A composition's own votes count only the
    orders of its hops, so one hop named where the neighbours' chains all have three ("what
    does X's husband do": "do" is a stop word) had support 1 and passed the precision gate."""
    chain = tuple(chain)
    total = sum(v.weight for v in votes)
    held = sum(v.weight for v in votes if v.chain == chain or (
        len(v.chain) == len(chain) + 1 and chain in itertools.combinations(v.chain, len(chain))))
    return held / total if total > 0 else 0.0


def hop_weights(votes: Sequence[Vote]) -> dict[int, float]:
    """Hop → the share of the vote weight whose chains walk it (vote order kept)."""
    total = sum(v.weight for v in votes)
    out: dict[int, float] = {}
    for vote in votes if total > 0 else ():
        for hop in dict.fromkeys(vote.chain):
            out[hop] = out.get(hop, 0.0) + vote.weight / total
    return out


def composed_chains(votes: Sequence[Vote], sizes: Iterable[int]) -> dict[tuple[int, ...], float]:
    """Chains of each size drawn from the :data:`PER_HOP_HOPS` heaviest voted hops in every
    order, repeats allowed (a grandchild is children, children), each weighing the product of
    its hops' :func:`hop_weights`."""
    weights = hop_weights(votes)
    hops = sorted(weights, key=lambda h: -weights[h])[:PER_HOP_HOPS]
    return {c: float(np.prod([weights[h] for h in c]))
            for size in sizes for c in itertools.product(hops, repeat=size)}


def nested(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether one chain is the other with hops left out, the order kept."""
    short, long = sorted((tuple(a), tuple(b)), key=len)
    return short in itertools.combinations(long, len(short))


def voted_length(votes: Sequence[Vote]) -> int:
    """The number of hops most of the vote weight walks (ties: the fewer hops)."""
    by_length: dict[int, float] = {}
    for vote in votes:
        by_length[len(vote.chain)] = by_length.get(len(vote.chain), 0.0) + vote.weight
    return min(by_length, key=lambda n: (-by_length[n], n)) if by_length else 0


def stop_of(derivation: Derivation | None) -> Derivation | None:
    """The derivation when its walk stopped for want of a fact (else None)."""
    return derivation if derivation is not None and derivation.stop_hop >= 0 else None


def tally(votes: Sequence[tuple[tuple[int, ...], float]], facts: Facts, topics: Sequence[int],
          *, source: str, named: frozenset[int], max_frontier: int) -> Prediction:
    """Rank weighted chain votes, follow each from the topics, keep the best that instantiates."""
    weights: dict[tuple[int, ...], float] = {}
    for chain, w in votes:
        weights[chain] = weights.get(chain, 0.0) + max(float(w), 0.0)
    ranked, derivations = [], {}
    for chain, w in sorted(weights.items(), key=lambda cw: -cw[1]):  # stable: vote order
        d = derive(facts, topics, chain, max_frontier=max_frontier) if topics else None
        if d is not None:
            derivations[chain] = d
        ranked.append(Vote(chain, w, d is not None and d.derivable))
    total = sum(v.weight for v in ranked)
    good = [v for v in ranked if v.derivable]
    if not good or total <= 0:
        reason = "no voted chain instantiates from the topic" if ranked else "no votes"
        stops = (stop_of(derivations.get(v.chain)) for v in ranked[:MAX_STOPS])
        return Prediction(source, None, 0.0, 0.0, ranked, named, None, reason,
                          n_relations=facts.n_relations, stops=tuple(d for d in stops if d))
    top, instantiating = good[0], sum(v.weight for v in good)
    return Prediction(source, top.chain, top.weight / instantiating if instantiating > 0 else 0.0,
                      top.weight / total, ranked, named, derivations[top.chain],
                      n_relations=facts.n_relations)


@dataclass(frozen=True)
class Gate:
    """Passes when a chain instantiates with 1..``max_answers`` endpoints, its share of the
    instantiating votes ≥ ``min_share`` and of all votes ≥ ``min_support``, the derived
    context is consistent and (with ``lexicon``) the question names every chain relation."""

    max_answers: int
    min_share: float
    min_support: float = 0.0
    lexicon: bool = False
    #: only wording some training question is near (:attr:`Prediction.unfamiliar` false): the
    #: thresholds were fitted on dev questions in the training wording, and say nothing of
    #: a vote on phrases none of them used
    familiar: bool = False
    #: only chains that explain every content word of the question
    #: (:attr:`Prediction.unexplained` empty): dev questions have as many hops as their
    #: training questions, and say nothing of a question the votes follow a hop short
    explained: bool = False

    def check(self, prediction: Prediction, derivation: Derivation | None,
              consistency: Consistency | None) -> tuple[bool, str]:
        if self.max_answers < 1:
            return False, "the gate passes nothing (max_answers 0: no dev questions fitted it)"
        if prediction.chain is None or derivation is None or not derivation.derivable:
            return False, f"no chain instantiates ({prediction.reason or prediction.source})"
        if prediction.share < self.min_share:
            return False, f"vote share {prediction.share:.2f} < {self.min_share:.2f}"
        if prediction.support < self.min_support:
            return False, f"vote support {prediction.support:.2f} < {self.min_support:.2f}"
        if consistency is not None and not consistency.ok:
            return False, f"inconsistent context ({len(consistency.issues)} issue(s))"
        n = len(derivation.endpoints)
        if n > self.max_answers:
            return False, f"{n} derived answers > {self.max_answers}"
        if self.lexicon and not prediction.relations <= prediction.named:
            return False, "the question does not name every chain relation (lexicon)"
        if self.familiar and prediction.unfamiliar:
            return False, "wording no training question is near (thresholds fitted on familiar)"
        if self.explained and prediction.unexplained:
            return False, ("words no hop of the chain explains: "
                           + ", ".join(prediction.unexplained))
        return True, (f"chain derivable with {n} answer(s), vote share {prediction.share:.2f}"
                      + (", named by the lexicon" if self.lexicon else ""))

    def to_dict(self) -> dict:
        return asdict(self)


def precision_gate(thresholds: Mapping) -> Gate:
    """The precision gate of some thresholds: one answer, familiar wording, every content word
    explained by the chain (``familiar``, ``explained``; also for knowledge fitted before
    those rules)."""
    return Gate(**{"max_answers": 1, "familiar": True, "explained": True, **thresholds})


@dataclass
class Assessment:
    """Everything the relation knowledge says about one question."""

    masked: str
    prediction: Prediction
    derivation: Derivation | None
    consistency: Consistency | None
    runs: HopRuns | None = None  # the runs of words the question names its hops in


# ============================================================================================
# the fitted knowledge


class RelationKnowledge:
    """The ``models/relknow`` artefact, resolved against the store's canonical relations."""

    def __init__(self, spec: Mapping, arrays: Mapping[str, np.ndarray],
                 relation_ids: Mapping[str, int], where: str = "relknow"):
        if int(spec.get("format_version", -1)) != FORMAT_VERSION:
            raise RelknowError(f"{where}: format_version {spec.get('format_version')!r}; this "
                               f"runtime reads {FORMAT_VERSION}")

        def rel(name: str) -> int:
            if name not in relation_ids:
                raise RelknowError(f"{where}: relation {name!r} is not a relation of the store")
            return int(relation_ids[name])

        self.spec = dict(spec)
        self.n_relations = max(relation_ids.values(), default=-1) + 1
        settings = spec["settings"]
        self.k = int(settings["k"])
        self.min_share = float(settings["min_share"])
        self.max_frontier = int(settings["max_frontier"])
        thresholds = spec["thresholds"]
        self.lift_threshold = float(thresholds["lift"])
        self.zero_shot_cosine = float(thresholds["zero_shot_cosine"])
        self.precision_gate = precision_gate(thresholds["precision"])
        self.route_gate = Gate(**thresholds["route"])
        self.chains = [tuple(hop_id(n, rel, self.n_relations) for n in chain)
                       for chain in spec["chains"]]
        self.lexicon = {w: {rel(n): float(x) for n, x in entries.items()}
                        for w, entries in spec["lexicon"].items()}
        self.prior = {rel(n): float(p) for n, p in spec.get("relation_prior", {}).items()}
        self.checker = Checker([rel(n) for n in spec["functional"]],
                               [(rel(a), rel(b), bool(same)) for a, b, same in spec["exclusive"]])
        self.question_vectors = np.asarray(arrays["question_vectors"], dtype=np.float32)
        self.question_chain = np.asarray(arrays["question_chain"], dtype=np.int64)
        self.relation_vectors = np.asarray(arrays["relation_vectors"], dtype=np.float32)
        self.canonical = canonical_hops([(rel(a), rel(b)) for a, b in
                                         spec.get("inverse_pairs", ())], self.n_relations)
        self.relation_order = [rel(n) for n in spec["relation_names"]]
        #: each relation's column in relation_vectors and in span_similarities' rows
        self.relation_column = {r: i for i, r in enumerate(self.relation_order)}
        self.name_words = {rel(n): frozenset(relation_text(n).split())
                           for n in spec["relation_names"]}
        self._described: tuple[list[str], np.ndarray] | None = None  # described_by, on first use
        #: How the store's training questions name their hops: the tightest of HOP_READINGS
        #: that allows their chain lengths (None: none does, the knowledge was fitted before
        #: it was measured, or without labelled questions).
        agreement = spec.get("hop_range_agreement") or {}
        self.hop_reading = next((r for r in HOP_READINGS
                                 if agreement.get(r, 0.0) >= HOP_RANGE_TRUST), None)
        self._check_arrays(where)

    def _check_arrays(self, where: str) -> None:
        """The vectors match what they label: a question per chain label, labels within the
        chains, a vector per relation name."""
        if len(self.question_vectors) != len(self.question_chain):
            raise RelknowError(f"{where}: {len(self.question_vectors)} question vectors but "
                               f"{len(self.question_chain)} chain labels")
        if len(self.question_chain) and (self.question_chain.min() < 0
                                         or self.question_chain.max() >= len(self.chains)):
            raise RelknowError(f"{where}: question_chain indexes outside the "
                               f"{len(self.chains)} chains")
        if len(self.relation_order) != len(self.relation_vectors):
            raise RelknowError(f"{where}: {len(self.relation_vectors)} relation vectors for "
                               f"{len(self.relation_order)} relation names")

    @classmethod
    def load(cls, directory: str | Path, relation_ids: Mapping[str, int]) -> RelationKnowledge:
        directory = Path(directory)
        model, vectors = directory / MODEL_FILE, directory / VECTORS_FILE
        try:
            spec = json.loads(model.read_text(encoding="utf-8"))
            with np.load(vectors) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except (OSError, ValueError) as exc:
            raise RelknowError(f"{directory}: unreadable relation knowledge ({exc})") from None
        missing = {"question_vectors", "question_chain", "relation_vectors"} - set(arrays)
        if missing:
            raise RelknowError(f"{vectors}: arrays {sorted(missing)} missing")
        try:
            return cls(spec, arrays, relation_ids, str(model))
        except KeyError as exc:
            raise RelknowError(f"{model}: key {exc} missing") from None

    @property
    def labelled(self) -> bool:
        """Fitted from labelled questions (else only the zero-shot matcher predicts chains)."""
        return len(self.question_chain) > 0

    @property
    def votes_by_question_vector(self) -> bool:
        """Whether ``assess`` reads the masked question's vector (the kNN vote of labelled
        knowledge fitted with an encoder): the zero-shot matcher embeds spans instead."""
        return self.labelled and bool(self.question_vectors.shape[1])

    # ------------------------------------------------------------------ lexicon

    def names(self, words: Iterable[str], threshold: float | None = None) -> frozenset[int]:
        """Relations some word names with lift ≥ the threshold (θ_lift from dev by default)."""
        theta = self.lift_threshold if threshold is None else threshold
        return frozenset(r for w in words for r, lift in self.lexicon.get(w, {}).items()
                         if lift >= theta)

    # ------------------------------------------------------------------ chains

    def predict_knn(self, q_vec: np.ndarray, facts: Facts, topics: Sequence[int],
                    named: frozenset[int] = frozenset()) -> Prediction:
        """The k nearest training questions vote for their chain with their cosine."""
        sims = self.question_vectors @ np.asarray(q_vec, dtype=np.float32)
        k = min(self.k, len(sims))
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top], kind="stable")]
        votes = [(self.chains[int(self.question_chain[i])], float(sims[i])) for i in top]
        prediction = tally(votes, facts, topics, source="knn", named=named,
                           max_frontier=self.max_frontier)
        prediction.nearest = float(sims[top[0]]) if k else 0.0
        return prediction

    def _word_relations(self, word: str) -> list[tuple[float, float, int]]:
        """(P(r | word), lift, r) of the relations a word names (lift ≥ θ_lift), most probable
        first, ties by lift (lift alone favours rare relations)."""
        return sorted(((round(lift * self.prior.get(r, 0.0), 4), lift, r)  # lift, prior
                       # are stored rounded: equal probabilities must tie
                       for r, lift in self.lexicon.get(word, {}).items()
                       if lift >= self.lift_threshold), key=lambda x: (-x[0], -x[1], x[2]))

    def lexicon_hops(self, masked: str) -> list[tuple[float, int, int, int]]:
        """(P(r | w), start, end, r) of every word or name phrase (:meth:`_name_phrases`)
        naming a relation (lift ≥ θ_lift): the most probable relation given the word, ties by
        lift (lift alone favours rare relations). Words are assigned surest first, and a word
        whose most probable relations tie takes one no other word has taken ("son" names
        children and gender equally when every son-question asks a gender; "gender" names
        gender: son → children)."""
        words = masked.split()
        options = {}
        for i, w in enumerate(words):
            named = self._word_relations(w)
            if named and w not in STOP_WORDS:
                options[i] = named
        spans = self._name_phrases(words, options)
        taken: set[int] = set()
        out = []
        for i, j in sorted(spans, key=lambda s: (-spans[s][0][0], -spans[s][0][1], s)):
            best = spans[i, j][0][0]
            tied = [o for o in spans[i, j] if o[0] == best]
            conf, _, r = next((o for o in tied if o[2] not in taken), tied[0])
            taken.add(r)
            out.append((conf, i, j, r))
        return out

    def _name_phrases(self, words: Sequence[str], options: Mapping[int, list]
                      ) -> dict[tuple[int, int], list[tuple[float, float, int]]]:
        """The naming words (``options``: position → :meth:`_word_relations`) by span: a run
        of distinct ones with only stop words between, all words of the name of a relation
        each names, is one span naming those relations ("place of death", "death place":
        place_of_death once, not place_of_birth and place_of_death as two hops); others are
        one word each. A repeated word is a repeated hop ("the father of the father")."""
        spans: dict[tuple[int, int], list[tuple[float, float, int]]] = {}
        run: list[int] = []
        shared: list[tuple[float, float, int]] = []  # the run's relations, once it is a phrase
        for i in [*sorted(options), None]:
            if run and i is not None and all(w in STOP_WORDS for w in words[run[-1] + 1:i]):
                joined = self._phrase_relations([words[k] for k in (*run, i)],
                                                [options[k] for k in (*run, i)])
                if joined:
                    run, shared = [*run, i], joined
                    continue
            if run:
                spans[run[0], run[-1] + 1] = shared if len(run) > 1 else options[run[0]]
            run, shared = ([] if i is None else [i]), []
        return spans

    def _phrase_relations(self, words: Sequence[str], named: Sequence[list]
                          ) -> list[tuple[float, float, int]]:
        """The relations every one of ``words`` (distinct) names and has in its name, each
        with its best (P(r | w), lift) over the words, most probable first ([]: none)."""
        if len(set(words)) < len(words):
            return []
        best: dict[int, tuple[float, float]] | None = None
        for word, options in zip(words, named):
            mine = {r: (p, lift) for p, lift, r in options if word in self.name_words.get(r, ())}
            best = mine if best is None else {r: max(best[r], mine[r])
                                              for r in best.keys() & mine.keys()}
        return sorted(((p, lift, r) for r, (p, lift) in best.items()),
                      key=lambda x: (-x[0], -x[1], x[2]))

    def span_similarities(self, texts: Sequence[str], embed: Callable[[list[str]], np.ndarray]
                          ) -> np.ndarray:
        """[len(texts), |relations|] (columns in relation order): how well each text describes
        each relation — the cosine to the relation's name and, with labelled knowledge, to
        the training questions' words for it (the lexicon's words whose most probable relation
        it is, :meth:`described_by`), whichever is higher. An unseen synonym ("offspring") is
        near a word the training questions used for the relation ("child") where the name
        alone ("children") may not be."""
        vectors = np.asarray(embed(list(texts)), dtype=np.float32)
        sims = vectors @ self.relation_vectors.T
        words, columns = self.described_by()
        if words:
            by_word = vectors @ np.asarray(embed(words), dtype=np.float32).T
            sims = sims.T.copy()
            np.maximum.at(sims, columns, by_word.T)
            sims = sims.T
        return sims

    def described_by(self) -> tuple[list[str], np.ndarray]:
        """(words, their relation's column in relation order) of the lexicon's content words,
        each for its most probable relations (:meth:`_word_relations`, all that tie)."""
        if self._described is None:
            column = self.relation_column
            pairs = [(w, column[r]) for w in sorted(self.lexicon) if w not in STOP_WORDS
                     for p, _, r in self._word_relations(w)
                     if p == self._word_relations(w)[0][0] and r in column]
            self._described = ([w for w, _ in pairs],
                               np.array([c for _, c in pairs], dtype=np.int64))
        return self._described

    def zero_shot_hops(self, masked: str, embed: Callable[[list[str]], np.ndarray],
                       facts: Facts | None = None, topics: Sequence[int] = (),
                       cosine: float | None = None) -> list[tuple[float, int, int, int]]:
        """(cosine, start, end, relation) of every span whose best relation passes ``cosine``
        (θ_zs when None).

        Relations whose names embed alike tie up to float noise (two relations both called
        "capital"): among those within :data:`ZERO_SHOT_TIE` of a span's best, one with facts
        from a topic entity wins, then the first in relation order — never the noise."""
        spans = question_spans(masked)
        if not spans or not len(self.relation_vectors):
            return []
        sims = self.span_similarities([t for _, _, t in spans], embed)
        cos = sims.max(axis=1)
        subjects = np.asarray(list(topics), dtype=np.int64)
        threshold = self.zero_shot_cosine if cosine is None else cosine
        out = []
        for (a, b, _), row, c in zip(spans, sims, cos):
            if c < threshold:
                continue
            tied = [self.relation_order[int(i)] for i in np.flatnonzero(row >= c - ZERO_SHOT_TIE)]
            if facts is not None and len(subjects) and len(tied) > 1:
                tied.sort(key=lambda r: _reach(facts, subjects, r))  # stable: relation order
            out.append((float(c), a, b, tied[0]))
        return out

    def span_substitutes(self, masked: str, embed: Callable[[list[str]], np.ndarray],
                         hops: Sequence[tuple[float, int, int, int]],
                         near: float = ZERO_SHOT_NEAR) -> list[tuple[int, ...]]:
        """The chosen spans' relations (:func:`named_in_order`) with one swapped for one of its
        span's :data:`ZERO_SHOT_SUBSTITUTES` nearest others within ``near``
        (:data:`ZERO_SHOT_NEAR`), least cosine given up first: what :meth:`predict_spans`
        tries when the best relations make no chain (two families name one word: person_ and
        actor_nationality), and, within :data:`ZERO_SHOT_SWAP`, when their chain walks
        backwards."""
        words = masked.split()
        chosen = chosen_spans(hops, len(words))
        if not chosen:
            return []
        sims = self.span_similarities([" ".join(words[a:b]) for _, a, b, _ in chosen], embed)
        swaps = []
        for i, (row, (c, _, _, best)) in enumerate(zip(sims, chosen)):
            close = [int(k) for k in np.argsort(-row, kind="stable")
                     if row[k] >= c - near and self.relation_order[int(k)] != best]
            swaps += [(c - float(row[k]), i, self.relation_order[k])
                      for k in close[:ZERO_SHOT_SUBSTITUTES]]
        base = [h[3] for h in chosen]
        out = []
        for _, i, relation in sorted(swaps):
            swapped = base[:i] + [relation] + base[i + 1:]
            if len(set(swapped)) == len(swapped):
                out.append(tuple(swapped))
        return out

    def weakest_hop(self, masked: str, embed: Callable[[list[str]], np.ndarray],
                    facts: Facts, topics: Sequence[int]) -> list[tuple[float, int, int, int]]:
        """The best span's best relation, whatever its cosine: the one hop of a question no
        span names at θ_zs — a question asks for some relation ("who acted in X": "acted" is
        0.49 from the relation film, whose backward hop from a film is its cast)."""
        hops = self.zero_shot_hops(masked, embed, facts, topics, cosine=-1.0)
        return sorted(hops, key=lambda h: (-h[0], h[1]))[:1]

    def answer_type(self, masked: str, embed: Callable[[list[str]], np.ndarray],
                    margin: float = ANSWER_TYPE_MARGIN) -> frozenset[int]:
        """The relations the question's first word names when it is not the topic ("*films*
        someone direct", "*country* produced someone", "*directed* someone"): what the answer
        is the object of — its best relation and those within ``margin``
        (:data:`ANSWER_TYPE_MARGIN`) of it, if it passes θ_zs."""
        words = masked.split()
        if not words or words[0] == PLACEHOLDER or words[0] in STOP_WORDS:
            return frozenset()
        return self._near_best(self.span_similarities([words[0]], embed)[0], margin)

    def _near_best(self, sims: np.ndarray, margin: float) -> frozenset[int]:
        """The relations of one span's similarity row within ``margin`` of its best, if that
        passes θ_zs (else none)."""
        best = float(sims.max()) if len(sims) else 0.0
        if best < self.zero_shot_cosine:
            return frozenset()
        return frozenset(self.relation_order[int(i)]
                         for i in np.flatnonzero(sims >= best - margin))

    def head_kind(self, masked: str, embed: Callable[[list[str]], np.ndarray]
                  ) -> frozenset[int]:
        """The relations the question's best head span (:func:`head_spans`) names: its best
        relation, if it passes θ_zs, and those within :data:`ANSWER_TYPE_MARGIN` of it."""
        spans = head_spans(masked)
        if not spans or not len(self.relation_vectors):
            return frozenset()
        sims = self.span_similarities(spans, embed)
        return self._near_best(sims[int(np.argmax(sims.max(axis=1)))], ANSWER_TYPE_MARGIN)

    def predict_spans(self, hops: Sequence[tuple[float, int, int, int]], masked: str,
                      facts: Facts, topics: Sequence[int], *, source: str,
                      named: frozenset[int], answer_type: frozenset[int] = frozenset(),
                      asked_kind: frozenset[int] = frozenset(),
                      substitutes: Callable[[float], list[tuple[int, ...]]] | None = None
                      ) -> Prediction:
        """Chains from relations named by question spans (best score first, no overlap, at
        most :data:`MAX_ZERO_SHOT_HOPS`): every order and walking direction of them is a vote
        of weight 1, so the share is the fraction of instantiating chains that is the followed
        one; chains that reach the same endpoints vote together. Vote order breaks ties: the
        question-order reversal first (English puts the last hop first, "the gender of X 's
        father"). Backward hops are tried only when no chain with fewer of them instantiates
        (a graph whose questions walk forward keeps its forward chains), and — for the
        zero-shot matcher, whose spans include type nouns — fewer of the named relations only
        when no chain of them all does ("which films star X": "films" names the type of the
        answer, not a hop; a lexicon learned from labelled questions names hops). Out and
        straight back along one relation is a chain only for a question with a sharing word
        ("films that share the director of X"), which tries that round trip first (two words
        naming one relation, "cause of death", are no round trip). With ``answer_type``
        (relations the asked-for word names, :meth:`answer_type`) each chain also goes one hop
        further along one of them, and only chains whose endpoints are mostly objects of one
        of them count ("which films star X" asks for films, not co-stars), else subjects ("who
        works as a pilot"), else none: "which country produced X" is no question about X's
        studio. When nothing instantiates, the walk of the chain tried first says where it
        stopped (:attr:`Prediction.stops`), and ``substitutes`` (the spans' relations with one
        swapped for another within a cosine margin, :meth:`span_substitutes`) within
        :data:`ZERO_SHOT_NEAR` are tried in turn, the first that instantiates voting. When the
        chains that instantiate walk a hop backwards, the first substitute within
        :data:`ZERO_SHOT_SWAP` whose chains are as long and walk fewer backwards votes instead
        ("who is the director of X", a film: "director" is 0.002 nearer the relation film than
        directed_by, and ~film walks to X's actors); when they reach no entity of
        ``asked_kind`` (the relations the asked-for word names best, within
        :data:`ZERO_SHOT_SWAP`) and end in a hop no span names (added for the kind), the
        first substitute within :data:`ZERO_SHOT_NEAR` whose chains do votes with those
        ("which country produced X": X's studio's city, reached along location, is no
        country; X's country is). When still nothing instantiates and the one chosen span is
        the first word (:func:`kind_only`), the topic's hops reaching ``asked_kind`` vote."""
        in_order = named_in_order(hops, len(masked.split()))
        if not in_order:
            return Prediction(source, None, 0.0, 0.0, [], named, None, "no span names a relation")
        levels = functools.partial(self._first_level, sharing=shared_span(hops, masked),
                                   facts=facts, topics=topics, answer_type=answer_type,
                                   fewest=1 if source == "zero_shot" else len(in_order))
        by_end, first = levels(in_order)
        if substitutes is not None:
            by_end = self._substituted(by_end, levels, substitutes, asked_kind, named, facts)
        if not any(by_end) and asked_kind and kind_only(hops, masked):
            by_end = self._to_kind(facts, topics, asked_kind) or by_end
        votes = [(group[0], float(len(group))) for key, group in by_end.items() if key]
        votes += [(chain, 1.0) for chain in by_end.get((), [])]
        prediction = tally(votes, facts, topics, source=source, named=named,
                           max_frontier=self.max_frontier)
        if prediction.chain is None and not prediction.stops and first and topics:
            stopped = stop_of(derive(facts, topics, first, max_frontier=self.max_frontier))
            prediction.stops = (stopped,) if stopped else ()
        return prediction

    @staticmethod
    def _substituted(by_end: dict[tuple[int, ...], list[tuple[int, ...]]],
                     levels: Callable[[tuple[int, ...]], tuple[dict, tuple | None]],
                     substitutes: Callable[[float], list[tuple[int, ...]]],
                     asked_kind: frozenset[int], named: frozenset[int], facts: Facts
                     ) -> dict[tuple[int, ...], list[tuple[int, ...]]]:
        """The chains by endpoints :meth:`predict_spans` votes with, the spans' substitutes
        tried in its three cases: none instantiates, one walks backwards, none reaches the
        asked kind along a last hop no span named (one :func:`ending_in` added)."""
        def of_kind(groups):
            return {k: g for k, g in groups.items() if not k or of_type(facts, k, asked_kind)}

        def unnamed_last(groups):
            return all(hop_relation(c[-1], facts.n_relations) not in named
                       for k, g in groups.items() if k for c in g)

        if not any(by_end):
            return next((other for other, _ in map(levels, substitutes(ZERO_SHOT_NEAR))
                         if any(other)), by_end)
        if walked_back(by_end, facts.n_relations)[1]:
            return next((other for other, _ in map(levels, substitutes(ZERO_SHOT_SWAP))
                         if fewer_backward(other, by_end, facts.n_relations)), by_end)
        if asked_kind and not any(of_kind(by_end)) and unnamed_last(by_end):
            return next((of_kind(other) for other, _ in map(levels, substitutes(ZERO_SHOT_NEAR))
                         if any(of_kind(other))), by_end)
        return by_end

    def _first_level(self, in_order: tuple[int, ...], *, sharing: int | None, facts: Facts,
                     topics: Sequence[int], answer_type: frozenset[int], fewest: int
                     ) -> tuple[dict[tuple[int, ...], list[tuple[int, ...]]], tuple | None]:
        """(chains by endpoints, the chain tried first — where it stops is what the graph
        lacks) of the first of :meth:`_candidate_levels` where a chain instantiates, of the
        asked kind when there is one; else the first level reaching subjects of that kind,
        else the last level's."""
        by_end: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        subjects = None  # the first level reaching subjects of the asked kind's relations
        first = None
        for chains in self._candidate_levels(in_order, sharing, facts.n_relations, fewest):
            first = first or (chains[0] if chains else None)
            chains = chains + ending_in(chains, answer_type, facts.n_relations)
            by_end = self._by_endpoints(chains, facts, topics)
            if answer_type and any(by_end):
                typed = {k: g for k, g in by_end.items()
                         if not k or of_type(facts, k, answer_type)}
                if not any(subjects or {}) and not any(typed):
                    subjects = {k: g for k, g in by_end.items()
                                if not k or of_type(facts, k, answer_type, objects=False)}
                by_end = typed
            if any(by_end):
                return by_end, first
        return (subjects if subjects is not None and any(subjects) else by_end), first

    def _candidate_levels(self, in_order: tuple[int, ...], sharing: int | None,
                          n_relations: int, fewest: int):
        """The chains :meth:`predict_spans` tries, level by level (the first level where one
        instantiates votes): all the named relations before fewer of them (down to
        ``fewest``); within a number of them the round trips (with a sharing word: ``sharing``
        is the index of the relation named after it, :func:`shared_span`, or -1), those along
        that relation first ("which films share the director of X": not X's actors' films,
        though "films" names the relation ``film``), then fewer backward hops first."""
        for size in range(len(in_order), fewest - 1, -1):
            subsets = list(itertools.combinations(in_order, size))
            if sharing is not None and size < MAX_ZERO_SHOT_HOPS:
                trips = [c for sub in subsets for c in round_trips(sub, n_relations)]
                if sharing >= 0:
                    along = [c for c in trips
                             if hop_relation(c[0], n_relations) == in_order[sharing]]
                    yield along
                    trips = [c for c in trips if c not in along]
                yield trips
            orders = list(dict.fromkeys(o for sub in subsets
                                        for o in [sub[::-1], *itertools.permutations(sub)]))
            chains = self._distinct([c for o in orders for c in directions(o, n_relations)])
            for k in range(size + 1):
                yield [c for c, same in chains if sum(h >= n_relations for h in c) == k
                       and not round_trip(same, n_relations)]

    def _to_kind(self, facts: Facts, topics: Sequence[int], kind: frozenset[int]
                 ) -> dict[tuple[int, ...], list[tuple[int, ...]]]:
        """The topic's hops (forward ones first) that reach entities of the asked kind (objects
        of a ``kind`` relation), by endpoints: what a question naming only the kind asks."""
        chains = [(h,) for h in range(2 * facts.n_relations)]
        return {k: g for k, g in self._by_endpoints(chains, facts, topics).items()
                if k and of_type(facts, k, kind)}

    def _distinct(self, chains: Sequence[tuple[int, ...]]
                  ) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """(chain, the same chain in canonical hops) for the first chain of every canonical
        form: ``~parents`` and ``children`` state the same facts, so one of them is tried,
        and ``film.actor.film`` then ``starring`` is a round trip."""
        seen, out = set(), []
        for chain in chains:
            same = tuple(self.canonical.get(h, h) for h in chain)
            if same not in seen:
                seen.add(same)
                out.append((chain, same))
        return out

    def _by_endpoints(self, chains: Sequence[tuple[int, ...]], facts: Facts,
                      topics: Sequence[int]) -> dict[tuple[int, ...], list[tuple[int, ...]]]:
        """Chains grouped by the endpoints they reach (key ``()``: they do not instantiate)."""
        by_end: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for chain in chains:
            d = derive(facts, topics, chain, max_frontier=self.max_frontier) if topics else None
            key = tuple(sorted(d.endpoints)) if d is not None and d.derivable else ()
            by_end.setdefault(key, []).append(chain)
        return by_end

    # ------------------------------------------------------------------ all together

    def assess(self, masked: str, topics: Sequence[int], facts: Facts, *,
               q_vec: np.ndarray | None,
               embed: Callable[[list[str]], np.ndarray] | None = None,
               domains: HopDomains | None = None, explain: bool = True,
               runs: HopRuns | None = None) -> Assessment:
        """Predict the chain of a masked question and check its derived context.

        Labelled knowledge: the kNN vote when the question is embedded (and the knowledge was
        fitted with an encoder), and the lexicon's words when no voted chain instantiates or
        there is no encoder; ``domains`` (the entities' types per hop) lets unfamiliar wording
        check the asked type (:meth:`typed`), and ``runs`` (the question's :func:`hop_runs`)
        bounds the chain's length where the store's questions keep to it (:meth:`ranged`).
        Zero-shot knowledge: spans matched to relation
        names by the encoder (``embed``); the relations they match are the ones the question
        names. ``explain``: find the content words the chain leaves unexplained (what the
        precision gate reads, :meth:`unexplained`; the span embeddings cost a query ~15 ms on
        PQ, so the runtime asks only under the precision policy).
        """
        if facts.n_relations != self.n_relations:
            raise RelknowError(f"facts index {facts.n_relations} relations; the relation "
                               f"knowledge was resolved against {self.n_relations}")
        width = self.question_vectors.shape[1]
        if q_vec is not None and width and len(q_vec) != width:
            raise RelknowError(f"the question vector has {len(q_vec)} dimensions; the relation "
                               f"knowledge was fitted with {width} (another encoder?)")
        if self.labelled:
            prediction = self._predict_labelled(masked, topics, facts, q_vec, embed, domains,
                                                runs)
            prediction = self.ranged(prediction, runs, facts, topics) or prediction
            if explain:
                prediction.unexplained = self.unexplained(masked, prediction.chain, embed)
        elif embed is None or not self.relation_vectors.shape[1]:
            prediction = Prediction("none", None, 0.0, 0.0, [], frozenset(), None,
                                    "no labelled questions and no encoder")
        else:
            hops = self.zero_shot_hops(masked, embed, facts, topics) or \
                self.weakest_hop(masked, embed, facts, topics)
            prediction = self.predict_spans(
                hops, masked, facts, topics, source="zero_shot",
                named=frozenset(h[3] for h in hops), answer_type=self.answer_type(masked, embed),
                asked_kind=self.answer_type(masked, embed, margin=ZERO_SHOT_SWAP),
                substitutes=functools.partial(self.span_substitutes, masked, embed, hops))
        consistency = None
        if prediction.derivation is not None:
            consistency = self.checker.check(prediction.derivation.facts, facts)
        return Assessment(masked, prediction, prediction.derivation, consistency, runs)

    def _predict_labelled(self, masked: str, topics: Sequence[int], facts: Facts,
                          q_vec: np.ndarray | None,
                          embed: Callable[[list[str]], np.ndarray] | None = None,
                          domains: HopDomains | None = None,
                          runs: HopRuns | None = None) -> Prediction:
        """The chain of :meth:`_voted_chain`; on unfamiliar wording the chain decoded run by
        run where the store's reading fixes the hop count (:meth:`decoded`), else, where that
        is the kNN vote's own chain held by one neighbour (:data:`LONE_VOTE`) or no chain at
        all, the chain composed hop by hop from every vote (:meth:`per_hop`) when one
        instantiates, and then, where its answers are not of the type the question asks for,
        the best vote whose are (:meth:`typed`); each is marked :attr:`Prediction.unfamiliar`
        (the precision gate does not pass it)."""
        prediction = self._voted_chain(masked, topics, facts, q_vec, embed)
        prediction = self.appended(prediction, masked, embed, facts, topics) or prediction
        if q_vec is None or not self.unfamiliar(prediction, embed):
            return prediction
        decoded = self.decoded(prediction, runs, embed, facts, topics)
        if decoded is not None:
            decoded.unfamiliar = True
            return decoded
        if prediction.source == "knn" and prediction.support * self.k < LONE_VOTE:
            prediction = self.per_hop(prediction, masked, embed, facts, topics) or prediction
        if domains is not None:
            prediction = self.typed(prediction, masked, embed, facts, topics, domains) \
                or prediction
        prediction.unfamiliar = True
        return prediction

    def appended(self, prediction: Prediction, masked: str,
                 embed: Callable[[list[str]], np.ndarray] | None, facts: Facts,
                 topics: Sequence[int]) -> Prediction | None:
        """A chain shorter than every training question's whose question asks one hop
        further in words no training question used ("what does X's husband do for a
        *living*" followed (spouse) by knowledge of 3-hop questions): the longest span of
        words the chain leaves unexplained — none names a walked relation in the lexicon, nor
        describes one best alone — whose best relation passes θ_zs, walked forward as one
        more hop when that chain instantiates ("man or woman": gender, where "woman" alone
        is nearest spouse). None without an encoder, when no such span describes an unwalked
        relation, or when the longer chain has no facts. Support: :func:`held_support`."""
        if prediction.chain is None or embed is None or not self.relation_vectors.shape[1] \
                or len(prediction.chain) >= min(map(len, self.chains), default=0):
            return None
        walked, words, spans = prediction.relations, masked.split(), question_spans(masked)
        if not spans:
            return None
        sims = self.span_similarities([t for _, _, t in spans], embed)
        best = [self.relation_order[int(i)] for i in sims.argmax(axis=1)]
        left = {t for (a, b, t), r in zip(spans, best)  # single words: the question's words
                if b - a == 1 and r not in walked and not self.names([t]) & walked}
        fits = [(b - a, float(row.max()), r) for (a, b, _), row, r in zip(spans, sims, best)
                if all(w in left or w in STOP_WORDS for w in words[a:b])
                and row.max() >= self.zero_shot_cosine and r not in walked]
        if not fits:
            return None
        relation = max(fits)[2]
        return self._revoted(prediction, {prediction.chain + (relation,): 1.0}, facts, topics,
                             "knn_appended")

    def decoded(self, prediction: Prediction, runs: HopRuns | None,
                embed: Callable[[list[str]], np.ndarray], facts: Facts,
                topics: Sequence[int]) -> Prediction | None:
        """Unfamiliar wording on a store whose questions name one hop per run (or per part:
        :attr:`hop_reading` fewest or most): the chain that walks, from the topic outward, the
        relation each run's words describe (:meth:`span_similarities`), among the hops of the
        training chains and where the graph has facts — a beam of :data:`DECODE_BEAM` chains
        scored by their hops' summed similarity. The votes know the training wording's
        combinations; the runs say which relation each hop names in words no vote saw ("the
        native town of the helmer of X"). None when the reading fixes no count, or nothing
        instantiates, or the topic is not found in the question (the order is unknown).
        Support: :func:`held_support`."""
        texts = runs.hops(self.hop_reading) if runs is not None and self.hop_reading else None
        if not texts or not runs.anchored or not self.relation_vectors.shape[1]:
            return None
        sims = self.span_similarities(texts, embed)
        column = self.relation_column
        hops = sorted({h for chain in self.chains for h in chain})
        beam = [((), 0.0, np.unique(np.asarray(topics, dtype=np.int64)))]
        for row in sims:
            grown = []
            for chain, score, frontier in beam:
                for hop in hops:
                    reached = np.unique(facts.step(frontier, hop)[1])
                    if 0 < len(reached) <= self.max_frontier:  # else no derivation follows it
                        fit = float(row[column[hop_relation(hop, self.n_relations)]])
                        grown.append((chain + (hop,), score + fit, reached))
            beam = sorted(grown, key=lambda b: -b[1])[:DECODE_BEAM]
        for chain, _, _ in beam:
            out = self._revoted(prediction, {chain: 1.0}, facts, topics, "runs_decoded")
            if out is not None:
                return out
        return None

    def ranged(self, prediction: Prediction, runs: HopRuns | None, facts: Facts,
               topics: Sequence[int]) -> Prediction | None:
        """A chain whose length the question's wording rules out (``runs``, its
        :attr:`HopRuns.range` read as the store's training questions name their hops,
        :attr:`hop_reading`: "follow passport issuer, then ruling town, then land it lies in"
        names three where the vote followed two): the best instantiating vote
        of an allowed length, else the votes' hops composed (:func:`composed_chains`) at each
        allowed length up to the longest training chain. None when the chain fits, the store
        has no trusted reading, or nothing allowed instantiates. Support:
        :func:`held_support`."""
        if runs is None or not runs.runs or self.hop_reading is None:
            return None
        low, high = HOP_READINGS[self.hop_reading](runs.range)
        high = min(high, max(map(len, self.chains)))
        if prediction.chain is not None and low <= len(prediction.chain) <= high:
            return None
        votes = {v.chain: v.weight for v in prediction.votes if low <= len(v.chain) <= high}
        composed = composed_chains(prediction.votes, range(low, high + 1))
        for candidates in (votes, composed):
            out = self._revoted(prediction, candidates, facts, topics, "knn_ranged")
            if out is not None:
                out.unfamiliar = prediction.unfamiliar
                return out
        return None

    def typed(self, prediction: Prediction, masked: str,
              embed: Callable[[list[str]], np.ndarray], facts: Facts, topics: Sequence[int],
              domains: HopDomains) -> Prediction | None:
        """Unfamiliar wording whose head words name what it asks for (:meth:`head_kind`:
        "which *central offices* does …" names headquarters and location) while the followed
        chain's last hop reaches other types of entity (a person, not a city): the
        best-weighted instantiating vote whose last hop reaches one of the asked types (the
        types of the named relations' objects, :meth:`HopDomains.range`), else the longest
        prefix of the chain that does (a hop too many: "name the *firm they work at* of the
        person who established X" followed (founders, employer, founders)); None when the
        chain fits, the graph is untyped there, nothing fits, or the chain walks a named
        relation (the head words describe that hop, as a word naming a voted relation is
        explained by it in :meth:`_voted_chain`). Support: :func:`held_support`."""
        if prediction.chain is None:
            return None
        kind = self.head_kind(masked, embed)
        asked = frozenset().union(*(domains.range(r) for r in kind))
        reached = domains.range(prediction.chain[-1])
        if not asked or not reached or reached & asked or kind & prediction.relations:
            return None
        def reaches(chain: tuple[int, ...]) -> bool:
            return bool(domains.range(chain[-1]) & asked)

        votes = {v.chain: v.weight for v in prediction.votes if v.derivable and reaches(v.chain)}
        prefixes = {prediction.chain[:n]: float(n) for n in range(1, len(prediction.chain))
                    if reaches(prediction.chain[:n])}  # the longest first
        return self._revoted(prediction, votes, facts, topics, "knn_typed") or \
            self._revoted(prediction, prefixes, facts, topics, "knn_typed")

    def _voted_chain(self, masked: str, topics: Sequence[int], facts: Facts,
                     q_vec: np.ndarray | None,
                     embed: Callable[[list[str]], np.ndarray] | None = None) -> Prediction:
        """The kNN vote; the lexicon's chain when no voted chain instantiates, or when the
        question's words name more hops than the voted chain has and the lexicon's chain walks
        them all (questions that combine relations in a way no training question did: a
        3-hop question over 2-hop training chains). A word that a voted relation accounts for
        (:meth:`meanings`: "place" names place_of_death too) is no extra hop. Voted chains
        too long for the question are shortened (:meth:`shortened`): when none instantiates
        (the sub-chain wins over a lexicon composition with fewer hops), and when the one that
        does walks no relation some naming word names ("the job of X's wife" voted (spouse,
        spouse, spouse) by 3-hop knowledge) or a hop no word names (:meth:`unnamed_hop`). On
        unfamiliar wording (``embed`` given) the
        voted chain is resized to the number of relations the spans describe
        (:meth:`resized`), and when nothing instantiates the votes are bridged from the
        topic (:meth:`bridged`)."""
        named = self.names(question_words(masked))
        prediction = None
        if self.question_vectors.shape[1] and q_vec is not None:
            prediction = self.predict_knn(q_vec, facts, topics, named)
        hops = self.lexicon_hops(masked)
        voted = None if prediction is None else prediction.chain
        if voted is not None:  # a word a voted relation accounts for is no hop of its own
            words, walked = masked.split(), prediction.relations
            hops = [h for h in hops
                    if h[3] in walked or not self.meanings(words[h[1]], h[3]) & walked]
            if len(hops) <= len(voted):
                unexplained = any(h[3] not in walked for h in hops)
                shorter = self.shortened(prediction, masked, facts, topics) \
                    if unexplained or self.unnamed_hop(masked, hops, voted) else None
                resized = None if shorter or not self.unfamiliar(prediction, embed) else \
                    self.resized(prediction, masked, embed, facts, topics)
                return shorter or resized or prediction
        composed = self.predict_spans(hops, masked, facts, topics, source="lexicon",
                                      named=named)
        if voted is None:
            return composed if prediction is None else \
                self._unvoted(prediction, composed, masked, facts, topics, embed)
        if composed.chain is not None and len(composed.chain) > len(voted) \
                and prediction.relations <= composed.relations:
            composed.nearest = prediction.nearest
            return composed
        return prediction

    def meanings(self, word: str, relation: int) -> frozenset[int]:
        """The relations that account for a naming word whose own (most probable) relation is
        ``relation``: that one, and those the word names (lift ≥ θ_lift) that have the word in
        their name ("place" and place_of_death) or whose association with it is at least half
        its own's, in pointwise mutual information (log lift): "place" names origin (4.72) as
        place_of_birth (4.74), and "work" spouse as profession. Not a weak second meaning:
        "profession" names spouse at lift 1.27 and profession at 22.3 on PathQuestion, and
        "X's wife's profession" is no (spouse, spouse, spouse)."""
        lifts = self.lexicon.get(word, {})
        half = math.sqrt(lifts.get(relation, 0.0))  # log(lift) ≥ log(own) / 2
        return frozenset({relation, *(r for r, lift in lifts.items() if lift >= self.lift_threshold
                                      and (lift >= half or word in self.name_words.get(r, ())))})

    def unnamed_hop(self, masked: str, hops: Sequence[tuple[float, int, int, int]],
                    voted: tuple[int, ...]) -> bool:
        """Whether the voted chain walks a hop no word of the question stands for: fewer
        words name relations (``hops``, :meth:`lexicon_hops`) than it has hops, and every
        content word names one — a word the lexicon does not know could be the extra hop.
        Knowledge learned from 3-hop questions asked "the gender of X's daughter" votes
        (parents, children, gender), which a graph holding X's mother walks."""
        return 1 < len(hops) < len(voted) and \
            all(self.names([w]) for w in question_words(masked))

    def unexplained(self, masked: str, chain: tuple[int, ...] | None,
                    embed: Callable[[list[str]], np.ndarray] | None) -> tuple[str, ...]:
        """The content words of a question the chain's relations do not explain: a word the
        lexicon says names relations, none of which the chain walks ("the *ethnicity* of X's
        kid's father" followed (children, nationality)) and — with an encoder — that does
        not describe a walked one alone (:meth:`_describes_walked`), and a word no
        span holding it describes a walked relation: one within :data:`ANSWER_TYPE_MARGIN`
        of the span's best relation, which passes θ_zs ("the *grandgender* of X's
        parents" followed (parents, parents): nothing in it reads as parents). Knowledge
        learned from 2-hop questions votes 2-hop chains for 3-hop ones unanimously, and a
        gate fitted on 2-hop dev cannot see the hop left out; this can (docs/BENCHMARKS.md,
        issue 22, "the precision gate and the hop left out")."""
        if chain is None:
            return ()
        walked = frozenset(hop_relation(h, self.n_relations) for h in chain)
        encoded = embed is not None and self.relation_vectors.shape[1] > 0
        out = [w for w in question_words(masked) if self.names([w]) and
               not self.names([w]) & walked and
               not (encoded and self._describes_walked(w, walked, embed))]
        if encoded:
            out += [w for w in self._undescribed(masked, walked, embed) if w not in out]
        return tuple(out)

    def _describes_walked(self, word: str, walked: frozenset[int],
                          embed: Callable[[list[str]], np.ndarray]) -> bool:
        """Whether the word alone describes a walked relation (within
        :data:`ANSWER_TYPE_MARGIN` of its best, which passes θ_zs): the training questions'
        word for a sibling relation ("nationality" named actor_nationality, 1.0; a person's
        chain walks person_nationality, 0.89), which the lexicon alone calls unexplained."""
        return bool(self._near_best(self.span_similarities([word], embed)[0],
                                    ANSWER_TYPE_MARGIN) & walked)

    def _undescribed(self, masked: str, walked: frozenset[int],
                     embed: Callable[[list[str]], np.ndarray]) -> list[str]:
        """The content words no span holding them describes a walked relation (see
        :meth:`unexplained`), in question order."""
        words, spans = masked.split(), question_spans(masked)
        if not spans:
            return []
        sims = self.span_similarities([t for _, _, t in spans], embed)
        describes = [bool(self._near_best(row, ANSWER_TYPE_MARGIN) & walked) for row in sims]
        covered = np.zeros(len(words), dtype=bool)
        for (a, b, _), ok in zip(spans, describes):
            covered[a:b] |= ok
        return list(dict.fromkeys(w for i, w in enumerate(words) if not covered[i]
                                  and w != PLACEHOLDER and w not in STOP_WORDS))

    @staticmethod
    def unfamiliar(prediction: Prediction | None,
                   embed: Callable[[list[str]], np.ndarray] | None) -> bool:
        """Whether a kNN vote is a guess: no training question is near the wording
        (:data:`UNFAMILIAR_COSINE`), and the encoder can compare spans with relations."""
        return embed is not None and prediction is not None and \
            prediction.nearest < UNFAMILIAR_COSINE

    def described_fit(self, masked: str, embed: Callable[[list[str]], np.ndarray]
                      ) -> dict[int, float]:
        """Relation → how well the question's best span describes it (:meth:`span_similarities`,
        at least 0)."""
        spans = [t for _, _, t in question_spans(masked)]
        if not spans or not len(self.relation_vectors):
            return {}
        best = np.maximum(self.span_similarities(spans, embed).max(axis=0), 0.0)
        return dict(zip(self.relation_order, best.tolist()))

    def described_size(self, masked: str, embed: Callable[[list[str]], np.ndarray],
                       facts: Facts, topics: Sequence[int]) -> int:
        """How many relations the question's spans describe: non-overlapping spans matching
        one at θ_zs (:meth:`zero_shot_hops`, :func:`chosen_spans`)."""
        hops = self.zero_shot_hops(masked, embed, facts, topics)
        return len(chosen_spans(hops, len(masked.split())))

    def resized(self, prediction: Prediction, masked: str,
                embed: Callable[[list[str]], np.ndarray], facts: Facts,
                topics: Sequence[int]) -> Prediction | None:
        """Unfamiliar wording whose spans describe another number of relations than the
        voted chain walks (:meth:`zero_shot_hops` at θ_zs, non-overlapping): the best-voted
        instantiating chain of that many hops that holds the voted one or is held by it (a
        relation put in anywhere by the spans' best match cost more than it gained, see
        docs/BENCHMARKS.md issue 22). Support: :func:`held_support`."""
        voted = prediction.chain
        size = self.described_size(masked, embed, facts, topics)
        if size in (0, len(voted)):
            return None
        weights = {v.chain: v.weight for v in prediction.votes
                   if len(v.chain) == size and nested(v.chain, voted)}
        return self._revoted(prediction, weights, facts, topics, "knn_resized")

    def per_hop(self, prediction: Prediction, masked: str,
                embed: Callable[[list[str]], np.ndarray], facts: Facts,
                topics: Sequence[int]) -> Prediction | None:
        """Unfamiliar wording whose neighbours agree on no chain: they know the question's
        relations better than its combination of them ("which seat of government does the
        state of allegiance of X have": the best-voted (person_nationality, capital,
        city_country) is one neighbour's, two spans describe relations, and the heaviest
        2-hop chain that instantiates is (person_nationality, capital)). Each hop weighs the
        share of the vote whose chains walk it; chains of as many hops as the spans describe
        (:meth:`described_size`; else the most voted length), drawn from the
        :data:`PER_HOP_HOPS` heaviest hops in every order, repeats allowed (a grandchild is
        children, children), weigh the product of their hops'; the best that instantiates is
        followed. Support: :func:`held_support`."""
        if not prediction.votes:
            return None
        size = self.described_size(masked, embed, facts, topics) or voted_length(prediction.votes)
        chains = composed_chains(prediction.votes, [size])
        return self._revoted(prediction, chains, facts, topics, "knn_per_hop")

    def bridged(self, prediction: Prediction, masked: str,
                embed: Callable[[list[str]], np.ndarray], facts: Facts,
                topics: Sequence[int]) -> Prediction | None:
        """No voted chain instantiates, shortened or composed, on unfamiliar wording: each
        voted chain, and it without its first hop, behind one hop the topic has — the vote
        knew where the question goes but not how it leaves the topic, which unseen wording
        names ("the native town of the helmer of X", a film: the votes walk a person's place
        of birth; nothing they saw said "helmer"). A bridge weighs as its vote times how well
        the question's spans describe the bridging relation (:meth:`described_fit`); the best
        that instantiates is followed, no longer than the longest vote. Support:
        :func:`held_support`."""
        fit = self.described_fit(masked, embed)
        if not fit or not prediction.votes:
            return None
        subjects = np.asarray(sorted(set(topics)), dtype=np.int64)
        leaving = [h for h in range(facts.width) if len(facts.step(subjects, h)[1])]
        longest = max(len(v.chain) for v in prediction.votes)
        weights: dict[tuple[int, ...], float] = {}
        for vote in prediction.votes:
            for tail in dict.fromkeys((vote.chain, vote.chain[1:])):
                for hop in leaving if len(tail) < longest else ():
                    chain = (hop,) + tail
                    weights[chain] = weights.get(chain, 0.0) + vote.weight * fit.get(
                        hop_relation(hop, facts.n_relations), 0.0)
        return self._revoted(prediction, weights, facts, topics, "knn_bridged")

    def _revoted(self, prediction: Prediction, weights: Mapping[tuple[int, ...], float],
                 facts: Facts, topics: Sequence[int], source: str) -> Prediction | None:
        """The best-weighted of chains drawn from the votes that instantiates (None: none
        does), supported by the votes that hold it (:func:`held_support`)."""
        out = tally(list(weights.items()), facts, topics, source=source,
                    named=prediction.named, max_frontier=self.max_frontier)
        if out.chain is None:
            return None
        out.support, out.nearest = held_support(prediction.votes, out.chain), prediction.nearest
        return out

    def _unvoted(self, prediction: Prediction, composed: Prediction, masked: str,
                 facts: Facts, topics: Sequence[int],
                 embed: Callable[[list[str]], np.ndarray] | None) -> Prediction:
        """No voted chain instantiates: the shortened votes' chain unless the lexicon's
        composition has as many hops (then it, supported by the votes that hold it); when
        neither instantiates, on unfamiliar wording the bridged votes (:meth:`bridged`), else
        the failed vote. Whichever answers keeps the failed vote's stops: where the voted
        chains found no fact is what the graph may lack (the feedback log's chain stop),
        also when a shorter chain answers — "the nation of the capital of X" with X's
        capital's country missing is answered by the capital, and the gap is still logged."""
        shorter = self.shortened(prediction, masked, facts, topics)
        if shorter is not None and (composed.chain is None
                                    or len(shorter.chain) > len(composed.chain)):
            chosen = shorter
        elif composed.chain is None:
            bridged = self.bridged(prediction, masked, embed, facts, topics) \
                if self.unfamiliar(prediction, embed) else None
            chosen = bridged or prediction
        else:
            composed.support = held_support(prediction.votes, composed.chain)
            composed.nearest, chosen = prediction.nearest, composed
        chosen.stops = prediction.stops
        return chosen

    def shortened(self, prediction: Prediction, masked: str, facts: Facts,
                  topics: Sequence[int]) -> Prediction | None:
        """The voted chains with hops left out (see :meth:`_predict_labelled` for when): each
        sub-chain (hop order kept) that walks one of the :meth:`meanings` of every naming word
        (:meth:`lexicon_hops`) votes with the weight of every voted chain it is drawn from, and
        the longest that instantiates is followed, best-voted first; its support is
        :func:`held_support` (0 with two hops left out). Knowledge learned from 3-hop questions
        asked "the religion of X's mother" votes (children, parents, religion), (parents,
        children, religion), … — none of which the graph walks from X — and every one of them
        holds (parents, religion)."""
        words = masked.split()
        needed = [self.meanings(words[i], r) for _, i, _, r in self.lexicon_hops(masked)]
        longest = max((len(v.chain) for v in prediction.votes), default=0)
        for size in range(longest - 1, 0, -1):
            weights: dict[tuple[int, ...], float] = {}
            for vote in prediction.votes:
                for sub in dict.fromkeys(itertools.combinations(vote.chain, size)):
                    walked = {hop_relation(h, self.n_relations) for h in sub}
                    if len(vote.chain) > size and all(n & walked for n in needed):
                        weights[sub] = weights.get(sub, 0.0) + vote.weight
            shorter = self._revoted(prediction, weights, facts, topics, "knn_shortened")
            if shorter is not None:
                return shorter
        return None

    def relation_term(self, prediction: Prediction, relations: Sequence[int],
                      inverses: Sequence[bool]) -> float:
        """TAIMR's query-relation term of one path: the share of its hops (relations walked in
        the path's directions) among the instantiating votes, plus the share of its hops the
        question names. With no instantiating chain (no vote ranks the paths) the term adds
        instead the share of the named relations the path walks and takes off the share of
        its hops the question does not name — so a path that walks every named relation
        outranks the 1-hop neighbour that walks one of them ("the actors of the films
        directed by X": not the films). With a voted chain the votes rank, and unnamed hops
        cost nothing: a lexicon names relations of words that are no hop ("place" names
        place_of_death too); the penalty there cost PQ-3H's policy lokg 7 points."""
        if not len(relations):
            return 0.0
        hops = [inverse_hop(r, self.n_relations) if inv else r
                for r, inv in zip(relations, inverses)]
        named = prediction.named
        walked = sum(1 for r in relations if r in named) / len(hops)
        if prediction.chain is not None or not named:
            return prediction.share_of(hops) + walked
        covered = len(named.intersection(relations)) / len(named)
        return prediction.share_of(hops) + covered - (1.0 - walked)

"""The store's facts as relation knowledge walks them. A chain hop walks a relation forward
(subject → object) or backwards (object → subject, written ``~name``: "which films did X
direct" is ``~directed_by``); hops are numbered r (forward) and r + |R| (backwards). The
triples are indexed by (subject, hop) for derivation and checks, and the KG's inverse relation
pairs are learned here."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from lokg.runtime.errors import LokgError

#: Marks a chain hop walked from object to subject (``~film.film.directed_by``).
INVERSE_PREFIX = "~"

Triple = tuple[int, int, int]


class RelknowError(LokgError, ValueError):
    """A relation-knowledge artefact or argument is unusable; the message names it."""


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

    def _hops_of(self, entities: np.ndarray) -> list[np.ndarray]:
        """Per entity (distinct, in order), the hops of the facts walking from it, one key
        range each."""
        starts = np.asarray(entities, dtype=np.int64) * self.width
        lo = np.searchsorted(self.key, starts, "left")
        hi = np.searchsorted(self.key, starts + self.width, "left")
        return [self.key[a:b] % self.width for a, b in zip(lo, hi)]

    def hops_from(self, entities: Sequence[int]) -> list[int]:
        """The hops (sorted) some fact walks from one of ``entities``: what a walk from them can
        take, found by one range per entity instead of a try of every hop."""
        hops = self._hops_of(np.asarray(sorted(set(int(e) for e in entities)), dtype=np.int64))
        return np.unique(np.concatenate(hops)).tolist() if hops else []

    def hop_shares(self, entities: np.ndarray) -> dict[int, float]:
        """For each hop some fact walks from one of ``entities`` (distinct): the share of them
        it walks from — every hop's ``step`` at once, by one range per entity."""
        hops = self._hops_of(entities)
        if not hops:
            return {}
        counts = np.unique(np.concatenate([np.unique(h) for h in hops]), return_counts=True)
        return {int(h): int(c) / len(hops) for h, c in zip(*counts)}

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
        by entity pair, so hubs cost no more than anyone."""
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
    into an int64 where that cannot overflow (faster, for stores to open quickly)."""
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

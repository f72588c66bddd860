"""The entities chains reach from a question's topics (:class:`Reach`), and how well a chain
reads a question without labelled questions (:class:`Reading`): the spans it accounts for
(each by a hop of its own, or as the kind of the entities the chain reaches), whether it
reaches the kind the asked-for word names, and the hops no span accounts for. The zero-shot
composition (:mod:`.composition`) keeps the chains that read their question best."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lokg.runtime.relknow.derivation import OF_TYPE_SHARE
from lokg.runtime.relknow.facts import Facts, hop_relation, inverse_hop, round_trip

#: Chains by the endpoints they reach (``()``: chains that do not instantiate).
ByEnd = dict[tuple[int, ...], list[tuple[int, ...]]]
#: A chain's reading, best first (:meth:`Reading.key`).
Key = tuple[bool, float, int]


class Reach:
    """The entities chains reach from one question's topics — the endpoints ``derive`` gives
    them, without the walks and facts only the voted chain needs — each chain prefix walked
    once: the orders, directions and substitutes one question tries share most of theirs."""

    def __init__(self, facts: Facts, topics: Sequence[int], max_frontier: int):
        self.facts, self.max_frontier = facts, max_frontier
        self.topics = np.array(sorted({int(t) for t in topics}), dtype=np.int64)
        self._frontiers: dict[tuple[int, ...], np.ndarray | None] = {(): self.topics}
        self._kinds: dict[tuple[int, ...], dict[int, float]] = {}
        self._ends: dict[tuple[int, ...], tuple[int, ...]] = {}

    def frontier(self, chain: tuple[int, ...]) -> np.ndarray | None:
        """The entities a chain's walks reach (sorted); None where a hop finds no fact or
        reaches more than ``max_frontier``."""
        if chain not in self._frontiers:
            start, out = self.frontier(chain[:-1]), None
            if start is not None:
                _, reached = self.facts.step(start, chain[-1])
                out = np.unique(reached)
                out = out if 0 < len(out) <= self.max_frontier else None
            self._frontiers[chain] = out
        return self._frontiers[chain]

    def of_kind(self, chain: tuple[int, ...], relation: int) -> bool:
        """Whether the entities ``chain`` reaches are objects of ``relation`` (``of_type``;
        false where it reaches none)."""
        if chain not in self._kinds:
            reached = self.frontier(chain)
            self._kinds[chain] = {} if reached is None else self.facts.hop_shares(reached[:50])
        hop = inverse_hop(relation, self.facts.n_relations)
        return self._kinds[chain].get(hop, 0.0) >= OF_TYPE_SHARE

    def endpoints(self, chain: tuple[int, ...]) -> tuple[int, ...]:
        """``derive(...).endpoints`` sorted; () where the chain does not instantiate (after a
        round trip the topics are endpoints only when nothing else is reached); each chain's
        once."""
        chain = tuple(chain)
        if chain not in self._ends:
            ends = self.frontier(chain) if chain and len(self.topics) else None
            if ends is not None and round_trip(chain, self.facts.n_relations):
                others = ~np.isin(ends, self.topics)
                ends = ends[others] if others.any() else ends
            self._ends[chain] = () if ends is None else tuple(ends.tolist())
        return self._ends[chain]


@dataclass(frozen=True)
class Reading:
    """What a question's words ask of its chain. ``spans``: per chosen span the relations it
    may name, with their cosines; ``asked``: the relations the asked-for word names;
    ``trips``: the question has a sharing word, so a round trip's way back is named by its
    way out's span."""

    spans: tuple[Mapping[int, float], ...]
    asked: frozenset[int] = frozenset()
    trips: bool = False

    def key(self, chain: tuple[int, ...], reach: Reach) -> Key:
        """How well ``chain`` reads the question, best first: whether it walks or reaches
        (after some hop) objects of an asked relation (true with none asked); the summed
        cosines of the spans it accounts for, each by one hop of its own or as the kind of
        the entities a hop along another relation reaches ("the *films* sharing a genre with
        X's homeland" reach films, objects of ``film``: a kind, no hop); fewer hops no span
        accounts for (:func:`span_credits`)."""
        facts = reach.facts
        n = facts.n_relations
        hops, back = [], False  # back: this hop returns along the one before it
        for i, h in enumerate(chain):
            back = self.trips and bool(i) and not back and h == inverse_hop(chain[i - 1], n)
            hops += [] if back else [hop_relation(h, n)]
        kinds = {r for r in {*self.asked, *(r for span in self.spans for r in span)}
                 if any(r != hop_relation(chain[i - 1], n) and reach.of_kind(chain[:i], r)
                        for i in range(1, len(chain) + 1))}
        credit, idle = span_credits(self.spans, hops, kinds)
        return (not self.asked or bool(self.asked & ({*hops} | kinds)), round(credit, 6),
                -idle)

    def best(self, by_end: Mapping[tuple[int, ...], list[tuple[int, ...]]], reach: Reach
             ) -> tuple[Key, ByEnd]:
        """(the best :meth:`key` of an instantiating chain, the chains by endpoints that
        have it, with the chains that do not instantiate)."""
        keys = {c: self.key(c, reach) for k, g in by_end.items() if k for c in g}
        top = max(keys.values(), default=(False, 0.0, 0))
        kept = {k: [c for c in g if not k or keys[c] == top] for k, g in by_end.items()}
        return top, {k: g for k, g in kept.items() if g}


def span_credits(spans: Sequence[Mapping[int, float]], hops: Sequence[int],
                 kinds: Iterable[int]) -> tuple[float, int]:
    """(the summed cosines of the spans, the hops no span is credited to): the best-read span
    first, each credited with its best relation among the kinds (any number of spans; first
    at equal cosines) and the hops not yet credited (``hops``: a relation per hop)."""
    left, kinds, total = list(hops), set(kinds), 0.0
    for span in sorted(spans, key=lambda s: -max(s.values(), default=0.0)):
        options = [(c, r in kinds, r) for r, c in span.items() if r in left or r in kinds]
        if options:
            c, kind, r = max(options)
            total += c
            if not kind:
                left.remove(r)
    return total, len(left)


def outreads(key: Key, than: Key, margin: float) -> bool:
    """Whether a chain read ``key`` reads the question better than one read ``than``: it
    reaches the asked kind where that one does not, or accounts for spans worth more than
    ``margin`` of cosine more (θ_zs: one more span, not a near relation's noise)."""
    return key[0] > than[0] or (key[0] == than[0] and key[1] > than[1] + margin)


def best_read(options: Sequence[ByEnd], reading: Reading, reach: Reach, margin: float
              ) -> ByEnd:
    """The chains by endpoints that read the question best (:meth:`Reading.best`) of the
    first option that instantiates, unless a later option's read it better
    (:func:`outreads`): then those."""
    best, out = None, options[0]
    for by_end in options:
        if any(by_end):
            key, kept = reading.best(by_end, reach)
            if best is None or outreads(key, best, margin):
                best, out = key, kept
    return out

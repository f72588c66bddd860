"""Chains composed from the relations a question's spans name (the lexicon's words or the
zero-shot matcher's spans): every order and walking direction of them, tried level by level
from the topic, the chains that instantiate voting."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from lokg.runtime.relknow.derivation import derive, of_type
from lokg.runtime.relknow.facts import Facts, hop_relation, inverse_hop, round_trip
from lokg.runtime.relknow.spans import (MAX_ZERO_SHOT_HOPS, ZERO_SHOT_NEAR, ZERO_SHOT_SWAP,
                                        kind_only, named_in_order, shared_span)
from lokg.runtime.relknow.votes import Prediction, stop_of, tally

if TYPE_CHECKING:
    from lokg.runtime.relknow.learned import Learned


def predict_spans(know: Learned, hops: Sequence[tuple[float, int, int, int]],
                  masked: str, facts: Facts, topics: Sequence[int], *, source: str,
                  named: frozenset[int], answer_type: frozenset[int] = frozenset(),
                  asked_kind: frozenset[int] = frozenset(),
                  substitutes: Callable[[float], list[tuple[int, ...]]] | None = None
                  ) -> Prediction:
    """Chains from relations named by question spans (:func:`named_in_order`), every order
    and walking direction of them a vote of weight 1, tried level by level
    (:func:`candidate_levels`: all the named relations before fewer of them — fewer only for
    the zero-shot matcher, whose spans include type nouns —, fewer backward hops first, round
    trips only for a question with a sharing word); chains that reach the same endpoints vote
    together. With ``answer_type`` (the relations the asked-for word names) a chain may go
    one hop further along one of them, and only chains whose endpoints are of that kind
    count ("which films star X" asks for films, not co-stars). ``substitutes`` (the spans'
    relations with one swapped for a near other) are tried when nothing instantiates, when
    the chains walk a hop backwards, or when they miss ``asked_kind`` (:func:`substituted`);
    a question whose one span is its first word asks the topic's hops reaching
    ``asked_kind``. When nothing instantiates, the walk of the chain tried first says where
    it stopped (:attr:`Prediction.stops`)."""
    in_order = named_in_order(hops, len(masked.split()))
    if not in_order:
        return Prediction(source, None, 0.0, 0.0, [], named, None, "no span names a relation")
    reach = Reach(facts, topics, know.max_frontier)
    levels = functools.partial(first_level, know, sharing=shared_span(hops, masked),
                               reach=reach, answer_type=answer_type,
                               fewest=1 if source == "zero_shot" else len(in_order))
    by_end, first = levels(in_order)
    if substitutes is not None:
        by_end = substituted(by_end, levels, substitutes, asked_kind, named, facts)
    if not any(by_end) and asked_kind and kind_only(hops, masked):
        by_end = to_kind(reach, asked_kind) or by_end
    votes = [(group[0], float(len(group))) for key, group in by_end.items() if key]
    votes += [(chain, 1.0) for chain in by_end.get((), [])]
    prediction = tally(votes, facts, topics, source=source, named=named,
                       max_frontier=know.max_frontier)
    if prediction.chain is None and not prediction.stops and first and topics:
        stopped = stop_of(derive(facts, topics, first, max_frontier=know.max_frontier))
        prediction.stops = (stopped,) if stopped else ()
    return prediction


def substituted(by_end: dict[tuple[int, ...], list[tuple[int, ...]]],
                levels: Callable[[tuple[int, ...]], tuple[dict, tuple | None]],
                substitutes: Callable[[float], list[tuple[int, ...]]],
                asked_kind: frozenset[int], named: frozenset[int], facts: Facts
                ) -> dict[tuple[int, ...], list[tuple[int, ...]]]:
    """The chains by endpoints :func:`predict_spans` votes with, the spans' substitutes
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


def first_level(know: Learned, in_order: tuple[int, ...], *, sharing: int | None,
                reach: Reach, answer_type: frozenset[int], fewest: int
                ) -> tuple[dict[tuple[int, ...], list[tuple[int, ...]]], tuple | None]:
    """(chains by endpoints, the chain tried first — where it stops is what the graph
    lacks) of the first of :func:`candidate_levels` where a chain instantiates, of the
    asked kind when there is one; else the first level reaching subjects of that kind,
    else the last level's."""
    by_end: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    subjects = None  # the first level reaching subjects of the asked kind's relations
    first = None
    facts = reach.facts
    for chains in candidate_levels(know, in_order, sharing, facts.n_relations, fewest):
        first = first or (chains[0] if chains else None)
        chains = chains + ending_in(chains, answer_type, facts.n_relations)
        by_end = by_endpoints(chains, reach)
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


def candidate_levels(know: Learned, in_order: tuple[int, ...], sharing: int | None,
                     n_relations: int, fewest: int):
    """The chains :func:`predict_spans` tries, level by level (the first level where one
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
        chains = [(c, sum(h >= n_relations for h in c))
                  for c, same in distinct(know, [c for o in orders
                                                 for c in directions(o, n_relations)])
                  if not round_trip(same, n_relations)]
        for k in range(size + 1):
            yield [c for c, backward in chains if backward == k]


def to_kind(reach: Reach, kind: frozenset[int]) -> dict[tuple[int, ...], list[tuple[int, ...]]]:
    """The topic's hops (forward ones first) that reach entities of the asked kind (objects
    of a ``kind`` relation), by endpoints: what a question naming only the kind asks."""
    chains = [(h,) for h in reach.facts.hops_from(reach.topics)]
    return {k: g for k, g in by_endpoints(chains, reach).items()
            if k and of_type(reach.facts, k, kind)}


def distinct(know: Learned, chains: Sequence[tuple[int, ...]]
             ) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(chain, the same chain in canonical hops) for the first chain of every canonical
    form: ``~parents`` and ``children`` state the same facts, so one of them is tried,
    and ``film.actor.film`` then ``starring`` is a round trip."""
    seen, out = set(), []
    for chain in chains:
        same = tuple(know.canonical.get(h, h) for h in chain)
        if same not in seen:
            seen.add(same)
            out.append((chain, same))
    return out


class Reach:
    """The entities chains reach from one question's topics — the endpoints ``derive`` gives
    them, without the walks and facts only the voted chain needs — each chain prefix walked
    once: the orders, directions and substitutes one question tries share most of theirs."""

    def __init__(self, facts: Facts, topics: Sequence[int], max_frontier: int):
        self.facts, self.max_frontier = facts, max_frontier
        self.topics = np.array(sorted({int(t) for t in topics}), dtype=np.int64)
        self._frontiers: dict[tuple[int, ...], np.ndarray | None] = {(): self.topics}
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


def by_endpoints(chains: Sequence[tuple[int, ...]], reach: Reach
                 ) -> dict[tuple[int, ...], list[tuple[int, ...]]]:
    """Chains grouped by the endpoints they reach (key ``()``: they do not instantiate)."""
    by_end: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for chain in chains:
        by_end.setdefault(reach.endpoints(chain), []).append(chain)
    return by_end


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
    :func:`by_endpoints` but the ``()`` key); (0, 0) when none does."""
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

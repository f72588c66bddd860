"""Chains composed from the relations a question's spans name (the lexicon's words or the
zero-shot matcher's spans): every order and walking direction of them, tried level by level
from the topic, the chains that instantiate voting."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from lokg.runtime.relknow.derivation import derive, of_type
from lokg.runtime.relknow.facts import Facts, hop_relation, inverse_hop, round_trip
from lokg.runtime.relknow.reading import Reach, Reading, best_read
from lokg.runtime.relknow.spans import (MAX_ZERO_SHOT_HOPS, ZERO_SHOT_NEAR, ZERO_SHOT_SWAP,
                                        kind_only, named_in_order, shared_span,
                                        sharing_word)
from lokg.runtime.relknow.votes import Prediction, stop_of, tally

#: Walks of each length :func:`predict_walks` keeps, those reading the question best.
WALK_BEAM = 8
#: Hops :func:`predict_walks` tries from a walk's end: those whose relations a span reads best.
WALK_HOPS = 8

if TYPE_CHECKING:
    from lokg.runtime.relknow.learned import Learned


def predict_spans(know: Learned, hops: Sequence[tuple[float, int, int, int]],
                  masked: str, facts: Facts, topics: Sequence[int], *, source: str,
                  named: frozenset[int], answer_type: frozenset[int] = frozenset(),
                  asked_kind: frozenset[int] = frozenset(),
                  substitutes: Callable[[float], list[tuple[int, ...]]] | None = None,
                  readings: Sequence[Mapping[int, float]] = ()) -> Prediction:
    """Chains from relations named by question spans (:func:`named_in_order`), every order
    and walking direction a vote of weight 1, tried level by level (:func:`candidate_levels`);
    chains that reach the same endpoints vote together. With ``answer_type`` (the relations
    the asked-for word names) a chain may go one hop further along one of them, and only
    chains whose endpoints are of that kind count. ``substitutes`` (the spans' relations with
    one swapped for a near other) are tried when nothing instantiates, when the chains walk
    a hop backwards, or when they miss ``asked_kind`` (:func:`substituted`); a question whose
    one span is its first word asks the topic's hops reaching ``asked_kind``. With
    ``readings`` (per span: the relations it may name, with cosines) chains reading the
    question better replace them (:func:`better_read`). Stops: where the first chain's did."""
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
    if substitutes is not None and readings:
        by_end = better_read(by_end, levels, in_order, substitutes, Reading(
            tuple(readings), answer_type, sharing_word(masked) is not None), reach,
            know.zero_shot_cosine)
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


def predict_walks(know: Learned, facts: Facts, topics: Sequence[int], reading: Reading,
                  most: int, *, source: str, named: frozenset[int]) -> Prediction:
    """The walks of 1 to ``most`` hops the graph has from the topics (each hop one of the
    :data:`WALK_HOPS` a fact takes from the entities reached whose relations a span reads
    best; the :data:`WALK_BEAM` walks that read the question best kept per length), those
    that read it best voting (:meth:`Reading.best`, a span read as the walks' relations and
    those within ``ZERO_SHOT_NEAR`` of its best): what a question whose named relations
    instantiate nowhere asks ("the *backer* of X": no relation's name is near, but of X's
    relations the span reads production_company best); none where no walk reads any span."""
    reach = Reach(facts, topics, know.max_frontier)
    n = facts.n_relations

    def read_best(hop: int) -> float:
        return max((span.get(hop_relation(hop, n), -1.0) for span in reading.spans), default=0.0)

    chains, grown = [], [()]
    for _ in range(most):
        grown = [c + (h,) for c in grown
                 for h in sorted(facts.hops_from(reach.frontier(c)), key=read_best,
                                 reverse=True)[:WALK_HOPS]
                 if reach.frontier(c + (h,)) is not None]
        walked = {hop_relation(h, n) for c in grown for h in c}
        read = Reading(tuple(walked_or_near(span, walked) for span in reading.spans),
                       reading.asked, reading.trips)
        grown = sorted(grown, key=lambda c: read.key(c, reach), reverse=True)[:WALK_BEAM]
        chains += grown
    top, by_end = read.best(by_endpoints(chains, reach), reach) if chains else (None, {})
    votes = [(group[0], float(len(group))) for key, group in by_end.items()
             if key and top[1] > 0]
    return tally(votes, facts, topics, source=source, named=named,
                 max_frontier=know.max_frontier)


def walked_or_near(span: Mapping[int, float], walked: set[int]) -> dict[int, float]:
    """A span's readings of the relations walked, and of those within ``ZERO_SHOT_NEAR`` of
    its best (the best found once: a documents store's span reads thousands)."""
    floor = max(span.values(), default=0.0) - ZERO_SHOT_NEAR
    return {r: v for r, v in span.items() if r in walked or v >= floor}


def better_read(by_end: dict[tuple[int, ...], list[tuple[int, ...]]],
                levels: Callable[..., tuple[dict, tuple | None]], in_order: tuple[int, ...],
                substitutes: Callable[[float], list[tuple[int, ...]]], reading: Reading,
                reach: Reach, margin: float) -> dict[tuple[int, ...], list[tuple[int, ...]]]:
    """``by_end``'s chains that read the question best, unless those of the named relations
    or of a substitute, from any level (``levels`` with the ``reading``: the asked kind
    read anywhere on the walk, spans read as kinds), read it better (:func:`best_read`)."""
    read = functools.partial(levels, reading=reading)
    return best_read([by_end, read(in_order)[0],
                      *(read(s)[0] for s in substitutes(ZERO_SHOT_NEAR))], reading, reach, margin)


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
                reach: Reach, answer_type: frozenset[int], fewest: int,
                reading: Reading | None = None
                ) -> tuple[dict[tuple[int, ...], list[tuple[int, ...]]], tuple | None]:
    """(chains by endpoints, the chain tried first — where it stops is what the graph
    lacks) of the first of :func:`candidate_levels` where a chain instantiates, of the
    asked kind when there is one; else the first level reaching subjects of that kind,
    else the last level's. With a ``reading`` (spans may name a kind rather than a hop, and
    the asked-for word need not name the endpoints' kind) the chains that read the question
    best (:meth:`Reading.best`) of any level instead, ties to the earlier level."""
    by_end: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    subjects = None  # the first level reaching subjects of the asked kind's relations
    first, best = None, None
    facts = reach.facts
    for chains in candidate_levels(know, in_order, sharing, facts.n_relations, fewest):
        first = first or (chains[0] if chains else None)
        chains = chains + ending_in(chains, answer_type, facts.n_relations)
        by_end = by_endpoints(chains, reach)
        if answer_type and any(by_end) and reading is None:
            typed = {k: g for k, g in by_end.items()
                     if not k or of_type(facts, k, answer_type)}
            if not any(subjects or {}) and not any(typed):
                subjects = {k: g for k, g in by_end.items()
                            if not k or of_type(facts, k, answer_type, objects=False)}
            by_end = typed
        if any(by_end) and reading is None:
            return by_end, first
        if any(by_end):
            scored = reading.best(by_end, reach)
            best = scored if best is None or scored[0] > best[0] else best
    if best is not None:
        return best[1], first
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
    """Out along one named relation and back, then the other named relations: "which films
    share the director of X" is X → director → the director's films, "what genres do the films
    that share the director of X have" one hop more, and so is "the films sharing a genre with
    X's homeland" (the other relation named after the topic). The relation named nearest the
    topic is shared first, then the others; the rest in question order reversed first, then
    every other order, fewer backward hops first; both directions of the trip, forward out
    first."""
    out = []
    for i in reversed(range(len(order))):
        near, rest = order[i], order[:i] + order[i + 1:]
        orders = dict.fromkeys([tuple(reversed(rest)), *itertools.permutations(rest)])
        tails = [t for o in orders for t in directions(o, n_relations)]
        out += [(h, inverse_hop(h, n_relations)) + tail
                for tail in tails for h in (near, inverse_hop(near, n_relations))]
    return list(dict.fromkeys(out))

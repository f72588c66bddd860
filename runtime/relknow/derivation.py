"""Following a chain from the topic entities over the store's facts (relational composition,
either direction): the endpoints are the derived answer, the facts on the walks that reach
them the compact context; and the entity types a hop starts from."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from lokg.runtime.relknow.facts import Facts, Triple, inverse_hop, round_trip


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


def reach(facts: Facts, subjects: np.ndarray, relation: int) -> int:
    """0 when the subjects have forward facts of the relation, 1 backward ones only, 2 none."""
    if len(facts.step(subjects, relation)[1]):
        return 0
    return 1 if len(facts.step(subjects, inverse_hop(relation, facts.n_relations))[1]) else 2


#: The share of a walk's endpoints a relation's objects must be for them to be of its kind.
OF_TYPE_SHARE = 0.5


def of_type(facts: Facts, endpoints: Sequence[int], relations: Iterable[int],
            share: float = OF_TYPE_SHARE, objects: bool = True) -> bool:
    """Whether at least ``share`` of the (first 50) endpoints are objects (or subjects) of
    one of the relations: the endpoints are of the kind the relation's name says."""
    ends = np.asarray(endpoints[:50], dtype=np.int64)
    hit = np.zeros(len(ends), dtype=bool)
    for r in relations:
        hop = inverse_hop(r, facts.n_relations) if objects else r
        hit[np.unique(facts.step(ends, hop)[0])] = True
    return bool(hit.mean() >= share) if len(ends) else False

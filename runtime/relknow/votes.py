"""Chain votes and what they predict: the weighted chains a predictor tallies, the prediction
it makes of them (the best-voted chain that instantiates from the topic), and the support a
revised chain draws from the votes."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lokg.runtime.relknow.derivation import Derivation, derive
from lokg.runtime.relknow.facts import Facts, hop_relation

#: Stopped walks a prediction keeps (the votes the route record shows).
MAX_STOPS = 5
#: The most voted hops :func:`composed_chains` composes chains from.
PER_HOP_HOPS = 6


@dataclass(frozen=True)
class Vote:
    chain: tuple[int, ...]
    weight: float
    derivable: bool


@dataclass
class Prediction:
    """The chain followed for a question: the best-voted chain that instantiates from the topic
    entities, its share of the instantiating votes, and the votes it won against."""

    source: str  # the predictor's name (relknow.PREDICTORS)
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
    #: (the runtime keeps those whose hop fits the entities' types)
    stops: tuple[Derivation, ...] = ()
    #: the kNN vote's: cosine of the nearest training question (how familiar the wording is)
    nearest: float = 0.0
    #: the kNN vote's nearest training question is under ``UNFAMILIAR_COSINE``
    unfamiliar: bool = False
    #: the question's content words the chain does not explain
    #: (``lexicon.unexplained``): a hop it may be missing
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

def revote(prediction: Prediction, weights: Mapping[tuple[int, ...], float], facts: Facts,
           topics: Sequence[int], source: str, max_frontier: int) -> Prediction | None:
    """The best-weighted of chains drawn from the votes that instantiates (None: none
    does), supported by the votes that hold it (:func:`held_support`)."""
    out = tally(list(weights.items()), facts, topics, source=source,
                named=prediction.named, max_frontier=max_frontier)
    if out.chain is None:
        return None
    out.support, out.nearest = held_support(prediction.votes, out.chain), prediction.nearest
    return out

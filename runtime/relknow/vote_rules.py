"""The kNN vote and the rules that revise it (labelled knowledge): each a :class:`Predictor` of
the cascade (``relknow.cascade.CASCADE`` orders them). A revision draws its chain from the
votes and is supported by the votes that hold it (:func:`held_support`)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np

from lokg.runtime.linker import STOP_WORDS
from lokg.runtime.question_text import HOP_READINGS, question_spans
from lokg.runtime.relknow.facts import hop_relation
from lokg.runtime.relknow.lexicon import lexicon_hops, meanings, unnamed_hop
from lokg.runtime.relknow.predictor import LabelledPredictor, Question, unfamiliar_wording
from lokg.runtime.relknow.spans import (described_fit, described_size, head_kind,
                                        span_similarities)
from lokg.runtime.relknow.votes import (Prediction, composed_chains, nested,
                                        revote, voted_length)

#: A voted chain whose support is under this many neighbours' worth of the vote (support × k)
#: is one neighbour's guess: on unfamiliar wording its hops are composed from every vote
#: instead (:class:`PerHop`).
LONE_VOTE = 1.5
#: Chains kept per hop when unfamiliar wording is decoded run by run (:class:`RunsDecoded`).
DECODE_BEAM = 16


def revoted(q: Question, prediction: Prediction, weights: Mapping[tuple[int, ...], float],
            source: str) -> Prediction | None:
    """The best-weighted of chains drawn from ``prediction``'s votes that instantiates from the
    question's topics (None: none does), supported by the votes that hold it."""
    return revote(prediction, weights, q.facts, q.topics, source, q.know.max_frontier)


class KnnVote(LabelledPredictor):
    """The k nearest training questions (cosine of the masked embeddings) vote for their chain
    with their similarity; the best-voted chain that instantiates from the topic is followed,
    its share its weight over the instantiating chains' and its support over all votes.
    Answers when the knowledge was fitted with an encoder and the question is embedded."""

    name = "knn"

    def revise(self, q: Question, prediction: Prediction | None) -> Prediction | None:
        return q.vote


class Shortened(LabelledPredictor):
    """Voted chains too long for the question (knowledge learned on 3-hop questions, asked
    2-hop ones) with hops left out: each sub-chain (hop order kept) that walks one of the
    :func:`meanings` of every naming word votes with the weight of every voted chain it is
    drawn from, and the longest that instantiates is followed. Answers where the voted chain
    instantiates but walks no relation some naming word names ("the job of X's wife" voted
    (spouse, spouse, spouse)) or a hop no word names (:func:`unnamed_hop`); and where no voted
    chain instantiates, unless the lexicon's composition has as many hops."""

    name = "knn_shortened"

    def revise(self, q: Question, prediction: Prediction | None) -> Prediction | None:
        vote = q.vote
        if vote is None:
            return None
        if vote.chain is None:
            shorter = self.shortened(q, vote)
            composed = q.composed.chain
            if shorter is None or (composed is not None and len(shorter.chain) <= len(composed)):
                return None
            shorter.stops = vote.stops  # where the voted chains found no fact
            return shorter
        if not q.vote_fits:
            return None
        walked = vote.relations
        if any(h[3] not in walked for h in q.hops) or \
                unnamed_hop(q.know, q.masked, q.hops, vote.chain):
            return self.shortened(q, vote)
        return None

    @staticmethod
    def shortened(q: Question, vote: Prediction) -> Prediction | None:
        """The longest instantiating sub-chain of the votes, best-voted first; its support is
        :func:`held_support` (0 with two hops left out)."""
        words, n_relations = q.masked.split(), q.know.n_relations
        needed = [meanings(q.know, words[i], r) for _, i, _, r in lexicon_hops(q.know, q.masked)]
        longest = max((len(v.chain) for v in vote.votes), default=0)
        for size in range(longest - 1, 0, -1):
            weights: dict[tuple[int, ...], float] = {}
            for v in vote.votes:
                for sub in dict.fromkeys(itertools.combinations(v.chain, size)):
                    walked = {hop_relation(h, n_relations) for h in sub}
                    if len(v.chain) > size and all(n & walked for n in needed):
                        weights[sub] = weights.get(sub, 0.0) + v.weight
            shorter = revoted(q, vote, weights, "knn_shortened")
            if shorter is not None:
                return shorter
        return None


class Resized(LabelledPredictor):
    """Unfamiliar wording whose spans describe another number of relations than the voted chain
    walks (:func:`described_size`): the best-voted instantiating chain of that many hops that
    holds the voted one or is held by it. Answers where the vote stands unshortened."""

    name = "knn_resized"

    def revise(self, q: Question, prediction: Prediction | None) -> Prediction | None:
        vote = q.vote
        if not q.vote_fits or prediction is not vote or not unfamiliar_wording(vote, q.embed):
            return None
        size = described_size(q.know, q.masked, q.embed, q.facts, q.topics)
        if size in (0, len(vote.chain)):
            return None
        weights = {v.chain: v.weight for v in vote.votes
                   if len(v.chain) == size and nested(v.chain, vote.chain)}
        return revoted(q, vote, weights, "knn_resized")


class Bridged(LabelledPredictor):
    """Unfamiliar wording where nothing instantiates, neither the votes, shortened, nor the
    lexicon's composition: each voted chain, and it without its first hop, behind one hop the
    topic has — the vote knew where the question goes but not how it leaves the topic ("the
    native town of the helmer of X"). A bridge weighs as its vote times how well the
    question's spans describe the bridging relation (:func:`described_fit`); the best that
    instantiates is followed, no longer than the longest vote."""

    name = "knn_bridged"

    def revise(self, q: Question, prediction: Prediction | None) -> Prediction | None:
        vote = q.vote
        if vote is None or prediction.chain is not None or not unfamiliar_wording(vote, q.embed):
            return None
        fit = described_fit(q.know, q.masked, q.embed)
        if not fit or not vote.votes:
            return None
        subjects = np.asarray(sorted(set(q.topics)), dtype=np.int64)
        leaving = [h for h in range(q.facts.width) if len(q.facts.step(subjects, h)[1])]
        longest = max(len(v.chain) for v in vote.votes)
        weights: dict[tuple[int, ...], float] = {}
        for v in vote.votes:
            for tail in dict.fromkeys((v.chain, v.chain[1:])):
                for hop in leaving if len(tail) < longest else ():
                    chain = (hop,) + tail
                    weights[chain] = weights.get(chain, 0.0) + v.weight * fit.get(
                        hop_relation(hop, q.facts.n_relations), 0.0)
        bridged = revoted(q, vote, weights, "knn_bridged")
        if bridged is not None:
            bridged.stops = vote.stops  # where the voted chains found no fact
        return bridged


class Appended(LabelledPredictor):
    """A chain shorter than every training question's whose question asks one hop further in
    words no training question used ("what does X's husband do for a *living*"): the longest
    span of words the chain leaves unexplained — none names a walked relation in the lexicon,
    nor describes one best alone — whose best relation passes θ_zs, walked forward as one
    more hop. Answers with an encoder, where such a span describes an unwalked relation and
    the longer chain instantiates ("man or woman": gender)."""

    name = "knn_appended"

    def revise(self, q: Question, prediction: Prediction | None) -> Prediction | None:
        know = q.know
        if prediction.chain is None or q.embed is None or not know.relation_vectors.shape[1] \
                or len(prediction.chain) >= min(map(len, know.chains), default=0):
            return None
        walked, words, spans = prediction.relations, q.masked.split(), question_spans(q.masked)
        if not spans:
            return None
        sims = span_similarities(know, [t for _, _, t in spans], q.embed)
        best = [know.relation_order[int(i)] for i in sims.argmax(axis=1)]
        left = {t for (a, b, t), r in zip(spans, best)  # single words: the question's words
                if b - a == 1 and r not in walked and not know.names([t]) & walked}
        fits = [(b - a, float(row.max()), r) for (a, b, _), row, r in zip(spans, sims, best)
                if all(w in left or w in STOP_WORDS for w in words[a:b])
                and row.max() >= know.zero_shot_cosine and r not in walked]
        if not fits:
            return None
        relation = max(fits)[2]
        return revoted(q, prediction, {prediction.chain + (relation,): 1.0}, "knn_appended")


class RunsDecoded(LabelledPredictor):
    """Unfamiliar wording on a store whose questions name one hop per run (or per part: the
    knowledge's ``hop_reading`` fewest or most): the chain that walks, from the topic outward,
    the relation each run's words describe, among the hops of the training chains and where
    the graph has facts — a beam of :data:`DECODE_BEAM` chains scored by their hops' summed
    similarity. The votes know the training wording's combinations; the runs say which
    relation each hop names in words no vote saw. Answers where the reading fixes the count,
    the topic is found in the question and a decoded chain instantiates."""

    name = "runs_decoded"

    def revise(self, q: Question, prediction: Prediction | None) -> Prediction | None:
        know, runs = q.know, q.runs
        if not q.unfamiliar_wording(prediction):
            return None
        texts = runs.hops(know.hop_reading) if runs is not None and know.hop_reading else None
        if not texts or not runs.anchored or not know.relation_vectors.shape[1]:
            return None
        for chain, _, _ in self.beam(q, span_similarities(know, texts, q.embed)):
            out = revoted(q, prediction, {chain: 1.0}, "runs_decoded")
            if out is not None:
                return out
        return None

    @staticmethod
    def beam(q: Question, sims: np.ndarray) -> list[tuple[tuple[int, ...], float, np.ndarray]]:
        """(chain, score, entities reached) of the best chains, one hop per row of ``sims``."""
        know, facts = q.know, q.facts
        hops = sorted({h for chain in know.chains for h in chain})
        beam = [((), 0.0, np.unique(np.asarray(q.topics, dtype=np.int64)))]
        for row in sims:
            grown = []
            for chain, score, frontier in beam:
                for hop in hops:
                    reached = np.unique(facts.step(frontier, hop)[1])
                    if 0 < len(reached) <= know.max_frontier:  # else no derivation follows it
                        fit = float(row[know.relation_column[hop_relation(hop, know.n_relations)]])
                        grown.append((chain + (hop,), score + fit, reached))
            beam = sorted(grown, key=lambda b: -b[1])[:DECODE_BEAM]
        return beam


class PerHop(LabelledPredictor):
    """Unfamiliar wording whose neighbours agree on no chain (the kNN vote's chain held by one
    neighbour, :data:`LONE_VOTE`, or none): they know the question's relations better than its
    combination of them. Each hop weighs the share of the vote whose chains walk it; chains of
    as many hops as the spans describe (else the most voted length), drawn from the heaviest
    hops in every order, repeats allowed, weigh the product of their hops'
    (:func:`composed_chains`); the best that instantiates is followed."""

    name = "knn_per_hop"

    def revise(self, q: Question, prediction: Prediction | None) -> Prediction | None:
        if not q.unfamiliar_wording(prediction) or prediction.source != KnnVote.name \
                or prediction.support * q.know.k >= LONE_VOTE or not prediction.votes:
            return None
        size = described_size(q.know, q.masked, q.embed, q.facts, q.topics) or \
            voted_length(prediction.votes)
        return revoted(q, prediction, composed_chains(prediction.votes, [size]), "knn_per_hop")


class Typed(LabelledPredictor):
    """Unfamiliar wording whose head words name what it asks for (:func:`head_kind`: "which
    *central offices* does …") while the followed chain's last hop reaches other types of
    entity: the best-weighted instantiating vote whose last hop reaches one of the asked types
    (the named relations' objects' types, ``HopDomains.range``), else the longest prefix of
    the chain that does. Answers with the entities' types, not after :class:`RunsDecoded`,
    where the graph is typed there, the chain walks no named relation and something fits."""

    name = "knn_typed"

    def revise(self, q: Question, prediction: Prediction | None) -> Prediction | None:
        domains = q.domains
        if domains is None or not q.unfamiliar_wording(prediction) \
                or prediction.source == RunsDecoded.name or prediction.chain is None:
            return None
        kind = head_kind(q.know, q.masked, q.embed)
        asked = frozenset().union(*(domains.range(r) for r in kind))
        reached = domains.range(prediction.chain[-1])
        if not asked or not reached or reached & asked or kind & prediction.relations:
            return None

        def reaches(chain: tuple[int, ...]) -> bool:
            return bool(domains.range(chain[-1]) & asked)

        votes = {v.chain: v.weight for v in prediction.votes if v.derivable and reaches(v.chain)}
        prefixes = {prediction.chain[:n]: float(n) for n in range(1, len(prediction.chain))
                    if reaches(prediction.chain[:n])}  # the longest first
        return revoted(q, prediction, votes, "knn_typed") or \
            revoted(q, prediction, prefixes, "knn_typed")


class Ranged(LabelledPredictor):
    """A chain whose length the question's wording rules out (its hop runs' range read as the
    store's training questions name their hops, ``hop_reading``: "follow passport issuer,
    then ruling town, then land it lies in" names three): the best instantiating vote of an
    allowed length, else the votes' hops composed (:func:`composed_chains`) at each allowed
    length up to the longest training chain. Answers where the store has a trusted reading,
    the chain does not fit it and something allowed instantiates."""

    name = "knn_ranged"

    def revise(self, q: Question, prediction: Prediction | None) -> Prediction | None:
        know, runs = q.know, q.runs
        if runs is None or not runs.runs or know.hop_reading is None:
            return None
        low, high = HOP_READINGS[know.hop_reading](runs.range)
        high = min(high, max(map(len, know.chains)))
        if prediction.chain is not None and low <= len(prediction.chain) <= high:
            return None
        votes = {v.chain: v.weight for v in prediction.votes if low <= len(v.chain) <= high}
        composed = composed_chains(prediction.votes, range(low, high + 1))
        for candidates in (votes, composed):
            out = revoted(q, prediction, candidates, "knn_ranged")
            if out is not None:
                return out
        return None

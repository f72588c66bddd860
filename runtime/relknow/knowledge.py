"""Relation knowledge at query time: the learned knowledge (:class:`Learned`) asked about one
question at a time — the cascade's chain, its derivation and the derived context's check."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lokg.runtime.question_text import HopRuns
from lokg.runtime.relknow.cascade import predict
from lokg.runtime.relknow.checks import Consistency
from lokg.runtime.relknow.derivation import Derivation, HopDomains
from lokg.runtime.relknow.facts import Facts, RelknowError, inverse_hop
from lokg.runtime.relknow.learned import Learned
from lokg.runtime.relknow.lexicon import unexplained
from lokg.runtime.relknow.predictor import Question
from lokg.runtime.relknow.spans import Embed
from lokg.runtime.relknow.votes import Prediction


@dataclass
class Assessment:
    """Everything the relation knowledge says about one question."""

    masked: str
    prediction: Prediction
    derivation: Derivation | None
    consistency: Consistency | None
    runs: HopRuns | None = None  # the runs of words the question names its hops in


class RelationKnowledge(Learned):
    """The learned knowledge that assesses questions: :meth:`assess` walks the predictor
    cascade for one question and checks what its chain derives."""

    def assess(self, masked: str, topics: Sequence[int], facts: Facts, *,
               q_vec: np.ndarray | None, embed: Embed | None = None,
               domains: HopDomains | None = None, explain: bool = True,
               runs: HopRuns | None = None) -> Assessment:
        """Predict the chain of a masked question (``relknow.CASCADE``) and check its derived
        context. ``q_vec``: the masked question's vector (the kNN vote); ``embed``: the
        encoder for spans; ``domains``: the entities' types per hop; ``runs``: the question's
        hop runs. ``explain``: find the content words the chain leaves unexplained (what the
        precision gate reads; span embeddings cost time, so the runtime asks only under the
        precision policy)."""
        self._check_inputs(facts, q_vec)
        question = Question(self, masked, topics, facts, q_vec, embed, domains, runs)
        prediction = predict(question)
        if self.labelled:  # every revision keeps the vote's nearest cosine (revote)
            prediction.unfamiliar = question.unfamiliar_wording(prediction)
            if explain:
                prediction.unexplained = unexplained(self, masked, prediction.chain, embed)
        consistency = None
        if prediction.derivation is not None:
            consistency = self.checker.check(prediction.derivation.facts, facts)
        return Assessment(masked, prediction, prediction.derivation, consistency, runs)

    def _check_inputs(self, facts: Facts, q_vec: np.ndarray | None) -> None:
        """The facts and the question vector are those the knowledge was resolved and fitted
        with."""
        if facts.n_relations != self.n_relations:
            raise RelknowError(f"facts index {facts.n_relations} relations; the relation "
                               f"knowledge was resolved against {self.n_relations}")
        width = self.question_vectors.shape[1]
        if q_vec is not None and width and len(q_vec) != width:
            raise RelknowError(f"the question vector has {len(q_vec)} dimensions; the relation "
                               f"knowledge was fitted with {width} (another encoder?)")

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
        place_of_death too)."""
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

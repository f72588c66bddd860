"""What every predictor of the cascade shares: the question as they read it (its masked words,
topics, vector, hop runs, and what the kNN vote and the lexicon make of it, each computed once)
and the interface, a name and a ``predict`` that returns a prediction or None."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from lokg.runtime.question_text import HopRuns, question_words
from lokg.runtime.relknow.composition import predict_spans
from lokg.runtime.relknow.derivation import HopDomains
from lokg.runtime.relknow.facts import Facts
from lokg.runtime.relknow.lexicon import lexicon_hops, meanings
from lokg.runtime.relknow.spans import Embed
from lokg.runtime.relknow.votes import Prediction, tally

if TYPE_CHECKING:
    from lokg.runtime.relknow.learned import Learned

#: Below this cosine of the nearest training question a labelled store's wording is unfamiliar
#: (in-domain questions sit near 1, unseen wording far below): the question's spans, matched
#: to relations, say how many hops the voted chain should have and bridge the topic's hop.
UNFAMILIAR_COSINE = 0.8


def unfamiliar_wording(prediction: Prediction | None, embed: Embed | None) -> bool:
    """Whether a kNN vote is a guess: no training question is near the wording
    (:data:`UNFAMILIAR_COSINE`), and the encoder can compare spans with relations."""
    return embed is not None and prediction is not None and \
        prediction.nearest < UNFAMILIAR_COSINE


def knn_vote(know: Learned, q_vec: np.ndarray, facts: Facts, topics: Sequence[int],
             named: frozenset[int] = frozenset()) -> Prediction:
    """The k nearest training questions vote for their chain with their cosine."""
    sims = know.question_vectors @ np.asarray(q_vec, dtype=np.float32)
    k = min(know.k, len(sims))
    top = np.argpartition(-sims, k - 1)[:k]
    top = top[np.argsort(-sims[top], kind="stable")]
    votes = [(know.chains[int(know.question_chain[i])], float(sims[i])) for i in top]
    prediction = tally(votes, facts, topics, source="knn", named=named,
                       max_frontier=know.max_frontier)
    prediction.nearest = float(sims[top[0]]) if k else 0.0
    return prediction


@dataclass
class Question:
    """One masked question as the predictors read it. ``q_vec``: its masked embedding (the kNN
    vote reads it); ``embed``: the encoder for its spans (None: no encoder); ``domains``: the
    entity types per hop; ``runs``: the runs of words it names its hops in."""

    know: Learned
    masked: str
    topics: Sequence[int]
    facts: Facts
    q_vec: np.ndarray | None = None
    embed: Embed | None = None
    domains: HopDomains | None = None
    runs: HopRuns | None = None

    @functools.cached_property
    def named(self) -> frozenset[int]:
        """The relations the lexicon says the question's words name."""
        return self.know.names(question_words(self.masked))

    @functools.cached_property
    def vote(self) -> Prediction | None:
        """The kNN vote (None: knowledge without labelled questions or fitted without an
        encoder, or a question not embedded)."""
        know = self.know
        if not know.labelled or not know.question_vectors.shape[1] or self.q_vec is None:
            return None
        return knn_vote(know, self.q_vec, self.facts, self.topics, self.named)

    @functools.cached_property
    def hops(self) -> list[tuple[float, int, int, int]]:
        """The lexicon's hops (:func:`lexicon_hops`); with a voted chain, without the words a
        voted relation accounts for (:func:`meanings`: "place" names place_of_death too),
        which are no hop of their own."""
        hops = lexicon_hops(self.know, self.masked)
        if self.vote is None or self.vote.chain is None:
            return hops
        words, walked = self.masked.split(), self.vote.relations
        return [h for h in hops
                if h[3] in walked or not meanings(self.know, words[h[1]], h[3]) & walked]

    @property
    def vote_fits(self) -> bool:
        """The voted chain instantiates and the lexicon names no more hops than it walks: the
        vote, or a revision of it, stands without the lexicon's composition."""
        return self.vote is not None and self.vote.chain is not None and \
            len(self.hops) <= len(self.vote.chain)

    @functools.cached_property
    def composed(self) -> Prediction:
        """The lexicon's chain: the relations its words name, composed from the topic."""
        return predict_spans(self.know, self.hops, self.masked, self.facts, self.topics,
                             source="lexicon", named=self.named)

    def unfamiliar_wording(self, prediction: Prediction | None) -> bool:
        """The question is embedded and its wording unfamiliar (:func:`unfamiliar_wording`)."""
        return self.q_vec is not None and unfamiliar_wording(prediction, self.embed)


class Predictor:
    """One step of the cascade: predicts the question's chain, or revises the prediction so far;
    None where it does not answer (the prediction so far stands)."""

    name: ClassVar[str]  # what Prediction.source says and the breakdown counts

    def predict(self, question: Question, prediction: Prediction | None) -> Prediction | None:
        raise NotImplementedError


class LabelledPredictor(Predictor):
    """A predictor of knowledge fitted from labelled questions (none answers for zero-shot
    knowledge): :meth:`revise` says what it answers."""

    def predict(self, question: Question, prediction: Prediction | None) -> Prediction | None:
        return self.revise(question, prediction) if question.know.labelled else None

    def revise(self, question: Question, prediction: Prediction | None) -> Prediction | None:
        raise NotImplementedError

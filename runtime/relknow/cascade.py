"""The predictor cascade: which chain a question asks for. :data:`CASCADE` is the order; each
predictor answers or leaves the prediction so far standing (:func:`predict`)."""

from __future__ import annotations

import functools

from lokg.runtime.relknow.composition import predict_spans, predict_walks
from lokg.runtime.relknow.predictor import LabelledPredictor, Predictor, Question
from lokg.runtime.relknow.reading import Reading
from lokg.runtime.relknow.spans import (ZERO_SHOT_SWAP, answer_type, span_readings,
                                        span_substitutes, span_words, weakest_hop,
                                        zero_shot_hops)
from lokg.runtime.relknow.vote_rules import (Appended, Bridged, KnnVote, PerHop, Ranged,
                                             Resized, RunsDecoded, Shortened, Typed)
from lokg.runtime.relknow.votes import Prediction, held_support


class Lexicon(LabelledPredictor):
    """The lexicon's chain: each word naming a relation (lift ≥ θ_lift) is one hop, and every
    order and direction of those hops is tried from the topic (``composition.predict_spans``).
    Answers where there is no kNN vote (no encoder); where no voted chain instantiates and
    the shortened votes have fewer hops; and where the question's words name more hops than
    the voted chain has and the composition walks them all (a 3-hop question over 2-hop
    training chains)."""

    name = "lexicon"

    def revise(self, q: Question, prediction: Prediction | None) -> Prediction | None:
        vote, composed = q.vote, None if q.vote_fits else q.composed
        if vote is None:
            return composed
        if composed is None or composed.chain is None:
            return None
        if vote.chain is None:
            if prediction.chain is not None:  # the shortened votes answered
                return None
            composed.support = held_support(vote.votes, composed.chain)
            composed.nearest, composed.stops = vote.nearest, vote.stops
            return composed
        if len(composed.chain) > len(vote.chain) and vote.relations <= composed.relations:
            composed.nearest = vote.nearest
            return composed
        return None


class ZeroShot(Predictor):
    """Knowledge fitted without labelled questions: question spans matched to relation names by
    the encoder (cosine ≥ θ_zs; a question no span names so reads its best span's relation),
    composed from the topic like the lexicon's hops, with the asked-for word's relations as
    the answer's kind and near relations as substitutes; where none of those instantiates,
    the walks the graph has from the topic, of at most a hop per content word of the spans,
    that read the spans best (any relation's cosine). Answers with an encoder."""

    name = "zero_shot"

    def predict(self, q: Question, prediction: Prediction | None) -> Prediction | None:
        know, embed = q.know, q.embed
        if know.labelled or embed is None or not know.relation_vectors.shape[1]:
            return None
        hops = zero_shot_hops(know, q.masked, embed, q.facts, q.topics) or \
            weakest_hop(know, q.masked, embed, q.facts, q.topics)
        spans = predict_spans(
            know, hops, q.masked, q.facts, q.topics, source=self.name,
            named=frozenset(h[3] for h in hops), answer_type=answer_type(know, q.masked, embed),
            asked_kind=answer_type(know, q.masked, embed, margin=ZERO_SHOT_SWAP),
            substitutes=functools.partial(span_substitutes, know, q.masked, embed, hops),
            readings=span_readings(know, q.masked, embed, hops))
        if spans.chain is not None or not len(q.topics):
            return spans
        reading = Reading(tuple(span_readings(know, q.masked, embed, hops, near=float("inf"))),
                          answer_type(know, q.masked, embed))
        walked = predict_walks(know, q.facts, q.topics, reading, span_words(hops, q.masked),
                               source=self.name, named=spans.named)
        return walked if walked.chain is not None else spans


class NoPrediction(Predictor):
    """Nothing predicts a chain: knowledge without labelled questions, asked without an
    encoder. Answers where no predictor before it did."""

    name = "none"

    def predict(self, q: Question, prediction: Prediction | None) -> Prediction | None:
        if prediction is not None:
            return None
        return Prediction(self.name, None, 0.0, 0.0, [], frozenset(), None,
                          "no labelled questions and no encoder")


#: The order the predictors answer in; each later one answers for or revises the prediction
#: of those before it.
CASCADE: tuple[Predictor, ...] = (
    KnnVote(), Shortened(), Resized(), Lexicon(), Bridged(), Appended(), RunsDecoded(), PerHop(),
    Typed(), Ranged(), ZeroShot(), NoPrediction())
#: What can predict a question's chain (:attr:`Prediction.source`), in cascade order.
PREDICTORS = tuple(p.name for p in CASCADE)


def predict(question: Question) -> Prediction:
    """The question's chain: each predictor of :data:`CASCADE` in turn answers or leaves the
    prediction so far standing."""
    prediction = None
    for predictor in CASCADE:
        prediction = predictor.predict(question, prediction) or prediction
    return prediction

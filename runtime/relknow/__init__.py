"""Relation knowledge: which relations a question asks for, and answers the graph already proves.

A question whose relation chain is known needs no LLM when the graph instantiates that chain:
the walk's endpoints are the answer. This package is the query-time half (numpy only, so the
runtime imports it without torch); ``training/relation_knowledge.py`` fits the artefact it
reads.

* :mod:`.artefact` — reading ``models/relknow`` (``relknow.json``, ``vectors.npz``);
* :mod:`.learned` — :class:`Learned`, what the build learned, resolved against the store;
* :mod:`.knowledge` — :class:`RelationKnowledge`, that knowledge assessing one question;
* :mod:`.cascade` — :data:`CASCADE`, the predictors in the order they answer (the kNN vote
  and its revisions in :mod:`.vote_rules`, the lexicon, the zero-shot matcher);
* :mod:`.facts`, :mod:`.derivation` — the store's facts by hop, and following a chain;
* :mod:`.checks` — consistency of a derived context, and the gates;
* :mod:`.lexicon`, :mod:`.spans`, :mod:`.composition` — the words and spans that name
  relations, and the chains composed from them (or walked from the topic);
* :mod:`.reading` — how well a chain reads a question without labelled questions (each
  span a hop of its own or the kind of entities reached), and the entities chains reach;
* :mod:`.votes` — chain votes, predictions and their support.
"""

from lokg.runtime.relknow.artefact import ARTEFACT, FORMAT_VERSION, MODEL_FILE, VECTORS_FILE
from lokg.runtime.relknow.cascade import CASCADE, PREDICTORS, predict
from lokg.runtime.relknow.checks import (Checker, Consistency, Gate, learn_exclusive,
                                         learn_functional, pair_signature, precision_gate)
from lokg.runtime.relknow.derivation import Derivation, HopDomains, derive, of_type
from lokg.runtime.relknow.facts import (INVERSE_PREFIX, Facts, RelknowError, Triple,
                                        canonical_hops, hop_id, hop_name, hop_relation,
                                        inverse_hop, learn_inverses, round_trip, split_hop)
from lokg.runtime.relknow.knowledge import Assessment, RelationKnowledge
from lokg.runtime.relknow.learned import HOP_RANGE_TRUST, Learned
from lokg.runtime.relknow.predictor import UNFAMILIAR_COSINE, Predictor, Question
from lokg.runtime.relknow.spans import ANSWER_TYPE_MARGIN, Embed, chosen_spans
from lokg.runtime.relknow.votes import (Prediction, Vote, composed_chains, held_support,
                                        hop_weights, tally, voted_length)

__all__ = [
    "ANSWER_TYPE_MARGIN", "ARTEFACT", "Assessment", "CASCADE", "Checker", "Consistency",
    "Derivation", "Embed", "FORMAT_VERSION", "Facts", "Gate", "HOP_RANGE_TRUST", "HopDomains",
    "INVERSE_PREFIX", "Learned", "MODEL_FILE", "PREDICTORS", "Prediction", "Predictor", "Question",
    "RelationKnowledge", "RelknowError", "Triple", "UNFAMILIAR_COSINE", "VECTORS_FILE", "Vote",
    "canonical_hops", "chosen_spans", "composed_chains", "derive", "held_support", "hop_id",
    "hop_name", "hop_relation", "hop_weights", "inverse_hop", "learn_exclusive",
    "learn_functional", "learn_inverses", "of_type", "pair_signature", "precision_gate",
    "predict", "round_trip", "split_hop", "tally", "voted_length",
]

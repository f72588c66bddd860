"""What the ``relation_knowledge`` stage learned, resolved against the store's canonical
relations: the training chains and question vectors, the lexicon, the relation vectors, the
thresholds and gates fitted on dev, and the KG's functional, exclusive and inverse relations."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Self

import numpy as np

from lokg.runtime.encoder import distinct_codes
from lokg.runtime.linker import STOP_WORDS
from lokg.runtime.question_text import HOP_READINGS, relation_text
from lokg.runtime.relknow.artefact import (check_arrays, check_format, read_artefact,
                                           relation_id)
from lokg.runtime.relknow.checks import Checker, Gate, precision_gate
from lokg.runtime.relknow.facts import RelknowError, canonical_hops, hop_id

#: Share of a store's training questions whose chain length a reading must allow for the
#: runtime to bound chains by it (``vote_rules.Ranged``): a graph whose questions fold hops
#: into one word ("grandmother") or a verb ("where does X's son work") gets none.
HOP_RANGE_TRUST = 0.99


class Learned:
    """The ``models/relknow`` artefact, resolved against the store's canonical relations."""

    def __init__(self, spec: Mapping, arrays: Mapping[str, np.ndarray],
                 relation_ids: Mapping[str, int], where: str = "relknow"):
        check_format(spec, where)
        rel = functools.partial(relation_id, relation_ids, where)
        self.spec = dict(spec)
        self.n_relations = max(relation_ids.values(), default=-1) + 1
        self._settings(spec)
        self.chains = [tuple(hop_id(n, rel, self.n_relations) for n in chain)
                       for chain in spec["chains"]]
        self.lexicon = {w: {rel(n): float(x) for n, x in entries.items()}
                        for w, entries in spec["lexicon"].items()}
        self.prior = {rel(n): float(p) for n, p in spec.get("relation_prior", {}).items()}
        self.checker = Checker([rel(n) for n in spec["functional"]],
                               [(rel(a), rel(b), bool(same)) for a, b, same in spec["exclusive"]])
        self.question_vectors = np.asarray(arrays["question_vectors"], dtype=np.float32)
        self.question_chain = np.asarray(arrays["question_chain"], dtype=np.int64)
        self.relation_vectors = np.asarray(arrays["relation_vectors"], dtype=np.float32)
        self.canonical = canonical_hops([(rel(a), rel(b)) for a, b in
                                         spec.get("inverse_pairs", ())], self.n_relations)
        self.relation_order = [rel(n) for n in spec["relation_names"]]
        #: each relation's column in relation_vectors and in span_similarities' rows
        self.relation_column = {r: i for i, r in enumerate(self.relation_order)}
        self.name_words = {rel(n): frozenset(relation_text(n).split())
                           for n in spec["relation_names"]}
        self._described: tuple[list[str], np.ndarray] | None = None  # described_by, on first use
        self._distinct: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # on first use
        self.hop_reading = trusted_reading(spec.get("hop_range_agreement") or {})
        check_arrays(self.question_vectors, self.question_chain, len(self.chains),
                     self.relation_vectors, len(self.relation_order), where)

    def _settings(self, spec: Mapping) -> None:
        """The stage's settings and the thresholds and gates picked on dev."""
        settings = spec["settings"]
        self.k = int(settings["k"])
        self.min_share = float(settings["min_share"])
        self.max_frontier = int(settings["max_frontier"])
        thresholds = spec["thresholds"]
        self.lift_threshold = float(thresholds["lift"])
        self.zero_shot_cosine = float(thresholds["zero_shot_cosine"])
        self.precision_gate = precision_gate(thresholds["precision"])
        self.calibration = calibration(self.precision_gate, spec.get("fit") or {})

    @classmethod
    def load(cls, directory: str | Path, relation_ids: Mapping[str, int]) -> Self:
        spec, arrays, where = read_artefact(directory)
        try:
            return cls(spec, arrays, relation_ids, where)
        except KeyError as exc:
            raise RelknowError(f"{where}: key {exc} missing") from None

    @property
    def labelled(self) -> bool:
        """Fitted from labelled questions (else only the zero-shot matcher predicts chains)."""
        return len(self.question_chain) > 0

    @property
    def votes_by_question_vector(self) -> bool:
        """Whether ``assess`` reads the masked question's vector (the kNN vote of labelled
        knowledge fitted with an encoder): the zero-shot matcher embeds spans instead."""
        return self.labelled and bool(self.question_vectors.shape[1])

    def names(self, words: Iterable[str], threshold: float | None = None) -> frozenset[int]:
        """Relations some word names with lift ≥ the threshold (θ_lift from dev by default)."""
        theta = self.lift_threshold if threshold is None else threshold
        return frozenset(r for w in words for r, lift in self.lexicon.get(w, {}).items()
                         if lift >= theta)

    def described_by(self) -> tuple[list[str], np.ndarray]:
        """(words, their relation's column in relation order) of the lexicon's content words,
        each for its most probable relations (:meth:`word_relations`, all that tie)."""
        if self._described is None:
            column = self.relation_column
            pairs = [(w, column[r]) for w in sorted(self.lexicon) if w not in STOP_WORDS
                     for p, _, r in self.word_relations(w)
                     if p == self.word_relations(w)[0][0] and r in column]
            self._described = ([w for w, _ in pairs],
                               np.array([c for _, c in pairs], dtype=np.int64))
        return self._described

    def distinct_relation_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """(each distinct row of ``relation_vectors`` once, each relation's row among them):
        relations whose names embed alike — a documents store's free-text phrases repeat
        across relations — are scored once per question span."""
        vectors = self.relation_vectors
        if self._distinct is None or self._distinct[0] is not vectors:
            _, codes = distinct_codes([row.tobytes() for row in vectors])
            first = np.unique(codes, return_index=True)[1]
            self._distinct = (vectors, np.ascontiguousarray(vectors[first]), codes)
        return self._distinct[1], self._distinct[2]

    def word_relations(self, word: str) -> list[tuple[float, float, int]]:
        """(P(r | word), lift, r) of the relations a word names (lift ≥ θ_lift), most probable
        first, ties by lift (lift alone favours rare relations)."""
        return sorted(((round(lift * self.prior.get(r, 0.0), 4), lift, r)  # lift, prior
                       # are stored rounded: equal probabilities must tie
                       for r, lift in self.lexicon.get(word, {}).items()
                       if lift >= self.lift_threshold), key=lambda x: (-x[0], -x[1], x[2]))


def trusted_reading(agreement: Mapping[str, float]) -> str | None:
    """How the store's training questions name their hops: the tightest of ``HOP_READINGS``
    that allows their chain lengths for :data:`HOP_RANGE_TRUST` of them (None: none does, the
    knowledge was fitted before it was measured, or without labelled questions)."""
    return next((r for r in HOP_READINGS if agreement.get(r, 0.0) >= HOP_RANGE_TRUST), None)


def calibration(gate: Gate, fit: Mapping) -> dict:
    """How the zero-call gate was calibrated, as every routed answer states it: on this
    store's labelled dev questions (how many, how many it passed, the H@1 of those and its 95 %
    Wilson interval; none passed where no gate reached the precision floor on them), or on
    nothing — then it passes nothing: a precision no labelled question of this graph measured
    is no promise to make."""
    selection = fit.get("selection")
    stats = selection.get("precision_gate") if isinstance(selection, Mapping) else None
    if not stats:
        return {"by": "none", "questions": 0, "passed": 0, "precision": None,
                "precision_95ci": None}
    fitted = gate.max_answers >= 1
    return {"by": "dev questions of this store", "questions": stats.get("n"),
            "passed": stats.get("passed") if fitted else 0,
            "precision": stats.get("precision") if fitted else None,
            "precision_95ci": stats.get("precision_95ci") if fitted else None}

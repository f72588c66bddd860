"""Checks and gates. A derived context is inconsistent when a *functional* relation (≤ 1 object
per subject, learned from the KG) has two values for one subject, or two facts join one entity
pair with *exclusive* relations (they rarely share a pair in the KG: a parents b and a children
b); with the store's facts, every fact joining two entities of the context counts.

A :class:`Gate` lets a derived answer stand without the reader: the chain instantiates with at
most m answers, share ≥ τ, support ≥ σ, a consistent context and, optionally, every chain
relation named by the lexicon. The precision gate is m = 1 on familiar wording whose every
content word the chain explains; its (τ, σ) are picked on dev by
``training/relation_knowledge.py`` (without dev questions it passes nothing). It is the one
gate of a zero-call answer, under policy precision and route alike."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from lokg.runtime.relknow.facts import Facts, Triple

if TYPE_CHECKING:
    from lokg.runtime.relknow.derivation import Derivation
    from lokg.runtime.relknow.votes import Prediction


def pair_signature(f1: Triple, f2: Triple) -> tuple[int, int, bool]:
    """(smaller relation, larger relation, same direction) of two facts on one entity pair."""
    same = f1[0] == f2[0]
    return (min(f1[1], f2[1]), max(f1[1], f2[1]), same)


@dataclass
class Consistency:
    ok: bool
    issues: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


class Checker:
    """Functional relations and exclusive relation pairs, and the check of a context."""

    def __init__(self, functional: Iterable[int], exclusive: Iterable[tuple[int, int, bool]]):
        self.functional = frozenset(int(r) for r in functional)
        self.exclusive = frozenset((int(a), int(b), bool(s)) for a, b, s in exclusive)

    def check(self, context: Sequence[Triple], facts: Facts | None = None) -> Consistency:
        """Flag a functional relation with two values for one subject (in the context, or in
        the store for a subject the context uses it on, when ``facts`` is given) and two facts
        on one entity pair with exclusive relations (with ``facts``, every store fact joining
        the two entities of a context fact counts: a second path between them)."""
        issues: list[dict] = []
        context = list(dict.fromkeys(tuple(int(x) for x in t) for t in context))
        values: dict[tuple[int, int], set[int]] = {}
        for s, r, o in context:
            if r in self.functional:
                values.setdefault((s, r), set()).add(o)
        for (s, r), objs in values.items():
            if facts is not None:
                objs = objs | set(facts.objects(s, r).tolist())
            if len(objs) > 1:
                issues.append({"kind": "functional", "subject": s, "relation": r,
                               "objects": sorted(objs)})
        pairs: dict[tuple[int, int], set[Triple]] = {}
        for t in context:
            if t[0] != t[2]:
                pairs.setdefault((min(t[0], t[2]), max(t[0], t[2])), set()).add(t)
        for group in self._with_store_facts(pairs, facts):
            for f1, f2 in itertools.combinations(sorted(group), 2):
                if pair_signature(f1, f2) in self.exclusive:
                    issues.append({"kind": "contradiction", "facts": [list(f1), list(f2)]})
        return Consistency(not issues, issues)

    @staticmethod
    def _with_store_facts(pairs: dict[tuple[int, int], set[Triple]], facts: Facts | None
                          ) -> list[set[Triple]]:
        """Each pair's context facts, with every store fact joining the pair when ``facts``
        is given (one :meth:`Facts.joining` for all the pairs)."""
        groups = list(pairs.values())
        if facts is None or not pairs:
            return groups
        parent, triples = facts.joining(*np.array(list(pairs), dtype=np.int64).T)
        for i, t in zip(parent.tolist(), triples.tolist()):
            groups[i].add(tuple(t))
        return groups


def learn_functional(s, r, o, *, tolerance: float, min_subjects: int) -> tuple[list[int], dict]:
    """Relations with ≤ 1 object per subject on all but a ``tolerance`` share of their subjects
    (at least ``min_subjects`` subjects); and per relation (subjects, subjects with several)."""
    s, r, o = (np.asarray(x, dtype=np.int64) for x in (s, r, o))
    if not len(s):
        return [], {}
    sr, counts = np.unique(np.stack([r, s], axis=1), axis=0, return_counts=True)
    rels, inverse = np.unique(sr[:, 0], return_inverse=True)
    subjects = np.bincount(inverse)
    multi = np.bincount(inverse, weights=counts > 1).astype(np.int64)
    keep = (subjects >= min_subjects) & (multi <= tolerance * subjects)
    stats = {int(x): (int(n), int(m)) for x, n, m in zip(rels, subjects, multi)}
    return sorted(int(x) for x in rels[keep]), stats


def learn_exclusive(s, r, o, *, tolerance: float, min_support: int
                    ) -> tuple[list[tuple[int, int, bool]], dict]:
    """Relation pairs that join one entity pair on at least one but at most a ``tolerance``
    share of the rarer relation's facts (which has ≥ ``min_support``): the few joint pairs are
    contradictions (pairs that never co-occur can never meet in a context of this KG)."""
    s, r, o = (np.asarray(x, dtype=np.int64) for x in (s, r, o))
    off = s != o
    s, r, o = s[off], r[off], o[off]
    if not len(s):
        return [], {"pairs_with_several_facts": 0}
    a, b = np.minimum(s, o), np.maximum(s, o)
    order = np.lexsort((s, r, b, a))
    a, b, s, r = a[order], b[order], s[order], r[order]
    n_facts = np.bincount(r)
    first = np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1])]
    several = int((np.diff(np.r_[np.flatnonzero(first), len(a)]) > 1).sum())
    joint: dict[tuple[int, int, bool], set[tuple[int, int]]] = {}
    gap = 1
    while gap < len(a):
        i = np.flatnonzero((a[gap:] == a[:-gap]) & (b[gap:] == b[:-gap]))
        if not len(i):
            break
        j = i + gap
        for x, y in zip(i.tolist(), j.tolist()):
            sig = pair_signature((int(s[x]), int(r[x]), 0), (int(s[y]), int(r[y]), 0))
            joint.setdefault(sig, set()).add((int(a[x]), int(b[x])))
        gap += 1
    out = []
    for (r1, r2, same), pairs in joint.items():
        rarer = min(int(n_facts[r1]), int(n_facts[r2]))
        if rarer >= min_support and len(pairs) <= tolerance * rarer:
            out.append((r1, r2, same))
    return sorted(out), {"pairs_with_several_facts": several, "signatures": len(joint)}


@dataclass(frozen=True)
class Gate:
    """Passes when a chain instantiates with 1..``max_answers`` endpoints, none of them a
    topic (a walk back to what the question is about answers nothing it asked), its share of
    the instantiating votes ≥ ``min_share`` and of all votes ≥ ``min_support``, the derived
    context is consistent and (with ``lexicon``) the question names every chain relation."""

    max_answers: int
    min_share: float
    min_support: float = 0.0
    lexicon: bool = False
    #: only wording some training question is near (:attr:`Prediction.unfamiliar` false): the
    #: thresholds were fitted on dev questions in the training wording, and say nothing of
    #: a vote on phrases none of them used
    familiar: bool = False
    #: only chains that explain every content word of the question
    #: (:attr:`Prediction.unexplained` empty): dev questions have as many hops as their
    #: training questions, and say nothing of a question the votes follow a hop short
    explained: bool = False

    def check(self, prediction: Prediction, derivation: Derivation | None,
              consistency: Consistency | None) -> tuple[bool, str]:
        if self.max_answers < 1:
            return False, ("the gate passes nothing (max_answers 0: no dev questions, or none "
                           "that showed a precision it could promise)")
        if prediction.chain is None or derivation is None or not derivation.derivable:
            return False, f"no chain instantiates ({prediction.reason or prediction.source})"
        if prediction.share < self.min_share:
            return False, f"vote share {prediction.share:.2f} < {self.min_share:.2f}"
        if prediction.support < self.min_support:
            return False, f"vote support {prediction.support:.2f} < {self.min_support:.2f}"
        if consistency is not None and not consistency.ok:
            return False, f"inconsistent context ({len(consistency.issues)} issue(s))"
        n = len(derivation.endpoints)
        if set(derivation.endpoints) & set(derivation.topics):
            return False, "the walk ends on the topic itself"
        if n > self.max_answers:
            return False, f"{n} derived answers > {self.max_answers}"
        if self.lexicon and not prediction.relations <= prediction.named:
            return False, "the question does not name every chain relation (lexicon)"
        if self.familiar and prediction.unfamiliar:
            return False, "wording no training question is near (thresholds fitted on familiar)"
        if self.explained and prediction.unexplained:
            return False, ("words no hop of the chain explains: "
                           + ", ".join(prediction.unexplained))
        return True, (f"chain derivable with {n} answer(s), vote share {prediction.share:.2f}"
                      + (", named by the lexicon" if self.lexicon else ""))

    def to_dict(self) -> dict:
        return asdict(self)


def precision_gate(thresholds: Mapping) -> Gate:
    """The precision gate of some thresholds: one answer, familiar wording, every content word
    explained by the chain (``familiar``, ``explained``; also for knowledge fitted before
    those rules)."""
    return Gate(**{"max_answers": 1, "familiar": True, "explained": True, **thresholds})

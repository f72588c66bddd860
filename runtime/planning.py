"""Planning: what the relation knowledge decides for one question, once, before retrieval.

On a store with relation knowledge (runtime/relknow.py) the plan may be the answer itself (a
passed gate, or policy precision's abstention); otherwise every later step reads what it
decided: the compact context, the query-relation term, the boosted facts. The question is
embedded here with every linked mention masked, in one encoder batch with the plain form when
retrieval will want that too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from lokg.runtime import feedback, relknow
from lokg.runtime.path_cache import PathRow
from lokg.runtime.question_text import hop_runs, mask_topic
from lokg.runtime.relknow import Triple
from lokg.runtime.request import Request

NO_RELATION_KNOWLEDGE = "the store has no relation knowledge (stage relation_knowledge)"


@dataclass(frozen=True)
class RelationPlan:
    """What the relation knowledge decided for one question, once, before retrieval; the later
    steps read it instead of re-deriving it. The default is "not consulted" (policy lokg with
    the feeds off, or a store without relation knowledge)."""

    knowledge: relknow.RelationKnowledge | None = None
    assessment: relknow.Assessment | None = None
    route: dict | None = None  # Answer.route before the read; None: not consulted
    passed: bool = False  # the policy's gate passed: the derived endpoints are the answer
    final: bool = False  # the plan is the answer: passed, or policy precision abstains
    compact: bool = False  # policy route short of the gate: read the derived chain's facts
    beside: bool = False  # compact, and the retrieval context after them (query.deferred_context)
    relation_weight: float = 0.0  # λ_rel of the query-relation term (0: no term)
    boosted: tuple[Triple, ...] = ()  # the derived chain's facts: in the context, in focus

    def relation_term(self, path: PathRow) -> float:
        """λ_rel·q_rel(p), added to a path's S_topo to rank its endpoint."""
        return self.relation_weight * self.knowledge.relation_term(
            self.assessment.prediction, path[1], path[2])


def wants_question_vector(runtime, req: Request, q_vec: np.ndarray | None) -> bool:
    """Whether retrieval ranks with cos(enc(q), enc(a)) and has no question vector yet."""
    semantic = req.retrieval == "similarity" or float(runtime.settings["lambda_q"]) != 0.0
    return (q_vec is None and semantic and req.retrieval != "neighbourhood"
            and runtime.vectors is not None)


def derived_retrieves(settings: dict, key: str = "derived_context") -> bool:
    """Whether a derived chain's context holds retrieval's facts beside its chain's: a
    derived answer's (``derived_context``), a deferred question's (``deferred_context``)."""
    return settings[key] == "retrieval"


class Planner:
    """The relation plan of one question over an opened build (runtime/opened.py)."""

    def __init__(self, runtime):
        self.runtime = runtime

    def plan(self, req: Request, heads: list[int], topics: list[int],
             linked_vec: np.ndarray | None) -> tuple[RelationPlan, np.ndarray | None]:
        """The relation knowledge's view of the question, for the two policies that may answer
        from the graph and for the relation feeds; and the plain question's vector when
        retrieval may want it (embedded in the same batch as the masked question). The
        question is embedded with every linked mention masked; chains are derived from
        ``topics`` (the links the question spells exactly, linker.spelled_topics); without
        the encoder a labelled store still predicts from the lexicon."""
        rt = self.runtime
        feeds = req.relation_weight or req.chain_boost
        if req.policy == "lokg" and not (feeds and rt.relknow is not None):
            return RelationPlan(), None
        if rt.relknow is None:
            source = "abstain" if req.policy == "precision" else None
            return RelationPlan(route={"source": source, "reason": NO_RELATION_KNOWLEDGE},
                                final=req.policy == "precision"), None
        know, facts = rt.relknow
        forms = [f for h in heads for f in rt.surface_forms(h)]
        masked = mask_topic(req.question, forms)
        masked_vec, batch_vec = self._embed_questions(req, know, masked, linked_vec)
        answers_from_graph = req.policy != "lokg"
        assessment = know.assess(masked, topics, facts, q_vec=masked_vec,
                                 embed=rt.span_embedder(), domains=rt.hop_domains(),
                                 explain=answers_from_graph, runs=hop_runs(req.question, forms))
        gate = know.precision_gate  # the one gate a zero-call answer passes, whatever the policy
        passed, reason = gate.check(assessment.prediction, assessment.derivation,
                                    assessment.consistency) if answers_from_graph else (False, "")
        d = assessment.derivation
        compact = req.policy == "route" and d is not None
        return RelationPlan(
            knowledge=know, assessment=assessment,
            route={**self._route_record(req.policy, gate, assessment, passed, reason),
                   "topics": [rt.keys[e] for e in topics]},
            passed=passed, final=passed or req.policy == "precision",
            compact=compact, beside=compact and not passed and derived_retrieves(
                rt.settings, "deferred_context"), relation_weight=req.relation_weight,
            boosted=tuple(d.facts) if req.chain_boost and d is not None else ()), batch_vec

    def _embed_questions(self, req: Request, know, masked: str,
                         linked_vec: np.ndarray | None) -> tuple[np.ndarray | None,
                                                                 np.ndarray | None]:
        """(masked question's vector, plain question's vector), each None when not wanted:
        the masked form when the relation knowledge votes by question vector."""
        rt = self.runtime
        # the plain form rides along when the masked one is embedded (a derived answer
        # retrieves beside its chain unless query.derived_context is "chain"); alone it waits
        # for retrieval, which the compact context never runs
        by_vector = know.votes_by_question_vector
        with_plain = by_vector and wants_question_vector(rt, req, linked_vec) and (
            req.policy != "precision" or derived_retrieves(rt.settings))
        return rt.embed(masked if by_vector else None, req.question if with_plain else None)

    def _route_record(self, policy: str, gate: relknow.Gate, assessment: relknow.Assessment,
                      passed: bool, reason: str) -> dict:
        """Answer.route as the plan leaves it: the prediction, the derivation, the gate."""
        rt = self.runtime
        pred, d, cons = assessment.prediction, assessment.derivation, assessment.consistency
        name = rt.relation_name

        def hops(chain):
            return [relknow.hop_name(h, name, rt.n_relations) for h in chain]

        return {
            "source": ("derived" if passed else "abstain" if policy == "precision" else None),
            "reason": reason, "predictor": pred.source, "encoder": rt.encoder_error,
            "chain": hops(pred.chain) if pred.chain else None,
            "vote_share": round(pred.share, 6), "vote_support": round(pred.support, 6),
            "votes": [{"chain": hops(v.chain), "weight": round(v.weight, 6),
                       "derivable": v.derivable} for v in pred.votes[:5]],
            "named_relations": sorted(name(r) for r in pred.named),
            "unexplained": list(pred.unexplained),  # looked for under precision only
            "derivable": bool(d is not None and d.derivable),
            "derived": [rt.names[e] for e in d.endpoints[:10]] if d is not None else [],
            "derived_count": len(d.endpoints) if d is not None else 0,
            "consistency": cons.to_dict() if cons is not None else None,
            "flagged": bool(cons is not None and not cons.ok),
            "gate": {"name": "precision", **gate.to_dict(), "passed": passed,
                     "calibration": rt.relknow[0].calibration},
            "masked_question": assessment.masked,
            "hop_runs": [list(run) for run in assessment.runs.runs] if assessment.runs else None,
            "stopped": self._stopped(pred.stops, hops),
        }

    def _stopped(self, stops: Sequence[relknow.Derivation], hops: Callable) -> dict | None:
        """Where the best-voted chain whose walk stopped at a plausible gap found no fact (no
        voted chain instantiated; a shorter chain may have answered): the hop, and the entities
        it had reached whose types start that hop elsewhere in the graph — the missing facts of
        the feedback log. A stop no entity of those types could fill (an ill-typed vote) is no
        gap; None when every stop is one."""
        rt = self.runtime
        domains = rt.hop_domains() if stops else None
        for d in stops:
            hop = d.chain[d.stop_hop]
            lacking = [e for e in d.stop_from if domains.fits(e, hop)]
            if lacking:
                return {"chain": hops(d.chain), "at": d.stop_hop + 1,
                        "hop": hops(d.chain)[d.stop_hop], "from_count": len(lacking),
                        "from": [{"key": rt.keys[e], "name": rt.names[e]}
                                 for e in lacking[:feedback.MAX_MISSING]]}
        return None

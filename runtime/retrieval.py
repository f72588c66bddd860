"""Retrieval: the candidate answers of one question and the candidate set of triples.

``taimr`` (default): the cached top paths of each linked head (cold heads are computed on
demand by the same scorer the offline job used, runtime/taimr.py); every entity reached is a
candidate answer ranked by S_final = S_topo(best path) + λ_q·cos(enc(q), enc(a)) (the semantic
term needs the encoder extra; without it S_final = S_topo and the Answer says so); the triples
supporting the best paths of the top ``max_candidates`` candidates form the candidate set.
``similarity`` (ablation "w/o TAIMR") ranks the same reachable entities by the cosine alone;
``neighbourhood`` (baseline) takes the linked entities' 1-hop triples; a plan's compact
context (runtime/planning.py) is the derived chain's facts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from lokg.runtime.path_cache import PathRow, path_triples
from lokg.runtime.planning import RelationPlan, wants_question_vector
from lokg.runtime.relknow import Triple
from lokg.runtime.request import QueryError, Request


@dataclass(frozen=True)
class Candidate:
    """One candidate answer: the entity, its scores and the best path that reaches it."""

    id: int
    name: str
    s_final: float
    s_topo: float
    cos: float
    path: tuple[int, PathRow] | None = None  # (head, best path); None for a derived endpoint

    @property
    def triples(self) -> list[Triple]:
        """The KG triples of the best path (none for a derived endpoint)."""
        return path_triples(*self.path) if self.path is not None else []

    def to_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "s_final": self.s_final,
                "s_topo": self.s_topo, "cos": self.cos}


@dataclass(frozen=True)
class Retrieval:
    """Retrieval's result: the ranked candidate answers and the candidate set of triples, each
    with its retrieval score (the S_final of the candidate whose path brought it first)."""

    candidates: list[Candidate]
    triples: list[Triple]
    scores: list[float]
    sources: dict[int, str]  # head → cache | computed
    semantic: bool  # a question vector was at hand (Answer.encoding.semantic)
    #: stores built from documents: the ranked chunks' rows and ranking scores, best first
    passages: tuple[list[int], list[float]] = ([], [])
    question: np.ndarray | None = None  # the question's vector (None: none at hand)


def paths_triples(candidates: list[Candidate]) -> dict[Triple, float]:
    """The triples of the candidates' best paths, each once, with the S_final of the first
    (best) candidate that walks it, in candidate order."""
    first: dict[Triple, float] = {}
    for c in candidates:
        for t in c.triples:
            first.setdefault(t, c.s_final)
    return first


class Retriever:
    """Retrieval over an opened build (runtime/opened.py)."""

    def __init__(self, runtime):
        self.runtime = runtime

    def question_vector(self, req: Request, plan: RelationPlan, linked_vec: np.ndarray | None,
                        batch_vec: np.ndarray | None) -> np.ndarray | None:
        """The plain question's vector for the semantic term: linking's, else the relation
        plan's batch's, else embedded now. The chain's facts alone rank nothing: they keep
        linking's alone."""
        if plan.compact and not plan.beside:
            return linked_vec
        rt = self.runtime
        q_vec = linked_vec
        if wants_question_vector(rt, req, q_vec):
            q_vec = batch_vec if batch_vec is not None else rt.embed(None, req.question)[1]
        if req.retrieval == "similarity" and q_vec is None:
            why = rt.encoder_error if rt.encoder() is None else "no entity vectors"
            raise QueryError(f"retrieval 'similarity' needs the store's encoder ({why})")
        return q_vec

    def retrieve(self, req: Request, heads: list[int], q_vec: np.ndarray | None,
                 plan: RelationPlan) -> Retrieval:
        """The candidate answers and the candidate set: the derived chain's facts and endpoints
        (compact), the linked entities' 1-hop triples (neighbourhood), or the triples of the
        top candidates' best paths (taimr, similarity); then the boosted chain facts and, in a
        store built from documents, the triples of the ``query.passages`` chunks nearest the
        question (dense passage retrieval seeds what the paths from the links cannot reach), and
        the 1-hop triples of the top candidates' qualified forms (a split bridge's next hop)."""
        rt = self.runtime
        semantic, sources = q_vec is not None, {}
        if plan.compact:
            d = plan.assessment.derivation
            candidates = [Candidate(e, rt.names[e], float(w), 0.0, 0.0)
                          for w, e in zip(d.walks, d.endpoints)]
            triples, scores = list(d.facts), [1.0] * len(d.facts)
            sources = self._beside(heads, q_vec, req, plan, triples, scores)
        elif req.retrieval == "neighbourhood":
            candidates, triples = [], rt.neighbourhood(heads)
            scores = [0.0] * len(triples)
        else:
            candidates, sources = self.rank(heads, q_vec, req.retrieval, plan)
            first = paths_triples(candidates)
            triples, scores = list(first), list(first.values())
        extra = list(plan.boosted) if triples else []
        ranked: tuple[list[int], list[float]] = ([], [])
        if req.retrieval != "neighbourhood":  # a derived chain's context may offer passages too
            ranked = self._ranked_passages(heads, q_vec, req)
        if not plan.compact and req.retrieval != "neighbourhood":
            extra += rt.provenance.triples_of(ranked[0][:int(rt.settings["passages"])])
            extra += self._qualified_neighbourhood(candidates)
        if triples and extra:
            present = set(triples)
            extra = [f for f in dict.fromkeys(extra) if f not in present]
            triples, scores = triples + extra, scores + [min(scores)] * len(extra)
        return Retrieval(candidates, triples, scores, sources, semantic, ranked, q_vec)

    def _ranked_passages(self, heads: list[int], q_vec: np.ndarray | None, req: Request
                         ) -> tuple[list[int], list[float]]:
        """The rows and scores of the chunks chosen as ``query.passage_ranking`` says, as many
        as ``query.passages`` (their triples join the candidate set) or the request's passage
        items need: nearest the question, or ranked by the passage graph from the links and
        the dense scores (which ranks from the links alone without a question vector)."""
        rt = self.runtime
        n = max(int(rt.settings["passages"]), req.passage_items)
        return rt.provenance.ranked_passages(q_vec, heads, n,
                                             graph=rt.settings["passage_ranking"] == "graph")

    def _beside(self, heads: list[int], q_vec: np.ndarray | None, req: Request,
                plan: RelationPlan, triples: list[Triple], scores: list[float]) -> dict:
        """Adds to a derived chain's facts (``triples``, ``scores``, in place) the ranked
        retrieval's, after them and scored below them, so that the knowledge holds the chain's
        evidence first and what retrieval found in the rest of the budget — a reader's
        second chance where the chain is wrong; returns the retrieval's path sources."""
        if not plan.beside or req.retrieval == "neighbourhood":
            return {}
        candidates, sources = self.rank(heads, q_vec, req.retrieval, replace(plan, compact=False))
        present = set(triples)
        beside = [t for t in paths_triples(candidates) if t not in present]
        triples += beside
        scores += [0.0] * len(beside)
        return sources

    def rank(self, heads: list[int], q_vec: np.ndarray | None, retrieval: str,
             plan: RelationPlan) -> tuple[list[Candidate], dict[int, str]]:
        """The top ``max_candidates`` entities the heads' fact paths reach, best S_final first,
        then the top ``bridge_candidates`` that only paths through a feedback bridge reach, and
        where each head's paths came from. S_final = S_topo (+ the query-relation term) +
        λ_q·cos, or the cosine alone for ``similarity``. Bridges rank apart so that a linked
        name's many bridge edges never take the places of its facts' answers."""
        rt = self.runtime
        facts: dict[int, tuple[float, int, PathRow]] = {}
        bridged: dict[int, tuple[float, int, PathRow]] = {}
        sources = {}
        term = plan.relation_weight and plan.relation_term
        linked = set(heads)
        for h in heads:
            paths, sources[h] = rt.paths(h)
            for p in paths:
                a = p[3][-1]
                if a in linked:
                    continue
                key = p[0] + term(p) if term else p[0]
                best = bridged if rt.bridge_relations.intersection(p[1]) else facts
                held = best.get(a)
                if held is None or key > held[0]:
                    best[a] = (key, h, p)
        top = self._by_final(facts, q_vec, retrieval)[: int(rt.settings["max_candidates"])]
        kept = {c.id for c in top}
        more = [c for c in self._by_final(bridged, q_vec, retrieval) if c.id not in kept]
        return top + more[: int(rt.settings["bridge_candidates"])], sources

    def _by_final(self, best: dict[int, tuple[float, int, PathRow]], q_vec: np.ndarray | None,
                  retrieval: str) -> list[Candidate]:
        """Candidates from each entity's best (key, head, path), best S_final first."""
        rt = self.runtime
        lam = float(rt.settings["lambda_q"])
        ranked = []
        for a, (key, h, p) in best.items():
            cos = float(rt.vectors[a] @ q_vec) if q_vec is not None else 0.0
            ranked.append((cos if retrieval == "similarity" else key + lam * cos, a, cos, h, p))
        ranked.sort(key=lambda c: (-c[0], c[1]))
        return [Candidate(a, rt.names[a], final, p[0], cos, (h, p))
                for final, a, cos, h, p in ranked]

    def _qualified_neighbourhood(self, candidates: list[Candidate]) -> list[Triple]:
        """The 1-hop triples of the qualified forms of the top ``focus_candidates`` names: a
        graph extracted from documents splits a bridge ("Fredericton, New Brunswick", where
        the question's person was born) from the name that holds its next hop
        ("Fredericton, New Brunswick, Canada", where the diocese is). None where the linker
        links no qualified forms (``query.qualified_links`` 0, a curated KG)."""
        rt = self.runtime
        if not rt.linker.max_qualified:
            return []
        top = candidates[: int(rt.settings["focus_candidates"])]
        forms = [e for c in top for e in rt.linker.qualified_forms_of(rt.names[c.id])]
        return rt.neighbourhood(list(dict.fromkeys(forms)))

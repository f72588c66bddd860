"""The knowledge context of one question: the candidate set encoded under the budget.

``ittc`` (default): ITTC under the knowledge budget B (runtime/ittc.py; σ* and H(O|R) come
with the build, runtime/query_stats.py); ``uniform`` (ablation "w/o ITTC"): every triple at
the balanced template in s-r-o order, cut by rank to fit B. The lines ITTC kept become
Answer.triples and, in a store built from documents, Answer.citations; there the request's
``passage_items`` best-ranked chunks are offered to ITTC beside the triples
(runtime/passage_items.py), and the ones it emits become Answer.passages.
"""

from __future__ import annotations

from lokg.runtime import ittc
from lokg.runtime.passage_items import passage_items, passage_records, sentence_question
from lokg.runtime.planning import RelationPlan
from lokg.runtime.relknow import Triple
from lokg.runtime.request import Request
from lokg.runtime.retrieval import Retrieval


class ContextEncoder:
    """The candidate set as ITTC knowledge over an opened build (runtime/opened.py)."""

    def __init__(self, runtime):
        self.runtime = runtime

    def encode(self, req: Request, heads: list[int], found: Retrieval, plan: RelationPlan
               ) -> tuple[list[ittc.KnowledgeTriple], ittc.Encoding]:
        """The candidate set as ITTC knowledge — the linked entities, the top candidates and
        the boosted chain facts in focus — encoded under the budget."""
        rt = self.runtime
        top = found.candidates[: int(rt.settings["focus_candidates"])]
        focus = set(heads) | {c.id for c in top}
        sentences = rt.provenance.sentence if req.source_sentences else {}
        knowledge = self._knowledge(found.triples, found.scores, focus, set(plan.boosted),
                                    sentences)
        if req.encoding != "ittc":
            return knowledge, ittc.encode_uniform(knowledge, req.budget)
        rows, scores = found.passages if rt.provenance.extracted else ([], [])
        rows, scores = rows[:req.passage_items], scores[:req.passage_items]
        matched = sentence_question(rt.provenance, rows, found.question,
                                    rt.settings["passage_sentences"])
        offered = passage_items(rt.provenance, rows, scores, found.triples, matched)
        return knowledge, ittc.encode(knowledge, req.budget, rt.order, passages=offered)

    def _knowledge(self, triples: list[Triple], scores: list[float], focus: set[int],
                   boosted: set[Triple], sentences: dict[Triple, str]
                   ) -> list[ittc.KnowledgeTriple]:
        rt = self.runtime
        fields = {e: rt.entity_fields(e) for t in triples for e in (t[0], t[2])}
        out = []
        for rank, ((s, r, o), score) in enumerate(zip(triples, scores)):
            st, sd, sa, sx = fields[s]
            ot, od, oa, ox = fields[o]
            out.append(ittc.KnowledgeTriple(
                subject=rt.names[s], relation=rt.relation_name(r),
                object=rt.names[o], rank=rank, score=float(score),
                tail_entropy=float(rt.tail_entropy[r]) if r < len(rt.tail_entropy) else 0.0,
                focus=s in focus or o in focus or (s, r, o) in boosted, subject_type=st,
                object_type=ot,
                subject_description=sd, object_description=od, subject_aliases=sa,
                object_aliases=oa, subject_attributes=sx, object_attributes=ox,
                source=sentences.get((s, r, o), "")))
        return out

    def lines(self, facts: list[Triple], knowledge: list[ittc.KnowledgeTriple],
              enc: ittc.Encoding) -> tuple[list[dict], list[dict], list[dict]]:
        """Answer.triples, Answer.citations and Answer.passages of one encoded context: the
        lines ITTC kept (the passages' citations first, as their lines come first)."""
        kept = [(f, k, e) for f, k, e in zip(facts, knowledge, enc.triples)
                if e.granularity is not None]
        triples = [{"s": k.subject, "r": k.relation, "o": k.object, "score": k.score,
                    "granularity": e.granularity, "cost": e.cost, "line": e.line}
                   for _, k, e in kept]
        passages, cited = passage_records(enc) if enc.passages else ([], [])
        return (triples, cited + self.runtime.provenance.citations(
            (f, e.line) for f, _, e in kept), passages)

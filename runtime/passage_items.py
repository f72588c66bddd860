"""The passages a question offers ITTC beside its triples (``query.passage_items``), and what
an emitted one cites.

In a store built from documents, the chunks the passage ranking puts first
(``query.passage_ranking``: the dense scores of the store's encoder, or the personalized
PageRank of runtime/passage_rank.py) become :class:`ittc.Passage` items (runtime/ittc/passages.py has their renderings, values and
the cover rule). Their sentences option holds the chunk's sentences that the question's
candidate triples were extracted from (``triple_sources``); what each rendering covers is the
candidate triples sourced in those sentences, or anywhere in the chunk. An emitted passage
cites, sentence by sentence, the sentences its line holds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from lokg.runtime import ittc
from lokg.runtime.provenance import Provenance, Triple


def passage_items(prov: Provenance, rows: Sequence[int], scores: Sequence[float],
                  triples: Sequence[Triple]) -> list[ittc.Passage]:
    """The chunks at ``rows`` (ranking order, with their ranking ``scores``) as ITTC passages
    over the candidate ``triples`` (the covers index into it)."""
    in_chunk: dict[str, set[int]] = defaultdict(set)
    in_sentence: dict[str, set[int]] = defaultdict(set)
    for i, t in enumerate(triples):
        for chunk, sentence in prov.sources(t):
            in_chunk[chunk].add(i)
            in_sentence[sentence].add(i)
    items = []
    for rank, (row, score) in enumerate(zip(rows, scores)):
        chunk_id, doc_id, title, text = prov.passage(row)
        every = tuple(prov.chunk_sentences(chunk_id))
        chosen = tuple((sid, s) for sid, s in every if in_sentence.get(sid))
        part = frozenset(i for sid, _ in chosen for i in in_sentence[sid])
        items.append(ittc.Passage(chunk_id, doc_id, title, text, sentences=chosen,
                                  covers=(part, frozenset(in_chunk.get(chunk_id, ()))),
                                  rank=rank, score=float(score), all_sentences=every))
    return items


def passage_records(enc: ittc.Encoding) -> tuple[list[dict], list[dict]]:
    """Answer.passages and the citations of the emitted passages: one citation per sentence
    its line holds (the whole chunk's sentences, or the chosen ones), basis ``passage``."""
    records, citations = [], []
    for e in enc.passages:
        if e.granularity is None:
            continue
        p = e.passage
        records.append({"chunk_id": p.chunk_id, "doc_id": p.doc_id, "title": p.title,
                        "granularity": e.granularity, "rank": p.rank, "score": p.score,
                        "cost": e.cost, "covers": len(e.covers), "line": e.line})
        held = (p.sentences if e.granularity == "sentences" else p.all_sentences) or (("", ""),)
        citations.extend({"passage": p.chunk_id, "title": p.title, "doc_id": p.doc_id,
                          "chunk_id": p.chunk_id, "sentence_id": sid, "sentence": text,
                          "basis": "passage"} for sid, text in held)
    return records, citations

"""The passages a question offers ITTC beside its triples (``query.passage_items``), and what
an emitted one cites.

In a store built from documents, the chunks the passage ranking puts first
(``query.passage_ranking``: the dense scores of the store's encoder, or the personalized
PageRank of runtime/passage_rank.py) become :class:`ittc.Passage` items
(runtime/ittc/passages.py has their renderings, values and the cover rule).

**Best sentences** (``query.passage_sentences`` question, given the question's vector): a
chunk's sentences are matched to the question by the store's encoder (the build's
``sentence_vectors.npy``): each sentence weighs exp(cos/``SENTENCE_TEMPERATURE``), normalised
over the chunk, and the sentences option holds the fewest best-matching sentences whose
weights reach ``SENTENCE_SHARE`` (in text order), worth that weight's share of the whole
passage: a chunk whose match sits in one sentence offers it at nearly the passage's value for
a fraction of its tokens, so a small budget packs the best sentences of more passages.
``auto`` (the default) asks first whether the question's match is concentrated: when the best
offered chunk's cosine with the question exceeds the mean of the next ``RUNNERS_UP`` by at
least ``CONCENTRATION_GAP`` (the offered chunks' cosines, best first, whatever the ranking),
the answer most likely sits in the first chunks, which the sources rule keeps whole; otherwise
the match is spread, and the best sentences of more chunks buy breadth
(:func:`sentence_question`). Otherwise (``sources``; ``auto`` on a concentrated match; older
builds without sentence vectors; no question vector) the option holds the sentences the
question's candidate triples were extracted from
(``triple_sources``), worth their share of the tokens. What each rendering covers is the
candidate triples sourced in its sentences, or anywhere in the chunk. An emitted passage
cites, sentence by sentence, the sentences its line holds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from lokg.runtime import ittc
from lokg.runtime.provenance import Provenance, Triple

#: Softmax temperature of the sentences' cosines with the question within a chunk.
SENTENCE_TEMPERATURE = 0.1
#: The sentences option holds the fewest best sentences whose weights reach this share.
SENTENCE_SHARE = 0.5
#: ``auto``: a match is concentrated when the best chunk's cosine exceeds the mean of the next
#: RUNNERS_UP chunks' by at least CONCENTRATION_GAP (fitted by bench/fit_concentration_gap.py
#: on HotpotQA dev-200 with the store's MiniLM encoder; docs/documents.md).
CONCENTRATION_GAP = 0.14
RUNNERS_UP = 4


def sentence_question(prov: Provenance, rows: Sequence[int], question: np.ndarray | None,
                      rule: str) -> np.ndarray | None:
    """The vector that chooses the best sentences of the chunks at ``rows`` under
    ``query.passage_sentences`` ``rule`` (sources | question | auto), or None: the sources
    rule (module docstring)."""
    if rule == "sources" or question is None:
        return None
    if rule == "auto":
        cosines = prov.dense_scores(question, rows)
        if cosines is None or match_gap(cosines) >= CONCENTRATION_GAP:
            return None
    return question


def match_gap(cosines: np.ndarray) -> float:
    """How far the best of ``cosines`` stands above the mean of the next ``RUNNERS_UP``
    (infinite with fewer than two): ``auto`` calls a match concentrated at ``CONCENTRATION_GAP``
    or more."""
    best = np.sort(np.asarray(cosines, np.float64))[::-1]
    return float(best[0] - best[1:1 + RUNNERS_UP].mean()) if len(best) > 1 else float("inf")


def passage_items(prov: Provenance, rows: Sequence[int], scores: Sequence[float],
                  triples: Sequence[Triple], question: np.ndarray | None = None
                  ) -> list[ittc.Passage]:
    """The chunks at ``rows`` (ranking order, with their ranking ``scores``) as ITTC passages
    over the candidate ``triples`` (the covers index into it); ``question``: the question's
    vector, which chooses and values each chunk's best sentences (module docstring)."""
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
        match = prov.sentence_match(question, [sid for sid, _ in every]) if every else None
        if match is None:
            chosen, share = tuple((sid, s) for sid, s in every if in_sentence.get(sid)), None
        else:
            chosen, share = best_sentences(every, match)
        part = frozenset(i for sid, _ in chosen for i in in_sentence.get(sid, ()))
        items.append(ittc.Passage(chunk_id, doc_id, title, text, sentences=chosen,
                                  covers=(part, frozenset(in_chunk.get(chunk_id, ()))),
                                  rank=rank, score=float(score), all_sentences=every,
                                  share=share))
    return items


def best_sentences(sentences: Sequence[tuple[str, str]], match: np.ndarray
                   ) -> tuple[tuple[tuple[str, str], ...], float]:
    """(the best sentences in text order, their share of the weight): the module docstring's
    rule over a chunk's ``sentences`` and their cosines ``match`` with the question."""
    weights = np.exp((match - match.max()) / SENTENCE_TEMPERATURE)
    weights /= weights.sum()
    best = np.argsort(-weights, kind="stable")
    k = min(len(best), int(np.searchsorted(np.cumsum(weights[best]), SENTENCE_SHARE)) + 1)
    kept = sorted(best[:k].tolist())
    return tuple(sentences[i] for i in kept), float(weights[kept].sum())


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

"""Would a phrase–relation scorer fitted on the training questions name unseen relation phrases
better than the encoder's cosine does? (a stronger relation–phrase similarity)

    python -m bench.relknow_phrase_scorer --store S --questions DUMP/train.jsonl
    python -m bench.relknow_phrase_scorer --store S --questions … --spans "do,come from,man woman"

Why. On unfamiliar wording the runtime matches question spans to relations by the encoder's
cosine to the relation's name and to the training questions' words for it
(``relknow.spans.span_similarities``); phrases MiniLM does not relate to those ("helmer",
"backer", "passport issuer") lose the chain. A scorer fitted at the relation_knowledge stage
on the training questions' span–relation pairs would only pay if it names a phrase it was not
fitted on better than the cosine: this measures exactly that, leave one phrase out, on the
training questions alone (no test or held-out wording is read).

Pairs: each training question (masked as the stage masks it) gives, for every relation of its
gold chain, the span (``question_text.question_spans``) the cosine rates highest for it; spans
overlapping none of those are negatives (filler). Spans aligned to more than one relation are
left out. For each distinct positive span, with it held out:

* ``cosine`` — its best relation by the higher of the cosine to the relation's name and to the
  other positive spans of the relation (what ``span_similarities`` does with lexicon words);
* ``ridge λ`` — a linear map W on the frozen embeddings, fitted on the other positives (target:
  their relation's name vector) and the negatives (target: 0), anchored at the identity
  (min ‖XW − Y‖² + λ‖W − I‖²); the relation whose name vector has the highest x·W·r;
* ``softmax λ`` — a linear classifier over the relations and a filler class, started at and
  L2-anchored to the name cosine (×5), 300 full-batch gradient steps.

Prints one JSON object: pairs found, and held-out phrases named right per scorer. With
``--spans``: the store's three best relations by ``span_similarities`` for each given span.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

import numpy as np


RIDGE = (0.3, 1.0, 3.0)
SOFTMAX = (0.001, 0.01, 0.1)
NAME_SCALE = 5.0  # the softmax scorer's start: logits = 5 × the cosine to the relation names


def aligned_pairs(spans: Sequence[Sequence[tuple[int, int, str]]], similarity: Sequence[np.ndarray],
                  relations: Sequence[set[int]]) -> tuple[dict[str, int], list[str]]:
    """(span → its relation's column, filler spans) over the training questions: per question
    and gold relation (a column) the span rated highest; spans aligned to two relations and
    filler that is also a positive are dropped."""
    positive: dict[str, set[int]] = {}
    filler: set[str] = set()
    for question_spans, sims, gold in zip(spans, similarity, relations):
        chosen = []
        for column in sorted(gold):
            best = question_spans[int(np.argmax(sims[:, column]))]
            chosen.append(best)
            positive.setdefault(best[2], set()).add(column)
        filler.update(t for a, b, t in question_spans
                      if not any(a < cb and ca < b for ca, cb, _ in chosen))
    single = {t: next(iter(c)) for t, c in sorted(positive.items()) if len(c) == 1}
    return single, sorted(filler - set(positive))


def ridge_map(x: np.ndarray, targets: np.ndarray, lam: float) -> np.ndarray:
    """W = argmin ‖xW − targets‖² + λ‖W − I‖² (closed form)."""
    eye = np.eye(x.shape[1])
    return np.linalg.solve(x.T @ x + lam * eye, x.T @ targets + lam * eye)


def softmax_scorer(x: np.ndarray, labels: np.ndarray, names: np.ndarray, lam: float,
                   steps: int = 300, rate: float = 0.5) -> Callable[[np.ndarray], np.ndarray]:
    """Logits over the relations (columns of ``names``' rows) and a last filler class (label
    ``len(names)``), fitted from the name cosine and pulled back to it by λ."""
    anchor = np.c_[names.T * NAME_SCALE, np.zeros(x.shape[1])]
    w, b = anchor.copy(), np.zeros(anchor.shape[1])
    for _ in range(steps):
        z = x @ w + b
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(labels)), labels] -= 1.0
        w -= rate * (x.T @ p / len(labels) + lam * (w - anchor))
        b -= rate * p.mean(axis=0)
    return lambda v: (v @ w + b)[..., :-1]


def held_out_hits(x: np.ndarray, labels: np.ndarray, names: np.ndarray, filler: np.ndarray
                  ) -> dict[str, int]:
    """Per scorer, how many positives it names right when fitted without them (leave one out)."""
    hits = {"cosine": 0, **{f"ridge {lam}": 0 for lam in RIDGE},
            **{f"softmax {lam}": 0 for lam in SOFTMAX}}
    for i in range(len(x)):
        keep = np.arange(len(x)) != i
        spans = np.full(len(names), -1.0)
        np.maximum.at(spans, labels[keep], x[keep] @ x[i])
        hits["cosine"] += int(np.argmax(np.maximum(names @ x[i], spans)) == labels[i])
        fit_x = np.vstack([x[keep], filler])
        for lam in RIDGE:
            w = ridge_map(fit_x, np.vstack([names[labels[keep]], np.zeros_like(filler)]), lam)
            hits[f"ridge {lam}"] += int(np.argmax(names @ (x[i] @ w)) == labels[i])
        fit_labels = np.r_[labels[keep], np.full(len(filler), len(names))]
        for lam in SOFTMAX:
            scorer = softmax_scorer(fit_x, fit_labels, names, lam)
            hits[f"softmax {lam}"] += int(np.argmax(scorer(x[i])) == labels[i])
    return hits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--questions", required=True, help="the store's training questions")
    parser.add_argument("--spans", help="comma-separated spans: print their best relations")
    args = parser.parse_args(argv)

    from lokg.runtime.query import Runtime
    from lokg.runtime.question_encoder import CachedEmbeddings
    from lokg.runtime.question_text import question_spans
    from lokg.runtime.relknow import split_hop
    from lokg.runtime.relknow.spans import span_similarities
    from lokg.common.store_names import StoreNames
    from lokg.training.relation_knowledge import read_questions, resolve

    rt = Runtime.open(args.store)
    know, embed = rt.relknow[0], CachedEmbeddings(rt.encoder())
    tables = {t: str(rt.build.path / f"{t}.parquet") for t in
              ("entities", "relations", "relation_map")}
    store = StoreNames(tables)
    train = resolve(store, read_questions(args.questions))
    column = {r: i for i, r in enumerate(know.relation_order)}
    spans = [question_spans(m) for m in train.masked]
    keep = [i for i, s in enumerate(spans) if s]
    sims = [span_similarities(know, [t for _, _, t in spans[i]], embed) for i in keep]
    gold = [{column[store.relation_ids[split_hop(h)[0]]] for h in train.chains[i]} for i in keep]
    positive, filler = aligned_pairs([spans[i] for i in keep], sims, gold)
    x = np.asarray(embed(list(positive)), dtype=np.float32)
    report = {"store": args.store, "build_id": rt.build_id, "questions": len(keep),
              "positive_spans": len(positive), "filler_spans": len(filler),
              "held_out_named_right": held_out_hits(
                  x, np.array(list(positive.values())), know.relation_vectors,
                  np.asarray(embed(filler), dtype=np.float32))}
    if args.spans:
        texts = [s.strip() for s in args.spans.split(",") if s.strip()]
        names = know.spec["relation_names"]  # in relation order
        report["spans"] = {t: [(names[int(k)], round(float(row[k]), 3))
                               for k in np.argsort(-row)[:3]]
                           for t, row in zip(texts, span_similarities(know, texts, embed))}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

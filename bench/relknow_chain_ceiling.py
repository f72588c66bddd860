"""Where unfamiliar wording loses its chain: the ceiling of picking among the kNN vote, and
what question spans name.

    python -m bench.relknow_chain_ceiling --store S --questions DUMP-heldout/test.jsonl \
        [--questions DUMP/test.jsonl ...]

Why. The held-out wording of ``bench/generalisation.py`` loses 23–31 points against in-domain
at the chain step. Before another rule on the vote or the spans, this says which of them can
pay: on the store's relation knowledge and the runtime code (no eval run; topics gold), per
question file:

* ``chain_right`` — the relation plan's chain (``RelationKnowledge.assess`` with the
  runtime's hop domains, what ``lokg eval --policy route`` follows) is the gold chain;
* ``gold_voted`` — the gold chain is one of the kNN vote's instantiating chains: the ceiling of
  any rule that picks among them; ``vote_top`` — it is the best-voted one; ``vote_x_fit`` —
  it is the one of highest vote weight × the mean over its hops of how well the question's
  best span describes the hop's relation (``described_fit``);
* ``gold_relations``, and of them ``best_of_a_span`` — the best relation of some question
  span (``span_similarities``' argmax) — and ``named_by_chosen_spans`` — named by the
  non-overlapping spans passing θ_zs (``zero_shot_hops``, ``chosen_spans``: what the
  resize counts and the zero-shot matcher follows);
* the asked kind from the question's head words (an "expected answer type"
  signal): ``head_kind`` — the first run of content
  words (``question_text.head_spans``: what precedes the first "of" or the topic; "*sovereign
  state* native town of …") has a prefix whose best relation passes θ_zs, the kind being the
  relations within ``relknow.ANSWER_TYPE_MARGIN`` of it (``relknow.spans.head_kind``); of
  those, ``head_kind_gold_last`` — the gold chain's last relation is of the
  kind, and what a filter on it would do to the relation plan's chain: ``kind_rejects_right``
  (right chain, last relation not of the kind) and ``kind_rejects_wrong``.

Commit 2b1b7a9 ran this beside relations described by their graph (docs/BENCHMARKS.md,
"Relations described by their graph"); they were dropped. Prints one JSON object
per question file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

import numpy as np

from lokg.runtime import question_text, relknow
from lokg.runtime.relknow.predictor import knn_vote
from lokg.runtime.relknow.spans import (described_fit, head_kind, span_similarities,
                                        zero_shot_hops)


def vote_pick(votes, fit: dict[int, float], n_relations: int):
    """(best-voted, best by vote × mean span fit) of the instantiating voted chains (None,
    None when none instantiates); ``fit``: relation → how well a span describes it."""
    weight: Counter = Counter()
    for vote in votes:
        if vote.derivable:
            weight[vote.chain] += vote.weight
    if not weight:
        return None, None

    def by_fit(chain):
        return weight[chain] * float(np.mean(
            [fit.get(relknow.hop_relation(h, n_relations), 0.0) for h in chain]))
    return max(weight, key=weight.__getitem__), max(weight, key=by_fit)


def span_relations(know: relknow.RelationKnowledge, masked: str, embed) -> tuple[set, set]:
    """(relations some span matches best, relations the chosen spans at θ_zs name)."""
    spans = question_text.question_spans(masked)
    if not spans:
        return set(), set()
    sims = span_similarities(know, [t for _, _, t in spans], embed)
    best = {know.relation_order[int(i)] for i in sims.argmax(axis=1)}
    hops = zero_shot_hops(know, masked, embed)
    return best, {h[3] for h in relknow.chosen_spans(hops, len(masked.split()))}


def kind_counts(kind: frozenset[int], chain, gold, n_relations: int) -> dict[str, int]:
    """The head-kind counts of one question (module docstring)."""
    if not kind:
        return {}
    last = relknow.hop_relation(gold[-1], n_relations) in kind
    off = bool(chain) and relknow.hop_relation(chain[-1], n_relations) not in kind
    return {"head_kind": 1, "head_kind_gold_last": int(last),
            "kind_rejects_right": int(off and chain == gold),
            "kind_rejects_wrong": int(off and chain != gold)}


def measure(know: relknow.RelationKnowledge, labelled, gold_chains, facts, encoder, embed,
            domains=None) -> dict:
    """The module docstring's counts over one resolved question file."""
    out: Counter = Counter()
    vectors = encoder.encode_queries(labelled.masked) if labelled.masked else []
    for masked, topics, gold, q_vec in zip(labelled.masked, labelled.topics, gold_chains,
                                           vectors):
        chain = know.assess(masked, topics, facts, q_vec=q_vec, embed=embed,
                             domains=domains).prediction.chain
        knn = knn_vote(know, q_vec, facts, topics)
        top, fitted = vote_pick(knn.votes, described_fit(know, masked, embed), know.n_relations)
        relations = {relknow.hop_relation(h, know.n_relations) for h in gold}
        best, chosen = span_relations(know, masked, embed)
        out.update(questions=1, unfamiliar=int(knn.nearest < relknow.UNFAMILIAR_COSINE),
                   chain_right=int(chain == gold),
                   gold_voted=int(any(v.derivable and v.chain == gold for v in knn.votes)),
                   vote_top=int(top == gold), vote_x_fit=int(fitted == gold),
                   gold_relations=len(relations), best_of_a_span=len(relations & best),
                   named_by_chosen_spans=len(relations & chosen))
        out.update(kind_counts(head_kind(know, masked, embed), chain, gold, know.n_relations))
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--questions", action="append", required=True,
                        help="a question file (JSONL or PathQuestion split), repeatable")
    args = parser.parse_args(argv)

    from lokg.runtime.query import Runtime
    from lokg.common.store_names import StoreNames
    from lokg.training.relation_knowledge import read_questions, resolve

    rt = Runtime.open(args.store)
    know, facts = rt.relknow
    store = StoreNames({t: str(rt.build.path / f"{t}.parquet")
                        for t in ("entities", "relations", "relation_map")})
    encoder = rt.encoder()
    embed = rt.span_embedder()  # the runtime's own span vectors (float32, batch-independent)
    for path in args.questions:
        labelled = resolve(store, read_questions(path))
        gold = [tuple(store.hop(h) for h in chain) for chain in labelled.chains]
        row = {"store": args.store, "build_id": rt.build_id, "questions_file": path,
               "skipped": labelled.skipped}
        row.update(measure(know, labelled, gold, facts, encoder, embed, rt.hop_domains()))
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

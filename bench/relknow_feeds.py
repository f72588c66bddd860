"""What the relation feeds (``query.relation_weight``, ``query.chain_boost``, on by default) buy
and cost on one store: H@1 of LOKG's own answer (reader none, policy lokg) with the feeds on and
off, and the p50 latency of ``Runtime.ask`` both ways, over one PathQuestion split.

    python -m bench.relknow_feeds --store /tmp/lokg-pq3/pq-2h/store \\
        --dataset ../shared/data/pathquestion/pq-2h --split dev

Use dev (or train) to decide defaults; the store's relation knowledge may be labelled or
zero-shot (fitted without ``relation_knowledge.questions``), the output says which.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


FEEDS_OFF = {"relation_weight": 0.0, "chain_boost": False}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--dataset", required=True, help="a PathQuestion directory")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--limit", type=int)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from lokg.common.datasets import load_dataset
    from lokg.common.metrics import score
    from lokg.runtime.query import Runtime

    rt = Runtime.open(args.store)
    if rt.relknow is None:
        sys.exit(f"{args.store}: build {rt.build_id} has no relation knowledge")
    kind = "labelled" if rt.relknow[0].labelled else "zero-shot"
    questions = load_dataset(f"pathquestion:{args.dataset}", args.split).questions[: args.limit]
    rt.ask(questions[0].question, entities=list(questions[0].topic_entities))  # load the encoder
    print(f"{args.store} ({kind} relation knowledge), {args.split}, {len(questions)} questions")
    for label, feeds in (("feeds on", {}), ("feeds off", FEEDS_OFF)):
        hits, seconds = 0.0, []
        for q in questions:
            started = time.perf_counter()
            answer = rt.ask(q.question, entities=list(q.topic_entities), **feeds)
            seconds.append(time.perf_counter() - started)
            hits += score(answer.answers, q.answers).h1
        print(f"  {label:9}  H@1 {hits / len(questions):.3f}  "
              f"p50 {statistics.median(seconds) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Routed H@1 (reader none, gold topics) of one store's questions under each question-encoder
backend, per hop count: how much the relation plan hangs on encoder noise.

    python -m bench.relknow_backends --store S --dataset synth:DUMP/test.jsonl \\
        --backends onnx,numpy

Why. The zero-shot matcher picks each span's relation by the encoder's cosine, and some picks
are near ties ("director": the relation film 0.586, directed_by 0.584 with the int8 ONNX
encoder) that another backend (fp32 numpy / torch) or another batch may break the other way.
Run from two checkouts (``PYTHONPATH=<checkout>``) on the same store to compare versions: a
rule that only wins where the noise fell one way moves one backend's row and not the other.
Prints one JSON object: per backend, n and H@1 per hop count and overall, the wrong question
ids and the mean wall ms per question. ``--reverse`` asks them last to first.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--dataset", required=True, help="KIND:PATH, as lokg eval takes it")
    parser.add_argument("--split")
    parser.add_argument("--backends", default="onnx,numpy")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--reverse", action="store_true",
                        help="ask the questions last to first: a plan that moves with the "
                             "order hangs on what the span cache embedded together")
    args = parser.parse_args(argv)

    from lokg.common.datasets import load_dataset
    from lokg.common.metrics import score
    from lokg.runtime.query import Runtime

    questions = load_dataset(args.dataset, args.split).questions[:args.limit]
    if args.reverse:
        questions = questions[::-1]
    report = {"store": args.store, "dataset": args.dataset, "reverse": args.reverse,
              "backends": {}}
    for backend in args.backends.split(","):
        rt = Runtime.open(args.store, encoder_backend=backend)
        hits: dict[str, list[float]] = defaultdict(list)
        wrong = []
        start = time.perf_counter()
        for q in questions:
            answer = rt.ask(q.question, entities=list(q.topic_entities), llm="none",
                            policy="route")
            h1 = score(answer.answers, q.answers).h1
            hits[f"{len(q.path)}-hop"].append(h1)
            hits["all"].append(h1)
            if not h1:
                wrong.append(q.id)
        report["build_id"] = rt.build_id
        report["backends"][backend] = {k: {"n": len(v), "H@1": round(sum(v) / len(v), 3)}
                                       for k, v in sorted(hits.items())}
        report["backends"][backend]["wrong"] = sorted(wrong)
        report["backends"][backend]["ms_per_question"] = round(
            1000 * (time.perf_counter() - start) / max(1, len(questions)), 1)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

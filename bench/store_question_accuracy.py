"""H@1 of the runtime (reader none) on questions made from a store's own triples.

    python -m bench.store_question_accuracy --store /tmp/fbstore-final --questions 400

The questions of ``bench/query_latency.py`` (random triples (s, r, o), "what is the <relation
words> of <name of s>?", s given as the entity); an answer is right when its top entity is an
object of (s, r) in the store. No labelled questions are needed, so it works on any store — with
relation knowledge fitted zero-shot this is where the zero-shot matcher is exercised. Run it
from two checkouts (``PYTHONPATH=<checkout>``) on the same store to compare versions.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench.common import fact_question, sampled_facts
from lokg.runtime.query import Runtime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--questions", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--encoder-backend", help="query.encoder_backend (auto | onnx | numpy | "
                                                  "torch; default: the store's setting)")
    args = parser.parse_args(argv)
    rt = Runtime.open(args.store, **({"encoder_backend": args.encoder_backend}
                                     if args.encoder_backend else {}))
    print(json.dumps({"store": args.store, "build_id": rt.build_id,
                      **fact_h1(rt, args.questions, args.seed)}))
    return 0


def fact_h1(rt: Runtime, n: int, seed: int) -> dict:
    """H@1 (reader none) on ``n`` seeded fact questions of the store: the same questions on
    two stores whose triples are equal (bench/refresh_scale.py compares a refresh so)."""
    triples = rt.build.read("triples", columns=["s", "r", "o"]).to_pydict()
    objects: dict[tuple[int, int], set[int]] = {}
    for s, r, o in zip(triples["s"], triples["r"], triples["o"]):
        objects.setdefault((s, r), set()).add(o)
    hits = 0
    sampled = sampled_facts(rt, n, seed)
    for s, r in sampled:
        answer = rt.ask(fact_question(rt, s, r), entities=[s], llm="none")
        hits += bool(answer.answer_ids) and answer.answer_ids[0] in objects[(s, r)]
    return {"questions": len(sampled), "H@1": round(hits / len(sampled), 3)}


if __name__ == "__main__":
    sys.exit(main())

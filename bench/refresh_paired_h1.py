"""Paired H@1 (reader none) of two stores of the same FB15k-237 dump: the same seeded facts
asked of both, so two builds that merged relations differently are compared on one question set.

    python -m bench.refresh_paired_h1 --dump W/edited --stores W/store W/full-store

``bench/refresh_scale.py`` draws its fact questions from each store's own (merged) triples, so
once the refresh and the full build merge other SCOS groups the two H@1 figures are of two
different question sets. Here a question is a (subject key, original relation name) of the
dump, asked as "what is the <relation words> of <name of s>?" with s given; the answer is right
when its top entity's key is an object of (s, r) in the dump. Per store the H@1, and the paired
counts (right in both, only in one).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from bench.common import dump_facts, hits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", type=Path, required=True)
    parser.add_argument("--stores", nargs=2, required=True)
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    facts = dump_facts(args.dump)
    asked = random.Random(args.seed).sample(sorted(facts), min(args.questions, len(facts)))
    one, other = (hits(store, facts, asked) for store in args.stores)
    print(json.dumps({"questions": len(asked), "stores": args.stores,
                      "H@1": [round(sum(h) / len(asked), 3) for h in (one, other)],
                      "both": sum(a and b for a, b in zip(one, other)),
                      "only_first": sum(a and not b for a, b in zip(one, other)),
                      "only_second": sum(b and not a for a, b in zip(one, other))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

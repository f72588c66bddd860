"""The misses of a zero-shot run, classed by how the followed chain differs from the gold path.

    python -m bench.zero_shot_misses --run W/zero-shot-4000t-s0-q3000/runs/route-wild \
        --dump W/zero-shot-4000t-s0-q3000/dump-wild --show 3

A run of ``bench.generalisation``'s zero-shot step (``lokg eval`` with method lokg, gold topic
entities) and the dump whose test.jsonl it asked (its gold paths and hop counts). Per hop count,
the questions whose top answer is wrong (H@1 0) by class:

* ``no chain`` — the route followed no chain (nothing instantiated);
* ``hop count`` — the chain has another number of hops than the gold path;
* ``direction`` — the gold path's relations in its order, some walked the other way;
* ``order`` — the gold path's relations in another order;
* ``relation`` — some other relation (a synonym or inverse the graph states only partly
  counts here too: the answers it reached were wrong);
* ``right chain`` — the gold path itself (the answer lost to ranking or to the graph).

With ``--show N`` the first N questions of each class follow (question, gold path, chain).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

CLASSES = ("no chain", "hop count", "direction", "order", "relation", "right chain")


def relation(hop: str) -> str:
    return hop.removeprefix("~")


def miss_class(gold: list[str], chain: list[str] | None) -> str:
    """The class of a miss (module docstring) from the gold path and the followed chain."""
    if not chain:
        return "no chain"
    if len(chain) != len(gold):
        return "hop count"
    if chain == gold:
        return "right chain"
    if [relation(h) for h in chain] == [relation(h) for h in gold]:
        return "direction"
    if sorted(map(relation, chain)) == sorted(map(relation, gold)):
        return "order"
    return "relation"


def misses(run: Path, dump: Path) -> list[dict]:
    """(hops, class, question, gold path, chain) of every question of the run with H@1 0."""
    questions = {q["id"]: q for q in map(json.loads, (dump / "test.jsonl").read_text(
        encoding="utf-8").splitlines())}
    out = []
    for line in (run / "lokg" / "predictions.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["scores"]["H@1"]:
            continue
        q = questions[record["id"]]
        chain = ((record.get("details") or {}).get("route") or {}).get("chain")
        out.append({"hops": q["hops"], "class": miss_class(q["path"], chain),
                    "question": q["question"], "gold": q["path"], "chain": chain})
    return out


def table(rows: list[dict], n_by_hops: Counter) -> str:
    """Misses per hop count and class, with the questions asked per hop count."""
    counts = Counter((r["hops"], r["class"]) for r in rows)
    lines = ["| hops | asked | missed | " + " | ".join(CLASSES) + " |",
             "|--:|--:|--:|" + "--:|" * len(CLASSES)]
    for hops in sorted(n_by_hops):
        missed = sum(counts[hops, c] for c in CLASSES)
        lines.append(f"| {hops} | {n_by_hops[hops]} | {missed} | "
                     + " | ".join(str(counts[hops, c]) for c in CLASSES) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a zero-shot run directory")
    parser.add_argument("--dump", type=Path, required=True, help="the dump it asked")
    parser.add_argument("--show", type=int, default=0, help="questions shown per class")
    args = parser.parse_args(argv)
    rows = misses(args.run, args.dump)
    asked = Counter(json.loads(line)["hops"] for line in (args.dump / "test.jsonl")
                    .read_text(encoding="utf-8").splitlines())
    print(table(rows, asked))
    for name in CLASSES if args.show else ():
        shown = [r for r in rows if r["class"] == name][:args.show]
        for r in shown:
            print(f"- {name}, {r['hops']} hop(s): {r['question']} | gold {' '.join(r['gold'])}"
                  f" | chain {' '.join(r['chain'] or ['none'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

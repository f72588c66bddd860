"""Per question, context recall over the rounds of a feedback-rounds run: which
questions lost their gold or never had it, and what answered them (the route's source:
retrieval, derived …) — the diff a flat recall curve needs to be read.

    python -m bench.rounds_diff --work W [--arm feedback-precomputed] [--against OUT]

``--reanswer OUT --round R`` answers round R's build (while the store still holds it:
``publish.keep``) again with the runtime this process imports, the feedback log off (the
run's log untouched), into ``OUT/round-R/run``: the same builds answered by other code, a
reference for a runtime change. From a checkout of that other code (this file and
bench/common.py copied into it), ``python -m bench.rounds_diff`` imports its runtime;
``--against OUT`` then puts its recall beside the run's, per round and per question.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def answered(run: Path) -> dict[str, dict]:
    """Question id → its prediction record of one round's run directory."""
    lines = (run / "run" / "lokg" / "predictions.jsonl").read_text(encoding="utf-8")
    return {r["id"]: r for r in map(json.loads, lines.splitlines())}


def rounds(root: Path) -> list[dict[str, dict]]:
    """Every answered round under ``root`` (``round-0``, ``round-1`` … while they exist)."""
    out = []
    while (root / f"round-{len(out)}" / "run" / "lokg" / "predictions.jsonl").is_file():
        out.append(answered(root / f"round-{len(out)}"))
    return out


def recall(record: dict) -> int:
    return int(record["reading"]["context_recall"])


def source(record: dict) -> str:
    return ((record["details"].get("route") or {}).get("source") or record["status"])[:4]


def diff(run: list[dict[str, dict]], against: list[dict[str, dict]]) -> str:
    """The table of the questions whose recall moves or stays 0, then recall per round."""
    lines = ["| question | gold | recall by round | answered by | top answer, first → last |"
             + (" reference recall |" if against else ""),
             "|---|---|---|---|---|" + ("---|" if against else "")]
    for qid, first in run[0].items():
        seen = [r[qid] for r in run]
        marks = [recall(r) for r in seen]
        if len(set(marks)) == 1 and marks[0]:
            continue
        top = [(r["predicted"] or ["—"])[0] for r in (seen[0], seen[-1])]
        lines.append(f"| {first['question']} | {first['gold'][0]} | "
                     f"{' '.join(map(str, marks))} | {' '.join(source(r) for r in seen)} | "
                     f"{top[0]} → {top[1]} |"
                     + (f" {' '.join(str(recall(r[qid])) for r in against)} |"
                        if against else ""))
    for name, answers in (("run", run), ("reference", against)):
        if answers:
            lines.append(f"\n{name}: context recall by round "
                         + " ".join(f"{sum(map(recall, r.values())) / len(r):.2f}"
                                    for r in answers))
    return "\n".join(lines)


def reanswer(work: Path, arm: str, number: int, out: Path) -> dict:
    """Round ``number``'s build answered again by this process's runtime, feedback off."""
    from bench.common import answer_all
    from lokg.evaluation.text_datasets import load_reading_file

    here = work / arm / f"round-{number}"
    build_id = json.loads((here / "build.json").read_text(encoding="utf-8"))["build_id"]
    questions = load_reading_file(work / "questions.json", "musique").dataset.questions
    return answer_all(work / arm / "store", questions, out / f"round-{number}" / "run", False,
                      build_id=build_id, settings={"feedback": False})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--arm", default="feedback-precomputed")
    parser.add_argument("--against", type=Path, help="a --reanswer OUT to compare with")
    parser.add_argument("--reanswer", type=Path, metavar="OUT")
    parser.add_argument("--round", type=int, help="with --reanswer: the round to answer")
    args = parser.parse_args(argv)
    if args.reanswer is not None:
        if args.round is None:
            parser.error("--reanswer needs --round")
        summary = reanswer(args.work, args.arm, args.round, args.reanswer)
        print(f"round {args.round}: context recall {summary['context_recall']:.3f}")
        return 0
    against = rounds(args.against) if args.against else []
    print(diff(rounds(args.work / args.arm), against))
    return 0


if __name__ == "__main__":
    sys.exit(main())

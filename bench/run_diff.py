"""Two ``lokg eval`` runs of the same questions, per question: what changed between them.

    python -m bench.run_diff BEFORE/RUN AFTER/RUN [--method lokg] [--metric H@1]

For a change judged on the same store and questions (before = one checkout's run, after =
another's), prints per run the number of questions, the metric's mean before and after, the
questions that turned right (right ← wrong) or wrong (wrong ← right), and how many answers
changed at all; then each question that turned, with its gold path. Only questions in both runs
are compared. Each argument is a run directory (``--out`` of ``lokg eval``); several pairs can
be given as BEFORE1 AFTER1 BEFORE2 AFTER2 ….
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lokg.evaluation.runner import PREDICTIONS, read_predictions


def compare(before: dict[str, dict], after: dict[str, dict], metric: str) -> dict:
    """The metric's means, the questions that turned right or wrong, and the changed answers."""
    both = [i for i in before if i in after]
    score = {i: (before[i]["scores"][metric], after[i]["scores"][metric]) for i in both}
    return {"n": len(both),
            "before": sum(b for b, _ in score.values()) / len(both) if both else 0.0,
            "after": sum(a for _, a in score.values()) / len(both) if both else 0.0,
            "right": [i for i, (b, a) in score.items() if a > b],
            "wrong": [i for i, (b, a) in score.items() if a < b],
            "changed": sum(before[i]["predicted"] != after[i]["predicted"] for i in both)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, metavar="BEFORE AFTER")
    ap.add_argument("--method", default="lokg")
    ap.add_argument("--metric", default="H@1")
    args = ap.parse_args(argv)
    if len(args.runs) % 2:
        ap.error("runs come in pairs: BEFORE AFTER")
    for before_dir, after_dir in zip(args.runs[::2], args.runs[1::2]):
        before, after = (read_predictions(d / args.method / PREDICTIONS)
                         for d in (before_dir, after_dir))
        if not before or not after:
            raise SystemExit(f"{before_dir} or {after_dir}: no {args.method}/{PREDICTIONS}")
        diff = compare(before, after, args.metric)
        print(f"{after_dir.name}: n {diff['n']} {args.metric} {diff['before']:.3f} -> "
              f"{diff['after']:.3f}, +{len(diff['right'])} / -{len(diff['wrong'])}, "
              f"{diff['changed']} answers changed")
        for sign, ids in (("+", diff["right"]), ("-", diff["wrong"])):
            for i in ids:
                print(f"    {sign} {after[i]['question']}  {after[i].get('gold_path')}")


if __name__ == "__main__":
    main()

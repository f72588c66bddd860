"""Fit ``CONCENTRATION_GAP`` of ``query.passage_sentences`` auto (runtime/passage_items.py) on
one reading set, or show a fitted gap on another, from two runs of bench.eval_documents:

    python -m bench.eval_documents --dataset hotpotqa-200 --store S --work W --llm none \\
        --methods lokg-tcr,chunk-rag --passage-sentences sources      # and again: question
    python -m bench.fit_concentration_gap --dataset hotpotqa-200 --store S --work W
    python -m bench.fit_concentration_gap --dataset musique-200 --store S2 --work W --gap 0.14

``auto`` answers each question by the sources rule or the question rule, as its match gap
(runtime/passage_items.match_gap over the offered chunks' cosines with the question) reaches
the gap or not, and the two rules act per question, so the two runs' per-question context
recall (lokg-tcr, reader none) gives auto's at every gap exactly: ``where(gap_q >= g, sources,
question)``. The question is embedded by the store's encoder and its ``query.passage_items``
chunks are the dense ranking's first (``query.passage_ranking`` dense, the default). Procedure
(fixed before any confirmation run): the fitted gap is the grid value with the highest mean
context recall over the budgets among those no budget of which is below the sources run's (a
tie: the smallest); ``--gap`` prints that gap's row only, fitting nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

GRID = [round(0.01 * i, 2) for i in range(31)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True, help="bench.eval_documents' --work")
    parser.add_argument("--budgets", default="256,512,1024,2048")
    parser.add_argument("--gap", type=float, help="show this gap's row (no fit)")
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def recall(work: Path, dataset: str, budget: int, rule: str) -> dict[str, float]:
    """Question id -> lokg-tcr's context recall in the run of ``rule`` at ``budget``."""
    path = (work / dataset / "runs" / f"none-B{budget}-sentences-{rule}" / "lokg-tcr"
            / "predictions.jsonl")
    if not path.is_file():
        sys.exit(f"fit_concentration_gap: {path} is missing: run bench.eval_documents "
                 f"--passage-sentences {rule} --budgets {budget} first")
    return {r["id"]: r["reading"]["context_recall"]
            for r in map(json.loads, path.read_text().splitlines())}


def gaps(store: Path, questions: dict[str, str]) -> dict[str, float]:
    """Question id -> the match gap of its offered chunks (inf without a vector)."""
    from lokg.runtime.passage_items import match_gap
    from lokg.runtime.query import Runtime

    out = {}
    with Runtime.open(store) as rt:
        n = int(rt.settings["passage_items"])
        for qid, text in questions.items():
            dense = rt.provenance.dense_scores(rt.embed(None, text)[1])
            out[qid] = float("inf") if dense is None else match_gap(np.sort(dense)[::-1][:n])
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",")]
    runs = {(b, rule): recall(args.work, args.dataset, b, rule) for b in budgets
            for rule in ("sources", "question")}
    first = args.work / args.dataset / "runs" / f"none-B{budgets[0]}-sentences-sources"
    questions = {r["id"]: r["question"] for r in map(
        json.loads, (first / "lokg-tcr" / "predictions.jsonl").read_text().splitlines())}
    gap = gaps(args.store, questions)
    ids = list(questions)
    rows = []
    for g in ([args.gap] if args.gap is not None else GRID):
        auto = [float(np.mean([runs[b, "sources" if gap[q] >= g else "question"][q]
                               for q in ids])) for b in budgets]
        rows.append({"gap": g, "auto": auto})
    base = {rule: [float(np.mean([runs[b, rule][q] for q in ids])) for b in budgets]
            for rule in ("sources", "question")}
    allowed = [r for r in rows if all(a >= s - 1e-9 for a, s in zip(r["auto"], base["sources"]))]
    fitted = max(allowed, key=lambda r: (np.mean(r["auto"]), -r["gap"]), default=None)
    report = {"dataset": args.dataset, "budgets": budgets, **base, "rows": rows,
              "fitted": None if fitted is None or args.gap is not None else fitted["gap"]}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{args.dataset}, lokg-tcr context recall, budgets {budgets}")
    for name in ("sources", "question"):
        print(f"  {name:>9}  " + "  ".join(f"{v:.3f}" for v in base[name]))
    for r in rows:
        mark = " <- fitted" if report["fitted"] == r["gap"] else ""
        print(f"  gap {r['gap']:.2f}  " + "  ".join(f"{v:.3f}" for v in r["auto"]) + mark)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fit ``query.choice_margin`` and ``query.choice_check`` for a reader on a dev split:
the forced-choice call is made only when another candidate's S_final is within the margin
of the top one, so the margin says how many near-ties a reader is trusted to decide; the check
says which of its picks may replace retrieval's top candidate (``none``: any listed one;
``derivation``: only one the relation knowledge's derivation reaches).

    python -m bench.fit_choice_margin --dataset ../shared/data/pathquestion/pq-3h \\
        --store /tmp/pq/pq-3h/store --split dev --llm local --checks none,derivation \\
        --memo /tmp/pq/replies-pq3-dev.json --out /tmp/pq/margin-pq3-dev.json

Procedure (fixed before looking at any test figure): the ``lokg`` method of ``lokg eval``
(policy lokg, topic entities given, B = ``--budget``, reader mode choice) is run over every
question of the split once with reader ``none`` and once per check of ``--checks`` and margin
of ``--grid``; for each check the fitted margin is the **largest** grid value whose H@1 with
the reader is at least H@1 with reader ``none`` minus ``--tolerance`` (default 0.01, one
point). Margin 0 offers only exact ties, so a reader that loses even there fits 0 (and the
script says so). The fitted check is the one with the highest H@1 at its fitted margin (a tie:
the first of ``--checks``). The test split is never read.

A reply depends only on the prompt, and the prompt only on the knowledge, the question and the
listed candidates (a prefix of the top ``choice_candidates``), so replies are memoised by
prompt: each distinct (question, candidate list) costs one call, whatever the grid and the
check (the check does not change a prompt, only whether it is sent and what its pick counts
for). The local reader is greedy (temperature 0), so a memoised reply is the reply a new call
would give; ``--memo FILE`` keeps the replies across runs (a JSON object, prompt hash → reply).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from lokg.runtime.config import DEFAULT_BUDGET

GRID = "0,0.05,0.1,0.2,0.3,0.5,0.75,1.0"


class MemoLLM:
    """A reader whose replies are memoised by (system, prompt, choices, max_tokens), in
    ``path`` too when given; ``calls`` counts the model calls really made."""

    def __init__(self, inner, path: str | None = None):
        self.inner, self.name, self.model = inner, inner.name, getattr(inner, "model", None)
        self.calls_model = bool(inner.calls_model)
        self.constrains_choices = bool(getattr(inner, "constrains_choices", False))
        self.path = Path(path) if path else None
        self.replies: dict[str, str] = json.loads(self.path.read_text(encoding="utf-8")) \
            if self.path is not None and self.path.exists() else {}
        self.calls = 0

    def complete(self, prompt: str, *, max_tokens: int, system: str = "", **options):
        from lokg.runtime.llm import Completion

        key = hashlib.sha256(json.dumps([system, prompt, list(options.get("choices", ())),
                                         max_tokens]).encode("utf-8")).hexdigest()
        if key not in self.replies:
            self.calls += 1
            reply = self.inner.complete(prompt, max_tokens=max_tokens, system=system, **options)
            self.replies[key] = reply.text
            if self.path is not None:
                self.path.write_text(json.dumps(self.replies), encoding="utf-8")
            return reply
        return Completion(self.replies[key], 0, 0, 0.0, str(self.model or self.name), 0)


def h1_run(store: str, questions, llm, *, budget: int, margin: float, check: str = "none",
           against: list[float] | None = None) -> tuple[dict, list[float]]:
    """H@1 and calls/q of the ``lokg`` method at one margin and check, as ``lokg eval`` scores
    them, and each question's H@1; with ``against`` (each question's H@1 with reader none) also
    how many answers the reader made better and worse."""
    from lokg.evaluation.context import CountingLLM, EvalContext
    from lokg.evaluation.methods import make_methods
    from lokg.common.metrics import score
    from lokg.runtime.query import Runtime

    rt = Runtime.open(store, reader="choice", choice_margin=margin, choice_check=check)
    method = make_methods(["lokg"], EvalContext(rt, CountingLLM(llm), budget))["lokg"]
    hits, calls = [], 0
    for q in questions:
        prediction = method(q)
        hits.append(score(prediction.answers, q.answers).h1)
        calls += prediction.llm_calls
    n = len(questions)
    row = {"check": check, "margin": margin, "n": n, "H@1": round(sum(hits) / n, 4),
           "right": int(sum(hits)), "calls/q": round(calls / n, 3)}
    if against is not None:
        row["better"] = sum(h > h0 for h, h0 in zip(hits, against))
        row["worse"] = sum(h < h0 for h, h0 in zip(hits, against))
    return row, hits


def fitted(curve: list[dict], floor: float) -> float | None:
    """The largest margin whose H@1 reaches the floor; None when none does."""
    passing = [row["margin"] for row in curve if row["H@1"] >= floor - 1e-9]
    return max(passing) if passing else None


def main(argv: list[str] | None = None) -> dict:
    from lokg.common.datasets import load_dataset
    from lokg.runtime.llm import make_llm

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", required=True, help="a PathQuestion directory (dev.txt)")
    p.add_argument("--store", required=True, help="a store built by lokg eval --build")
    p.add_argument("--split", default="dev", choices=("train", "dev"))
    p.add_argument("--llm", default="local")
    p.add_argument("--grid", default=GRID, help="margins, comma-separated")
    p.add_argument("--checks", default="none",
                   help="query.choice_check values, comma-separated (none, derivation)")
    p.add_argument("--tolerance", type=float, default=0.01)
    p.add_argument("--budget", type=int, default=DEFAULT_BUDGET)
    p.add_argument("--memo", help="keep the replies in this JSON file (reused when it exists)")
    p.add_argument("--out", help="also write the result here (JSON)")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # the question encoder, as lokg eval --threads 1
    questions = load_dataset(f"pathquestion:{args.dataset}", args.split).questions
    none, none_hits = h1_run(args.store, questions, make_llm("none"), budget=args.budget,
                             margin=0.0)
    reader, curves = MemoLLM(make_llm(args.llm), args.memo), {}
    checks = args.checks.split(",")
    for check in checks:
        curve = curves[check] = []
        for margin in sorted(float(m) for m in args.grid.split(",")):
            started = time.perf_counter()
            curve.append(h1_run(args.store, questions, reader, budget=args.budget,
                                margin=margin, check=check, against=none_hits)[0])
            curve[-1]["seconds"] = round(time.perf_counter() - started, 1)
            print(json.dumps(curve[-1]), file=sys.stderr, flush=True)
    floor = none["H@1"] - args.tolerance
    margins = {check: fitted(curve, floor) for check, curve in curves.items()}
    at_fit = {check: next((row["H@1"] for row in curves[check] if row["margin"] == m), None)
              for check, m in margins.items()}
    best = max((c for c in checks if at_fit[c] is not None), key=lambda c: at_fit[c],
               default=None)  # max keeps the first of equal ones
    result = {"dataset": args.dataset, "split": args.split, "llm": args.llm,
              "budget": args.budget, "tolerance": args.tolerance, "none": none,
              "curves": curves, "model_calls": reader.calls, "floor": round(floor, 4),
              "fitted_margins": margins, "fitted_check": best,
              "fitted_margin": margins.get(best)}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()

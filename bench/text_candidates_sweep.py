"""Context recall of LOKG's knowledge on a reading set as ``query.max_candidates`` and
``query.passages`` grow (with and without restored sentences): how much of the budget the
candidate set can fill, and what dense passage seeds add.

    python -m bench.text_candidates_sweep --store /tmp/mqs --dataset musique-openie \\
        --candidates 20,60,150 --passages 0 --budgets 512,1024,2048
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from lokg.common.metrics import contains_answer
from lokg.evaluation.text_datasets import READING_SETS, load_reading_set
from lokg.runtime.query import Runtime
from lokg.testing import SHARED_DATA



def recall(rt: Runtime, questions, budget: int, sentences: bool) -> float:
    hits = 0
    for q in questions:
        answer = rt.ask(q.question, budget=budget, policy="lokg", source_sentences=sentences)
        hits += contains_answer("".join(t["line"] for t in answer.triples), q.answers)
    return hits / len(questions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--dataset", required=True, choices=list(READING_SETS))
    parser.add_argument("--data", type=Path, default=SHARED_DATA)
    parser.add_argument("--candidates", default="20,60,150")
    parser.add_argument("--passages", default="0,3", help="query.passages values")
    parser.add_argument("--budgets", default="512,1024,2048")
    args = parser.parse_args()
    questions = load_reading_set(args.dataset, args.data).dataset.questions
    print("max_candidates  passages  budget  lokg  lokg-tcr")
    with Runtime.open(args.store) as rt:
        for count, passages in itertools.product(map(int, args.candidates.split(",")),
                                                 map(int, args.passages.split(","))):
            rt.settings = {**rt.settings, "max_candidates": count, "passages": passages}
            for budget in map(int, args.budgets.split(",")):
                plain, restored = (recall(rt, questions, budget, s) for s in (False, True))
                print(f"{count:14d}  {passages:8d}  {budget:6d}  {plain:.2f}  {restored:8.2f}",
                      flush=True)


if __name__ == "__main__":
    main()

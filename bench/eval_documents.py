"""Text QA on graphs built from documents: context recall, EM, F1, tok/q and
calls/q per method × budget on a multi-hop reading set of ../shared/data.

    python -m bench.eval_documents --dataset musique-openie --work /tmp/lokg-docs
    lokg build --dump /tmp/lokg-docs/musique-openie/corpus.jsonl --format docs \\
        --store /tmp/lokg-docs/musique-openie/store
    python -m bench.eval_documents --dataset musique-openie --work /tmp/lokg-docs --llm none
    python -m bench.eval_documents --dataset hotpotqa-200 --store STORE --work /tmp/lokg-docs \\
        --methods lokg,chunk-rag --budgets 512 --llm local --limit 50 --json

The set's corpus (evaluation/text_datasets.py: exactly the paragraphs its questions are asked
over) is written as ``docs`` JSONL to ``WORK/<dataset>/corpus.jsonl``. Without a published
store (``--store``, default ``WORK/<dataset>/store``) the script prints the ``lokg build``
command that builds it and stops: it never builds. With one, each budget is a reading run of
evaluation.runner (``WORK/<dataset>/runs/<llm>-B<budget>/``: one JSONL line per question with
its knowledge, ``summary.json``); runs resume, and a changed setting in a run directory is
refused. Entities are linked from the question text (the sets have no topic entity).
``lokg-tcr-triples`` is lokg-tcr with no passage offered to ITTC (``query.passage_items`` 0,
the triples alone: LOKG before passage items), beside ``lokg`` / ``lokg-tcr`` with the
store's ``query.passage_items`` (or ``--passage-items N``) and dense chunk-RAG, in one run. The
methods are built once — chunk-rag embeds the chunks once when the build has no chunk vectors
— and the context's budget is set for each run. Reader ``none``: chunk-rag extracts no
answer, so its EM and F1 are 0 and only its context recall says something
(evaluation/baselines.py).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from lokg.evaluation.text_datasets import READING_SETS
from lokg.testing import SHARED_DATA

METHODS = "lokg-tcr-triples,lokg,lokg-tcr,chunk-rag"
BUDGETS = "256,512,1024,2048"
#: (summary key, header, format) of the printed table.
COLUMNS = (("context_recall", "context recall", "{:.3f}"), ("EM", "EM", "{:.3f}"),
           ("F1-SQuAD", "F1", "{:.3f}"), ("tok/q", "tok/q", "{:.1f}"),
           ("calls/q", "calls/q", "{:.2f}"), ("n", "n", "{:d}"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, choices=list(READING_SETS))
    parser.add_argument("--data", type=Path, default=SHARED_DATA,
                        help="the shared data root (default: $LOKG_SHARED_DATA or ../shared/data)")
    parser.add_argument("--store", type=Path, help="a store built from the set's corpus")
    parser.add_argument("--work", type=Path, default=Path("/tmp/lokg-docs"),
                        help="where the corpus, the default store and the runs go")
    parser.add_argument("--methods", default=METHODS)
    parser.add_argument("--budgets", default=BUDGETS, type=_budgets)
    parser.add_argument("--llm", default="none", help="reader: none | local | openai")
    parser.add_argument("--limit", type=int, help="only the first N questions")
    parser.add_argument("--json", action="store_true", help="print the summaries as JSON")
    parser.add_argument("--passage-ranking", choices=("dense", "graph"),
                        help="query.passage_ranking for the lokg methods (default: the build's); "
                             "graph runs go to runs/<llm>-B<budget>-graph/")
    parser.add_argument("--passage-items", type=int,
                        help="query.passage_items for the lokg methods but lokg-tcr-triples "
                             "(default: the build's); runs go to runs/<llm>-B<budget>-items<N>/")
    parser.add_argument("--passage-sentences", choices=("sources", "question", "auto"),
                        help="query.passage_sentences for the lokg methods (default: the "
                             "build's); runs go to runs/<llm>-B<budget>-sentences-<choice>/")
    parser.add_argument("--no-progress", action="store_true")
    return parser.parse_args(argv)


def _run_name(args: argparse.Namespace, budget: int) -> str:
    """A run's directory under runs/: the reader and budget, then the settings given."""
    return (f"{args.llm}-B{budget}" + ("-graph" if args.passage_ranking == "graph" else "")
            + ("" if args.passage_items is None else f"-items{args.passage_items}")
            + ("" if args.passage_sentences is None else f"-sentences-{args.passage_sentences}"))


def _budgets(text: str) -> list[int]:
    try:
        budgets = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"budgets {text!r}: comma-separated integers") from None
    if not budgets or min(budgets) < 1:
        raise argparse.ArgumentTypeError(f"budgets {text!r}: positive integers")
    return budgets


def build_command(corpus: Path, store: Path) -> str:
    """The command that builds the store this script evaluates, from the corpus it wrote."""
    return shlex.join(["lokg", "build", "--dump", str(corpus), "--format", "docs",
                       "--store", str(store)])


def run_budgets(args: argparse.Namespace, reading_set, store: Path, command: str) -> dict:
    """budget → method → summary, one reading run per budget (module docstring)."""
    from lokg.evaluation.context import CountingLLM, EvalContext
    from lokg.evaluation.methods import METHODS as REGISTRY, make_methods, method_names
    from lokg.evaluation.runner import check_run_file, evaluate, merge_summary, write_summary
    from lokg.runtime.llm import make_llm
    from lokg.runtime.query import Runtime

    names = method_names(args.methods)
    data = reading_set.dataset
    questions = data.questions[:args.limit] if args.limit else data.questions
    ranking = {k: getattr(args, k) for k in ("passage_ranking", "passage_items",
                                             "passage_sentences") if getattr(args, k) is not None}
    rt = Runtime.open(store, **ranking)
    llm = CountingLLM(make_llm(args.llm))
    results = {}
    for budget in args.budgets:
        # methods hold their own copy of the context (one per entity mode): made per budget
        ctx = EvalContext(rt, llm, budget, entities="link")
        methods = make_methods(names, ctx)
        out = args.work / args.dataset / "runs" / _run_name(args, budget)
        settings = {"dataset": data.describe(), "llm": args.llm, "budget": budget, **ranking,
                    "model": None if ctx.llm.model is None else str(ctx.llm.model),
                    "entities": "link", "stores": {"store": rt.build_id}, "reading": True}
        check_run_file(out, settings, command)
        summary = evaluate(methods, questions, out, progress=not args.no_progress, reading=True)
        write_summary(out, merge_summary(out, summary, list(REGISTRY)))
        results[budget] = summary
    return results


def table(results: dict) -> str:
    """One Markdown row per method × budget."""
    rows = ["| method | B | " + " | ".join(h for _, h, _ in COLUMNS) + " |",
            "|---|--:|" + "--:|" * len(COLUMNS)]
    methods = list(dict.fromkeys(m for summary in results.values() for m in summary))
    for method in methods:
        for budget, summary in results.items():
            values = summary[method]
            cells = ["—" if values[k] is None else fmt.format(values[k]) for k, _, fmt in COLUMNS]
            rows.append(f"| `{method}` | {budget} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    from lokg.evaluation.text_datasets import load_reading_set, write_corpus
    from lokg.runtime.contract import Store
    from lokg.runtime.errors import LokgError

    args = parse_args(argv)
    command = shlex.join(["python", "-m", "bench.eval_documents", *(argv or sys.argv[1:])])
    try:
        reading_set = load_reading_set(args.dataset, args.data)
        corpus = write_corpus(reading_set.documents, args.work / args.dataset / "corpus.jsonl")
        store = args.store or args.work / args.dataset / "store"
        print(f"{args.dataset}: {len(reading_set.dataset.questions)} questions, "
              f"{len(reading_set.documents)} documents in {corpus}", file=sys.stderr)
        if not store.is_dir() or Store(store).current_id() is None:
            print(f"no published build at {store}; build it with:\n  "
                  f"{build_command(corpus, store)}", file=sys.stderr)
            return 2 if args.store else 0
        results = run_budgets(args, reading_set, store, command)
    except LokgError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"dataset": args.dataset, "llm": args.llm, "runs": results}, indent=2)
          if args.json else table(results), end="\n" if args.json else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())

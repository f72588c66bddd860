"""The PathQuestion tables of docs/BENCHMARKS.md: every method × reader on PQ-2H and PQ-3H test.

    python -m bench.eval_pathquestion --data ../shared/data/pathquestion --work /tmp/lokg-pq
    python -m bench.eval_pathquestion --llm none --methods lokg,kaping --limit 50
    python -m bench.eval_pathquestion --llm none,local --methods lokg --reader choice
    python -m bench.eval_pathquestion --llm none --methods lokg --policies route --entities gold,link

For each dataset (``pq-2h``, ``pq-3h``) it builds, once, a store from ``kb.txt`` and a second
one with ``scos_merge.enabled=false`` (for ``lokg-no-scos``) under ``WORK/<dataset>/``, then runs
``lokg eval`` (``evaluation.cli.run_eval``) on the test split for each reader into
``WORK/<dataset>/<reader>/``. Runs resume: rerunning the command recomputes nothing that is
finished, and reproduces the summaries exactly (latency aside). The Markdown it prints (and
writes to ``--markdown``) holds one table per dataset with every method × reader, the LOKG
paper's reported numbers for context, and the exact commands that made it. Two diagnostics
are added from the JSONL lines: ``T_after/q`` (knowledge tokens in the prompt, spent or not —
the ``none`` reader spends none) and ``gold in knowledge`` (share of questions whose injected
triples name a gold answer: what any reader of that knowledge could at best get right).
``--entities gold,link`` runs every method with the gold topic entities and with linking, as
rows ``<method>@gold`` and ``<method>@link``; each run's breakdown (where the answers were
lost, evaluation/breakdown.py) follows the dataset's table.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from lokg.runtime.config import DEFAULT_BUDGET

DATASETS = ("pq-2h", "pq-3h")
READERS = ("none", "local")
#: Reported by the LOKG paper (H@1 with DeepSeek-chat / Qwen3.7-Max; 101–236 tok/q, 1 call) and,
#: there, for Think-on-Graph (7–10 calls) — context only, other readers than ours.
PAPER = {
    "pq-2h": [("LOKG paper (DeepSeek-chat / Qwen3.7-Max)", "0.720 / 0.780", "101–236", "1"),
              ("ToG as reported by the LOKG paper", "0.820", "—", "7–10")],
    "pq-3h": [("LOKG paper (DeepSeek-chat / Qwen3.7-Max)", "0.584 / 0.649", "101–236", "1"),
              ("ToG as reported by the LOKG paper", "0.707", "—", "7–10")],
}
#: (summary key or diagnostic, header, format); the diagnostics come from the JSONL lines.
COLUMNS = (("H@1", "H@1", "{:.3f}"), ("Hit", "Hit", "{:.3f}"), ("F1", "F1", "{:.3f}"),
           ("TCR", "TCR", "{:.3f}"), ("tok/q", "tok/q", "{:.1f}"),
           ("calls/q", "calls/q", "{:.2f}"), ("P@1K", "P@1K", "{:.2f}"),
           ("H@1K", "H@1K", "{:.2f}"), ("knowledge/q", "T_after/q", "{:.1f}"),
           ("gold_in_knowledge", "gold in knowledge", "{:.3f}"),
           ("latency_ms_mean", "latency ms", "{:.0f}"), ("failed_calls", "failed calls", "{:d}"))


def diagnostics(run_dir: Path, method: str, ids: set[str]) -> dict:
    """Mean knowledge tokens injected (T_after; what the prompt carries, spent or not), the
    share of questions whose knowledge names a gold answer (an upper bound for any reader), and
    H@1 over just these questions (to set a reader run on a subset beside the full ones)."""
    from lokg.common.metrics import normalise_answer, score

    lines = (run_dir / method / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    records = [r for r in map(json.loads, lines) if r["id"] in ids]
    found = 0
    for r in records:
        gold = {normalise_answer(g) for g in r["gold"]}
        named = {normalise_answer(t[k]) for t in r["triples"] for k in ("s", "o")}
        found += bool(gold & named)
    return {"knowledge/q": sum(r["tokens"]["knowledge"] for r in records) / len(records),
            "gold_in_knowledge": found / len(records),
            "h1_of_these": sum(score(r["predicted"], r["gold"]).h1 for r in records) / len(records)}


TIGHT_METHODS = ("lokg", "lokg-no-ittc", "lokg-no-relknow")


def run_dir(dataset: str, run: str, entities: str) -> str:
    """``<dataset>/<run>``, with ``-<entities>`` unless gold alone (the runs made before
    linking could be chosen keep their directories)."""
    return f"{dataset}/{run}" + ("" if entities == "gold" else f"-{entities.replace(',', '-')}")


def tight_budget_rows(name: str, budget: int, run_dir: Path, ids: set[str]) -> list[str]:
    """One row of the tight-budget table: TCR, T_after and gold in knowledge of ITTC, the
    uniform template and ITTC without the relation feeds, reader none."""
    summary = json.loads((run_dir / "summary.json").read_text())
    diag = {m: diagnostics(run_dir, m, ids) for m in TIGHT_METHODS}
    cells = [" / ".join(f"{summary[m]['TCR']:.3f}" for m in TIGHT_METHODS[:2]),
             " / ".join(f"{diag[m]['knowledge/q']:.1f}" for m in TIGHT_METHODS[:2]),
             " / ".join(f"{diag[m]['gold_in_knowledge']:.3f}" for m in TIGHT_METHODS)]
    return [f"| {name.upper()} | {budget} | " + " | ".join(cells) + " |"]


def table(name: str, n_questions: int, runs: dict[str, dict]) -> list[str]:
    """One dataset: a row per method × reader, then the paper's numbers."""
    lines = [f"#### {name.upper()} test ({n_questions} questions)", "",
             "| method | reader | n | " + " | ".join(h for _, h, _ in COLUMNS) + " |",
             "|---|---|--:|" + "--:|" * len(COLUMNS)]
    methods = list(dict.fromkeys(m for summary in runs.values() for m in summary))
    for method in methods:
        for reader, summary in runs.items():
            if method not in summary:
                continue
            values = summary[method]
            cells = ["—" if values.get(k) is None else fmt.format(values[k])
                     for k, _, fmt in COLUMNS]
            lines.append(f"| `{method}` | {reader} | {values['n']} | " + " | ".join(cells) + " |")
    for label, h1, tok, calls in PAPER[name]:
        cells = {"H@1": h1, "tok/q": tok, "calls/q": calls}
        lines.append(f"| {label} | reported | — | "
                     + " | ".join(cells.get(k, "") for k, _, _ in COLUMNS) + " |")
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared"
                                              / "data" / "pathquestion"),
                        help="directory holding pq-2h/ and pq-3h/")
    parser.add_argument("--work", default="/tmp/lokg-pq", help="stores and run directories")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--llm", default=",".join(READERS), help="readers, comma-separated")
    parser.add_argument("--methods", default="all")
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET)
    parser.add_argument("--limit", type=int, help="only the first N test questions")
    parser.add_argument("--local-limit", type=int,
                        help="reader local: only the first N test questions (SmolLM2 on CPU "
                             "takes seconds a call)")
    parser.add_argument("--tight-budgets", default="",
                        help="budgets, comma-separated: reader none, methods "
                             f"{','.join(TIGHT_METHODS)}, one table of TCR, T_after and gold "
                             "in knowledge")
    parser.add_argument("--policies", default="lokg",
                        help="policies, comma-separated (lokg, precision, route); policies "
                             "other than lokg run the lokg method only")
    parser.add_argument("--entities", default="gold",
                        help="topic entities: gold, link or gold,link (rows <method>@<mode>)")
    parser.add_argument("--reader", choices=("choice", "free"),
                        help="how the one call answers (query.reader; default: the store's); "
                             "runs of the calling readers go to WORK/<dataset>/<reader>-<mode>")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="build config override (repeatable)")
    parser.add_argument("--markdown", help="also write the Markdown here")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    from lokg.evaluation.cli import command_line, run_eval
    from lokg.common.datasets import load_dataset
    from lokg.evaluation.report import breakdown_table

    work = Path(args.work)
    command = shlex.join(["python", "-m", "bench.eval_pathquestion", *(
        sys.argv[1:] if argv is None else argv)])
    out = ["Regenerate with:", "", f"    {command}", ""]
    commands = []
    tight = ["| dataset | B | TCR ITTC / uniform | T_after/q ITTC / uniform | gold in knowledge "
             "ITTC / uniform / ITTC without relation feeds |", "|---|--:|--:|--:|--:|"]
    for name in args.datasets.split(","):
        directory = Path(args.data) / name
        runs, run_dirs = {}, {}
        questions = load_dataset(f"pathquestion:{directory}", "test").questions
        for reader, policy in ((r, p) for r in args.llm.split(",")
                               for p in args.policies.split(",")):
            limit = args.local_limit if reader == "local" and args.local_limit else args.limit
            label, run = ((reader, reader) if policy == "lokg"
                          else (f"{reader}, policy {policy}", f"{reader}-{policy}"))
            mode = args.reader if reader != "none" else None
            if mode:
                label, run = f"{label}, reader {mode}", f"{run}-{mode}"
            options = dict(dataset=f"pathquestion:{directory}", split="test",
                           store=str(work / name / "store"),
                           store_no_scos=str(work / name / "store-no-scos"),
                           methods=args.methods if policy == "lokg" else "lokg", llm=reader,
                           policy=policy, budget=args.budget, entities=args.entities,
                           out=str(work / run_dir(name, run, args.entities)), build=True,
                           overrides=args.overrides, limit=limit, reader=mode)
            print(f"== {name} test, reader {label}", file=sys.stderr)
            summary = run_eval(**options, progress=not args.no_progress,
                               log=lambda m: print(m, file=sys.stderr))
            ids = {q.id for q in questions[:limit]}
            runs[label] = {m: {**v, **diagnostics(Path(options["out"]), m, ids)}
                           for m, v in summary.items()}
            run_dirs[label] = Path(options["out"])
            commands.append(command_line(**{**options, "policy": None if policy == "lokg"
                                            else policy}))
        out += table(name, len(questions[:args.limit]), runs)
        out += [line for label, summary in runs.items() if breakdown_table(summary)
                for line in (f"Where the answers were lost, reader {label}:", "",
                             breakdown_table(summary))]
        if args.local_limit and "local" in runs:
            ids = {q.id for q in questions[:args.local_limit]}
            same = [f"{label} `{m}` {diagnostics(path, m, ids)['h1_of_these']:.3f}"
                    for label, path in run_dirs.items() if label.startswith("none")
                    for m in runs[label] if m in ("lokg", "lokg-no-relknow")]
            out += [f"H@1 of reader none on the same first {args.local_limit} questions: "
                    + ", ".join(same), ""]
        for budget in (int(b) for b in args.tight_budgets.split(",") if b):
            options = dict(dataset=f"pathquestion:{directory}", split="test",
                           store=str(work / name / "store"), methods=",".join(TIGHT_METHODS),
                           llm="none", budget=budget, out=str(work / name / f"none-b{budget}"),
                           build=True, overrides=args.overrides, limit=args.limit)
            print(f"== {name} test, reader none, B = {budget}", file=sys.stderr)
            run_eval(**options, progress=not args.no_progress,
                     log=lambda m: print(m, file=sys.stderr))
            tight += tight_budget_rows(name, budget, Path(options["out"]),
                                       {q.id for q in questions[:args.limit]})
            commands.append(command_line(**options))
    if args.tight_budgets:
        out += ["Tight budgets, reader none:", "", *tight, ""]
    out += ["Each run, as `lokg eval`:", ""] + [f"    {c}" for c in commands] + [""]
    text = "\n".join(out)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

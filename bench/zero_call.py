"""Zero-call answers on real question sets: how often the graph answers alone, and how right.

    python -m bench.zero_call --data ../shared/data --work W
    python -m bench.zero_call --data ../shared/data --work W --lokg OLD_TREE/.venv/bin/lokg

Each set is asked as a team with its own graph would — policy ``route``, reader ``none``, the
topic entities given — by ``lokg eval`` (the stores built once under ``--work`` and reused):
PathQuestion PQ-2H / PQ-3H (relation knowledge fitted on their labelled train split) and the
cwq-derived questions (no labelled questions: real web wording over Freebase naming). Per set
and budget: route H@1; the share of questions answered with **zero calls** (``route.source``
``derived``: "derived from the graph") and the H@1 of those (*precision*); the share whose
injected knowledge holds a gold answer; knowledge tokens per question, and per derived answer;
the query latency's p50 and p95 (``latency_ms``: one process, the machine as it is);
KAPING beside on the unlabelled set. ``--lokg`` runs another tree's ``lokg`` (the previous
version of the code, in the same run; each tree builds its own stores, as a build records its
query settings): the figures then read as before / after.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from lokg.common.metrics import contains_answer

#: (name, dataset spec, extra eval arguments, methods) of each set; ``{data}`` is ``--data``.
SETS = {
    "pq-2h": ("pathquestion:{data}/pathquestion/pq-2h", ["--split", "test"], "lokg"),
    "pq-3h": ("pathquestion:{data}/pathquestion/pq-3h", ["--split", "test"], "lokg"),
    "cwq": ("jsonl:{data}/cwq-derived/questions.jsonl",
            ["--kb", "{data}/cwq-derived/kb.tsv"], "lokg,kaping"),
}


def run_eval(lokg: str, name: str, data: Path, work: Path, budget: int, limit: int | None,
             reuse: bool = False) -> Path:
    """One ``lokg eval`` of a set at a budget (the store built when missing); its run dir
    (with ``reuse``, a run already there is read again, not redone)."""
    dataset, extra, methods = SETS[name]
    tree = Path(lokg).parents[2].name if len(Path(lokg).parents) > 2 else "lokg"
    out = work / "runs" / tree / f"{name}-b{budget}"
    store = work / "stores" / tree / name  # each tree builds its own: build settings differ
    args = [lokg, "eval", "--dataset", dataset.format(data=data), "--store", str(store),
            "--methods", methods, "--llm", "none", "--policy", "route", "--entities", "gold",
            "--budget", str(budget), "--out", str(out), "--no-progress", "--build",
            *[a.format(data=data) for a in extra]]
    if limit:
        args += ["--limit", str(limit)]
    if not (reuse and (out / "run.json").exists()):
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    return out


def knowledge(record: dict) -> str:
    """The injected knowledge of a prediction: its encoded lines (a baseline's triples, which
    record none, as subject relation object)."""
    return "\n".join(t.get("line") or f"{t['s']} {t['r']} {t['o']}" for t in record["triples"])


def spelled(gold: list[str]) -> list[str]:
    """Gold answers as the store names them too (PathQuestion's ``united_kingdom`` is the
    entity ``united kingdom``; H@1 normalises alike)."""
    return list(dict.fromkeys([*gold, *(g.replace("_", " ") for g in gold)]))


def figures(predictions: Path) -> dict:
    """The row of one method's predictions.jsonl."""
    rows = [json.loads(line) for line in predictions.read_text().splitlines() if line.strip()]
    derived = [r for r in rows if ((r.get("details") or {}).get("route") or {}).get("source")
               == "derived"]
    n = len(rows)

    def mean(values):
        return sum(values) / len(values) if values else None

    return {
        "n": n, "h1": mean([r["scores"]["H@1"] for r in rows]),
        "zero_call": len(derived) / n if n else None,
        "precision": mean([r["scores"]["H@1"] for r in derived]),
        "gold_in_knowledge": mean([contains_answer(knowledge(r), spelled(r["gold"]))
                                   for r in rows]),
        "tokens": mean([r["tokens"]["knowledge"] for r in rows]),
        "derived_tokens": mean([r["tokens"]["knowledge"] for r in derived]),
        "p50_ms": percentile([r["latency_ms"] for r in rows], 50),
        "p95_ms": percentile([r["latency_ms"] for r in rows], 95),
    }


def percentile(values: list[float], q: int) -> float | None:
    """The q-th percentile of some values (the nearest rank), None for none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, len(ordered) * q // 100)] if ordered else None


def cell(value, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="../shared/data")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--sets", default="pq-2h,pq-3h,cwq")
    parser.add_argument("--budgets", default="512,2048")
    parser.add_argument("--limit", type=int, default=1000, help="questions of each set at most")
    parser.add_argument("--reuse", action="store_true", help="read runs already made again")
    parser.add_argument("--lokg", action="append", default=[],
                        help="a tree's lokg executable (repeatable; default: this one's)")
    args = parser.parse_args(argv)
    trees = args.lokg or ["lokg"]
    print("| code | set | B | method | n | H@1 | zero-call | precision | gold in knowledge "
          "| tok/q | derived tok/q | p50 / p95 ms |")
    print("|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name in args.sets.split(","):
        for budget in (int(b) for b in args.budgets.split(",")):
            for lokg in trees:
                out = run_eval(lokg, name, args.data.resolve(), args.work.resolve(), budget,
                               args.limit, args.reuse)
                for method in SETS[name][2].split(","):
                    f = figures(out / method / "predictions.jsonl")
                    print(f"| {lokg} | {name} | {budget} | {method} | {f['n']} | "
                          f"{cell(f['h1'])} | {cell(f['zero_call'])} | {cell(f['precision'])} | "
                          f"{cell(f['gold_in_knowledge'])} | {cell(f['tokens'], 0)} | "
                          f"{cell(f['derived_tokens'], 0)} | {cell(f['p50_ms'], 0)} / "
                          f"{cell(f['p95_ms'], 0)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

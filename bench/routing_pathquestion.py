"""Relation knowledge on PathQuestion: the precision gate, the routed answers and the
relation feeds, on one split (test by default) of PQ-2H / PQ-3H.

    python -m bench.routing_pathquestion --dataset ../shared/data/pathquestion/pq-2h \\
        --store /tmp/engF/pq2 --build --readers none,local --out /tmp/engF/pq2-test.json

``--build`` builds the store from ``DIR/kb.txt`` when it has no published build, through the
whole pipeline with ``gat.questions`` and ``relation_knowledge.questions`` = ``DIR/train.txt``
and ``relation_knowledge.dev_questions`` = ``DIR/dev.txt`` (every threshold is picked on dev by
the stage; this script reads only the split it reports). Topic entities are the dataset's (as
``lokg eval --entities gold``). Runs, each over every question of the split:

* ``precision`` (reader none): coverage (answered / n) and precision (H@1 of the answered)
  with 95 % Wilson intervals;
* ``route`` per reader, with both relation feeds on (λ_rel = ``--relation-weight``, chosen on
  dev from 1, 2, 5, 10, 20, 50; chain boost on): H@1, Hit, F1, tok/q, calls/q
  (common.metrics), the share answered from the graph, and the precision of those;
* ``lokg`` per reader, with both relation feeds off, as the baseline —
  for ``local`` on the first ``--lokg-local-limit`` questions only (SmolLM2 on two shared CPU
  cores takes ~40–100 s a call);
* the item-4 ablations with reader none: ``lokg`` × relation term (λ_rel = ``--relation-weight``
  or 0) × chain boost, at B = ``--budget`` and at the tight ``--tight-budget``: H@1 and F1 of the
  none answer, and *gold in knowledge* (a gold answer named by the triples ITTC kept — what
  any reader of that knowledge could at best get right; the chain boost acts only there).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from lokg.runtime.config import DEFAULT_BUDGET


def ensure_store(store: str, data: Path, build: bool) -> None:
    """The store ``lokg eval --build`` would build: GAT's path term and the relation knowledge
    fitted on ``train.txt``, thresholds on ``dev.txt``."""
    from lokg.evaluation.cli import ensure_store as build_store
    from lokg.common.datasets import load_dataset
    from lokg.evaluation.runner import EvalError

    try:
        build_store(store, load_dataset(f"pathquestion:{data}", "test"), build=build, kb=None,
                    overrides=(), scos=True, log=lambda m: print(m, file=sys.stderr))
    except EvalError as exc:
        sys.exit(str(exc))


def wilson(hits: int, n: int) -> list[float]:
    from lokg.training.relation_knowledge import wilson as interval

    return [round(x, 4) for x in interval(hits, n)]


def gold_in_knowledge(answer, gold) -> bool:
    from lokg.common.metrics import normalise_answer

    wanted = {normalise_answer(g) for g in gold}
    return bool(wanted & {normalise_answer(t[k]) for t in answer.triples for k in ("s", "o")})


def run(rt, questions, *, policy: str, llm, budget: int, relation_weight: float = 0.0,
        chain_boost: bool = False) -> dict:
    """Every question through ``rt.ask``; the evaluation metrics plus the route's counts."""
    from lokg.common.metrics import Outcome, score, summarise

    outcomes, derived, derived_hits, answered, answered_hits, in_knowledge = [], 0, 0, 0, 0, 0
    for q in questions:
        started = time.perf_counter()
        a = rt.ask(q.question, entities=list(q.topic_entities), policy=policy, llm=llm,
                   budget=budget, relation_weight=relation_weight, chain_boost=chain_boost)
        s = score(a.answers, q.answers)
        outcomes.append(Outcome(s, a.tokens["prompt"] + a.tokens["completion"], a.llm_calls,
                                a.tokens["knowledge"], a.tokens["naive"],
                                (time.perf_counter() - started) * 1000.0,
                                int(a.fallback and a.llm_calls > 0)))
        if a.answers:
            answered += 1
            answered_hits += int(s.h1)
        if a.route and a.route.get("source") == "derived":
            derived += 1
            derived_hits += int(s.h1)
        in_knowledge += gold_in_knowledge(a, q.answers)
    out = summarise(outcomes)
    n = len(questions)
    out.update({
        "answered": answered, "coverage": round(answered / n, 4),
        "answered_precision": round(answered_hits / answered, 4) if answered else None,
        "answered_precision_95ci": wilson(answered_hits, answered),
        "coverage_95ci": wilson(answered, n),
        "derived": derived, "derived_share": round(derived / n, 4),
        "derived_precision": round(derived_hits / derived, 4) if derived else None,
        "gold_in_knowledge": round(in_knowledge / n, 4),
    })
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, type=Path, help="PathQuestion directory")
    parser.add_argument("--store", required=True)
    parser.add_argument("--build", action="store_true")
    parser.add_argument("--split", default="test", choices=("dev", "test"))
    parser.add_argument("--readers", default="none", help="comma-separated: none, local")
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET)
    parser.add_argument("--tight-budget", type=int, default=128)
    parser.add_argument("--relation-weight", type=float, default=20.0)
    parser.add_argument("--lokg-local-limit", type=int, default=20)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from lokg.common.datasets import load_pathquestion
    from lokg.runtime.llm import make_llm
    from lokg.runtime.query import Runtime

    ensure_store(args.store, args.dataset, args.build)
    rt = Runtime.open(args.store)
    if rt.relknow is None:
        sys.exit(f"{args.store}: build {rt.build_id} has no relation knowledge")
    questions = load_pathquestion(args.dataset, args.split).questions[: args.limit]
    stage = rt.build.manifest["report"]["stages"].get("relation_knowledge", {})
    results: dict = {"dataset": str(args.dataset), "split": args.split, "n": len(questions),
                     "build": rt.build_id, "thresholds": stage.get("thresholds"),
                     "dev_selection": stage.get("selection"), "runs": {}}
    runs = results["runs"]

    def record(name: str, **kw) -> None:
        started = time.perf_counter()
        runs[name] = run(rt, kw.pop("questions", questions), **kw)
        runs[name]["seconds"] = round(time.perf_counter() - started, 1)
        print(f"{name}: {json.dumps(runs[name])}", file=sys.stderr)

    none = make_llm("none")
    record("precision", policy="precision", llm=none, budget=args.budget)
    for weight in (0.0, args.relation_weight):
        for boost in (False, True):
            for budget in (args.budget, args.tight_budget):
                record(f"lokg rel={weight:g} boost={int(boost)} B={budget}", policy="lokg",
                       llm=none, budget=budget, relation_weight=weight, chain_boost=boost)
    for reader in args.readers.split(","):
        llm = none if reader == "none" else make_llm(reader)
        record(f"route {reader}", policy="route", llm=llm, budget=args.budget,
               relation_weight=args.relation_weight, chain_boost=True)
        if reader != "none":
            record(f"lokg {reader} (first {args.lokg_local_limit})", policy="lokg", llm=llm,
                   budget=args.budget, questions=questions[: args.lokg_local_limit])
    text = json.dumps(results, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()

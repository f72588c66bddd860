"""Query latency on a store with a wide schema: more than 1,000 relations, real question wording.

    python -m bench.wide_schema --data ../shared/data --work W

The store is built (once, reused) from the cwq-derived KB (748 Freebase-named relations) and
the OpenIE triples of the first ``--openie-docs`` musique-openie passages (free-text relation
phrases: about 800 more for 200 passages) — a schema as wide as the web-question subgraphs
KGQA work uses, made of relations real graphs have. The cwq-derived questions are asked with
their topic entities given, reader none, by ``bench.query_latency`` twice in one run: the
default policy (``route``: relation knowledge consulted) and ``lokg`` with the relation feeds
off (no relation-knowledge step) as the reference on the same store, so the relation
knowledge's cost reads as a ratio on a shared, noisy machine. Beside the wall-clock
percentiles: the process's CPU time per question (p50; what preemption on a loaded host does
not inflate) and the digest of every answer, token count and emitted line
(``bench.query_latency``), so two versions of the code show whether their outputs are equal.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def write_kb(data: Path, target: Path, openie_docs: int) -> int:
    """The union KB as TSV (subject, relation, object); returns its relation count."""
    lines = (data / "cwq-derived" / "kb.tsv").read_text(encoding="utf-8").splitlines()
    docs = json.loads((data / "musique-openie" / "openie_gpt-3.5-turbo-1106.json")
                      .read_text(encoding="utf-8"))["docs"][:openie_docs]
    for doc in docs:
        for triple in doc["extracted_triples"]:
            parts = [" ".join(str(x).split()) for x in triple] if len(triple) == 3 else []
            if all(parts):
                lines.append("\t".join(parts))
    target.write_text("\n".join(dict.fromkeys(lines)) + "\n", encoding="utf-8")
    return len({line.split("\t")[1] for line in lines if line.count("\t") == 2})


def build(kb: Path, store: Path) -> None:
    if (store / "CURRENT").exists():
        return
    subprocess.run([sys.executable, "-m", "lokg.cli", "build", "--dump", str(kb),
                    "--store", str(store)], check=True)


def measure(store: Path, questions: Path, n: int, policy_args: list[str]) -> dict:
    """One ``bench.query_latency`` run's JSON line (a process of its own)."""
    out = subprocess.run([sys.executable, "-m", "bench.query_latency", "--store", str(store),
                          "--questions-file", str(questions), "--given-entities",
                          "--questions", str(n), "--json", *policy_args],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="../shared/data")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--openie-docs", type=int, default=200)
    parser.add_argument("--questions", type=int, default=500)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    relations = write_kb(args.data, args.work / "kb.tsv", args.openie_docs)
    build(args.work / "kb.tsv", args.work / "store")
    questions = args.data / "cwq-derived" / "questions.jsonl"
    runs = {"route": measure(args.work / "store", questions, args.questions, []),
            "lokg, feeds off": measure(args.work / "store", questions, args.questions,
                                       ["--policy", "lokg", "--encoder-off"])}
    print(f"store {args.work / 'store'}: {relations:,} relations in the KB, "
          f"{runs['route']['relations']:,} in the store; {runs['route']['questions']} "
          "cwq-derived questions, topic entities given, reader none")
    print(f"{'policy':<18}{'total p50':>11}{'total p99':>11}{'relknow p50':>13}"
          f"{'relknow p99':>13}{'cpu p50':>9}  outputs sha256")
    for name, run in runs.items():
        ms = run["ms"]
        rk = ms.get("relknow", {"p50": float("nan"), "p99": float("nan")})
        print(f"{name:<18}{ms['total']['p50']:>11.1f}{ms['total']['p99']:>11.1f}"
              f"{rk['p50']:>13.1f}{rk['p99']:>13.1f}{ms['total cpu']['p50']:>9.1f}  "
              f"{run['outputs_sha256'][:16]}")
    ratio = runs["route"]["ms"]["total"]["p50"] / runs["lokg, feeds off"]["ms"]["total"]["p50"]
    print(f"route / reference, total p50: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

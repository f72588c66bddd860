"""Identify missing with an LLM (runtime/feedback_llm.py): how often a real
backend's reply is a valid sub-question list, and what it names, beside the structural record.

    python -m bench.feedback_identify_llm --store /tmp/bridge-after/feedback-precomputed/store \\
        --questions /tmp/bridge-after/questions.json --n 5 --llm local

Each of the first ``--n`` questions of a musique-shaped file is asked of the store twice with
reader none (policy and budget the runtime's defaults), once with ``query.feedback_llm`` set
and once without, each side logging to a temporary directory (the store's log is not
touched). Reported per question: the structural record's bridges, what the LLM side logged
(``identified_by``, its sub-questions or ``llm_problem``) and the call's seconds and tokens; in
all: valid replies, fallbacks by reason.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from lokg.runtime import feedback
from lokg.runtime.query import Runtime


def logged(store: str, questions: list[str], log: Path, **settings) -> tuple[list[dict], float]:
    """The record each question's answer logged (None where none), and the seconds it took."""
    rt = Runtime.open(store, feedback_dir=str(log), **settings)
    started = time.perf_counter()
    out = []
    try:
        for q in questions:
            before = len(feedback.read_log(log).records)
            rt.ask(q, llm="none")
            records = feedback.read_log(log).records
            out.append(records[-1] if len(records) > before else None)
    finally:
        rt.close()
    return out, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--questions", type=Path, required=True, help="musique-shaped JSON")
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--llm", default="local")
    args = parser.parse_args(argv)
    questions = [r["question"] for r in
                 json.loads(args.questions.read_text(encoding="utf-8"))[:args.n]]
    with tempfile.TemporaryDirectory(prefix="lokg-identify-") as tmp:
        plain, plain_s = logged(args.store, questions, Path(tmp) / "plain")
        by_llm, llm_s = logged(args.store, questions, Path(tmp) / "llm", feedback_llm=args.llm)
    rows = [{"question": q, "structural_bridges": [b["name"] for b in (p or {}).get("bridges", [])],
             "identified_by": (r or {}).get("identified_by"),
             "llm_problem": (r or {}).get("llm_problem"),
             "llm_sub_questions": [b["text"] for b in (r or {}).get("bridges", [])]
             if (r or {}).get("identified_by") == "llm" else [],
             "llm_usage": (r or {}).get("llm_usage")}
            for q, p, r in zip(questions, plain, by_llm)]
    summary = {"llm": args.llm, "questions": len(questions),
               "valid": sum(r["identified_by"] == "llm" for r in rows),
               "fallback": sum(r["identified_by"] == "structural" for r in rows),
               "not_logged": sum(r["identified_by"] is None for r in rows),
               "seconds_without_llm": round(plain_s, 1), "seconds_with_llm": round(llm_s, 1)}
    print(json.dumps({"summary": summary, "rows": rows}, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

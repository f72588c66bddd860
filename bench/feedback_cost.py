"""What the feedback log costs a query: the same questions asked of one build
opened twice, with the log on and off, interleaved question by question (the order within each
pair alternating), so both sides see the same host load.

    python -m bench.feedback_cost --store /tmp/fbstore --questions 2000

Reports p50/p99 of ``Runtime.ask`` on each side, their ratio, and the append alone
(:meth:`FeedbackLog.append_missing` timed on the answers of the "on" side): records written,
bytes, p50/p99/max microseconds. Questions: ``--questions-file`` (JSONL with ``question`` or one
per line), else the served build's entity names as in bench/load.py. The log goes to a
temporary directory (``--log-dir`` to keep it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import read_questions, store_questions
from lokg.runtime import feedback
from lokg.runtime.query import Runtime


def _timed(fn, *args) -> float:
    started = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - started) * 1000.0


def measure(store: str, questions: list[str], log_dir: str) -> dict:
    """Interleaved asks with the log on and off; the append timed apart on the answers."""
    on = Runtime.open(store, feedback_dir=log_dir)
    off = Runtime.open(store, feedback=False)
    for q in questions[:50]:  # warm both: encoder, buckets, caches
        on.ask(q), off.ask(q)
    sides: dict[str, list[float]] = {"on": [], "off": []}
    for i, q in enumerate(questions):
        pair = (("on", on), ("off", off)) if i % 2 == 0 else (("off", off), ("on", on))
        for name, rt in pair:
            sides[name].append(_timed(rt.ask, q))
    appender = feedback.FeedbackLog(Path(log_dir) / "append-only")
    answers = [off.ask(q) for q in questions]
    append_us = [_timed(appender.append_missing, a) * 1000.0 for a in answers]
    read = feedback.read_log(Path(log_dir) / "append-only")
    return {"store": store, "questions": len(questions), "build_id": on.build_id,
            **{f"ask_{k}_{p}_ms": round(float(np.percentile(v, q)), 3)
               for k, v in sides.items() for p, q in (("p50", 50), ("p99", 99))},
            "p50_ratio_on_off": round(float(np.median(sides["on"]) / np.median(sides["off"])), 3),
            "p99_ratio_on_off": round(float(np.percentile(sides["on"], 99)
                                            / np.percentile(sides["off"], 99)), 3),
            "records": len(read.records), "skipped": len(read.skipped),
            "log_bytes": sum(feedback.segment_sizes(Path(log_dir) / "append-only").values()),
            "by_kind": feedback.stats(read)["by_kind"],
            **{f"append_{p}_us": round(float(np.percentile(append_us, q)), 1)
               for p, q in (("p50", 50), ("p99", 99), ("max", 100))}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--questions", type=int, default=2000, help="how many questions")
    parser.add_argument("--questions-file")
    parser.add_argument("--log-dir", help="keep the log here (default: a temporary directory)")
    args = parser.parse_args()
    pool = read_questions(args.questions_file) if args.questions_file else \
        store_questions(args.store)
    questions = [pool[i % len(pool)] for i in range(args.questions)]
    with tempfile.TemporaryDirectory() as tmp:
        report = measure(args.store, questions, args.log_dir or tmp)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Run methods over questions: one JSONL line per question, resumable, then the summary.

Layout of a run directory::

    RUN_DIR/run.json                    what the run is (dataset + sha256, reader, budget, stores)
    RUN_DIR/<method>/predictions.jsonl  one line per question, in the order they were answered
    RUN_DIR/summary.json                method → metrics (common.metrics.SUMMARY_KEYS)
    RUN_DIR/summary.md                  the same as a Markdown table, with the command
    RUN_DIR/accuracy_vs_tokens.png      H@1 and F1 against tok/q, one point per method
    RUN_DIR/loss_by_step.png            the lost questions by the step that failed (lokg methods)

With several entity modes (``--entities gold,link``) ``<method>`` is ``<method>@<mode>``.
The lokg methods' lines carry a ``breakdown`` and their summaries its rows
(evaluation/breakdown.py): which step lost each answer.

**Resume.** Each line is written and flushed as soon as its question is answered. On start a
method's JSONL is read back: questions already there are not recomputed. A last line without
its newline (the process died mid-write) is cut off the file and its question is redone; a
complete line that is not JSON, or whose question text differs from the dataset's, stops the run
with the file and line named. ``run.json`` must match the run's settings (dataset file hash,
split, reader, budget, entity mode, store build ids): a changed setting in the same directory
is refused rather than mixed into one summary.

**Determinism.** The summary is computed from the JSONL lines of the run's questions in dataset
order, never from completion order, so an interrupted-and-resumed run and an uninterrupted one
agree. Every summary key except ``latency_ms_mean``/``latency_ms_p95`` is a function of the
predictions alone; with deterministic methods (greedy decoding, fixed store) the same command
twice gives the same ``summary.json`` apart from those two keys (``metrics.without_latency``).
A method summarised by an earlier command in the same directory keeps its entry until rerun.

**Reading runs** (``reading=True``: the multi-hop reading sets, evaluation/text_datasets.py)
add to each line the ``knowledge`` text the reader was given (``Prediction.knowledge``) and
its ``reading`` scores (EM, SQuAD F1, context recall: common.metrics), recomputed from
``predicted``, ``gold`` and ``knowledge`` when summarised, like ``scores``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lokg.common.datasets import Question
from lokg.common.metrics import Outcome, read_scores, score, summarise
from lokg.evaluation.breakdown import summarise_breakdown
from lokg.runtime.errors import LokgError

RUN_FILE = "run.json"
PREDICTIONS = "predictions.jsonl"
SUMMARY_JSON = "summary.json"


class EvalError(LokgError, RuntimeError):
    """A run cannot go on (corrupt predictions file, settings changed under a resume)."""


@dataclass
class Prediction:
    """What a method returns for one question (every method, LOKG or baseline)."""

    answers: list[str]
    status: str = "ok"  # ok | no_entity | fallback | ... (the runtime's status words)
    llm_calls: int = 0  # calls made, failed ones included
    failed_calls: int = 0  # calls that raised LLMError
    prompt_tokens: int = 0
    completion_tokens: int = 0
    knowledge_tokens: int = 0  # T_after (summed over calls for multi-call methods)
    naive_tokens: int = 0  # T_naive
    prompts: list[dict] = field(default_factory=list)  # {"system", "user"} per call
    triples: list[dict] = field(default_factory=list)  # the triples the answer rests on
    timings: dict[str, float] = field(default_factory=dict)  # step → ms
    error: str | None = None  # the message of a failed LLM call
    details: dict = field(default_factory=dict)  # linked entities, answer ids, build id …
    #: the knowledge text the reader was given (with reader none: would have been given);
    #: what a reading run's context recall is measured on
    knowledge: str = ""
    #: where a lokg method's answer went right or wrong (evaluation/breakdown.py); None for
    #: the baselines
    breakdown: dict | None = None


Method = Callable[[Question], Prediction]


def prediction_record(question: Question, pred: Prediction, latency_ms: float, *,
                      reading: bool = False) -> dict:
    """The JSONL line of one answered question (with ``reading``: its knowledge and reading
    scores too)."""
    record = {
        "id": question.id,
        "question": question.question,
        "gold": list(question.answers),
        "topic_entities": list(question.topic_entities),
        "gold_path": list(question.path),
        "predicted": list(pred.answers),
        "scores": score(pred.answers, question.answers).to_dict(),
        "status": pred.status,
        "llm_calls": pred.llm_calls,
        "failed_calls": pred.failed_calls,
        "error": pred.error,
        "tokens": {
            "prompt": pred.prompt_tokens, "completion": pred.completion_tokens,
            "total": pred.prompt_tokens + pred.completion_tokens,
            "knowledge": pred.knowledge_tokens, "naive": pred.naive_tokens,
        },
        "latency_ms": round(latency_ms, 3),
        "timings": pred.timings,
        "prompts": pred.prompts,
        "triples": pred.triples,
        "details": pred.details,
    }
    if pred.breakdown is not None:
        record["breakdown"] = pred.breakdown
    if reading:
        record["knowledge"] = pred.knowledge
        record["reading"] = read_scores(pred.answers, question.answers, pred.knowledge).to_dict()
    return record


def outcome_of(record: dict) -> Outcome:
    """The summary inputs of a JSONL line (scores recomputed from gold and predicted)."""
    tokens = record["tokens"]
    return Outcome(
        scores=score(record["predicted"], record["gold"]),
        tokens=int(tokens["prompt"]) + int(tokens["completion"]),
        calls=int(record["llm_calls"]),
        knowledge_tokens=int(tokens["knowledge"]),
        naive_tokens=int(tokens["naive"]),
        latency_ms=float(record["latency_ms"]),
        failed_calls=int(record["failed_calls"]),
        reading=read_scores(record["predicted"], record["gold"], record["knowledge"])
        if "reading" in record else None,
    )


def read_predictions(path: Path) -> dict[str, dict]:
    """id → record of a predictions file; a truncated last line is cut off the file."""
    if not path.exists():
        return {}
    data = path.read_bytes()
    complete = data.rfind(b"\n") + 1
    if complete < len(data):  # died mid-write: drop the partial line, redo its question
        with open(path, "r+b") as fh:
            fh.truncate(complete)
        data = data[:complete]
    records: dict[str, dict] = {}
    for lineno, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvalError(f"{path}:{lineno}: corrupt prediction line ({exc.msg}); delete the "
                            "line or the file to recompute it") from None
        if not isinstance(record, dict) or "id" not in record:
            raise EvalError(f"{path}:{lineno}: prediction line without an id")
        records[str(record["id"])] = record
    return records


def check_run_file(out_dir: Path, settings: dict, command: str) -> dict:
    """Write ``run.json``, or check that an existing one describes the same run; return it.

    Every setting must be equal, except ``stores``: a store named by both runs must hold the
    same build, and a store only one of them used (``store_no_scos`` for ``lokg-no-scos``) is
    added, so methods can be added to a run directory one command at a time.
    """
    path = out_dir / RUN_FILE
    commands: list[str] = []
    if path.exists():
        try:
            previous = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise EvalError(f"{path}: not JSON ({exc.msg})") from None
        old = previous.get("settings", {})
        changed = sorted(k for k in set(old) | set(settings)
                         if k != "stores" and old.get(k) != settings.get(k))
        old_stores, new_stores = old.get("stores", {}), settings.get("stores", {})
        changed += [f"stores.{k}" for k in sorted(set(old_stores) & set(new_stores))
                    if old_stores[k] != new_stores[k]]
        if changed:
            raise EvalError(
                f"{path}: this directory holds a run with other settings ({', '.join(changed)} "
                "differ); use another --out directory")
        settings = {**settings, "stores": {**old_stores, **new_stores}}
        commands = previous.get("commands", [])
    commands.append(command)
    out_dir.mkdir(parents=True, exist_ok=True)
    run = {"settings": settings, "commands": commands}
    path.write_text(json.dumps(run, indent=2, sort_keys=True) + "\n")
    return run


def run_method(name: str, method: Method, questions: Sequence[Question], out_dir: Path, *,
               progress: bool = True, reading: bool = False) -> list[dict]:
    """Answer every question not yet in ``<out_dir>/<name>/predictions.jsonl``; return the
    records of ``questions`` in their order."""
    from tqdm import tqdm

    path = out_dir / name / PREDICTIONS
    path.parent.mkdir(parents=True, exist_ok=True)
    done = read_predictions(path)
    for q in questions:
        if q.id in done and done[q.id].get("question") != q.question:
            raise EvalError(f"{path}: question {q.id} reads {done[q.id].get('question')!r} "
                            f"there but {q.question!r} in the dataset; use another --out")
    todo = [q for q in questions if q.id not in done]
    bar = tqdm(total=len(questions), initial=len(questions) - len(todo), desc=name, unit="q",
               file=sys.stderr, disable=not progress, dynamic_ncols=True)
    with open(path, "a", encoding="utf-8") as fh, bar:
        for q in todo:
            started = time.perf_counter()
            pred = method(q)
            latency = (time.perf_counter() - started) * 1000.0
            record = prediction_record(q, pred, latency, reading=reading)
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            fh.flush()
            done[q.id] = record
            bar.update(1)
        os.fsync(fh.fileno())
    return [done[q.id] for q in questions]


def evaluate(methods: dict[str, Method], questions: Sequence[Question], out_dir: str | Path, *,
             progress: bool = True, reading: bool = False) -> dict:
    """Run every method (in order) and return the summary of this run's methods (with
    ``reading``, the reading metrics too: module docstring)."""
    if not questions:
        raise EvalError("no questions to evaluate")
    out = Path(out_dir)
    summary = {}
    for name, method in methods.items():
        records = run_method(name, method, questions, out, progress=progress, reading=reading)
        summary[name] = summarise([outcome_of(r) for r in records])
        breakdown = summarise_breakdown(records)
        if breakdown is not None:
            summary[name]["breakdown"] = breakdown
    return summary


def merge_summary(out_dir: Path, summary: dict, order: Sequence[str]) -> dict:
    """This run's summary on top of the one already in ``out_dir`` (methods in ``order``)."""
    path = out_dir / SUMMARY_JSON
    merged = json.loads(path.read_text()) if path.exists() else {}
    merged.update(summary)
    rank = {name: i for i, name in enumerate(order)}
    return dict(sorted(merged.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))


def write_summary(out_dir: Path, summary: dict) -> Path:
    path = out_dir / SUMMARY_JSON
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path

"""The evaluation runner with fake methods: JSONL lines, resume, determinism, failures, reports."""

from __future__ import annotations

import json

import pytest

from lokg.common.datasets import Question
from lokg.evaluation.context import CountingLLM, MethodError
from lokg.evaluation.methods import method_names
from lokg.common.metrics import SUMMARY_KEYS, without_latency
from lokg.evaluation.report import markdown_table, plot_accuracy_vs_tokens, render_markdown
from lokg.evaluation.runner import (
    PREDICTIONS,
    EvalError,
    Prediction,
    check_run_file,
    evaluate,
    merge_summary,
    read_predictions,
)
from lokg.runtime.llm import Completion, LLMError

QUESTIONS = tuple(
    Question(f"q-{i:02d}", f"question number {i} ?", (f"answer_{i}", f"other_{i}"), (f"e{i}",),
             ("r",))
    for i in range(12))


class Fake:
    """Deterministic: right on even questions, wrong on odd ones; question 3 has a failed call."""

    def __init__(self, stop_after: int | None = None):
        self.calls = 0
        self.stop_after = stop_after

    def __call__(self, q: Question) -> Prediction:
        if self.stop_after is not None and self.calls >= self.stop_after:
            raise KeyboardInterrupt  # the run dies here
        self.calls += 1
        i = int(q.id[2:])
        failed = i == 3
        return Prediction(
            answers=[f"Answer {i}"] if i % 2 == 0 else ["nobody"],
            status="fallback" if failed else "ok", llm_calls=1, failed_calls=int(failed),
            prompt_tokens=100 + i, completion_tokens=5, knowledge_tokens=40, naive_tokens=80,
            prompts=[{"system": "s", "user": q.question}],
            error="timeout: boom" if failed else None)


def test_lines_and_summary(tmp_path):
    summary = evaluate({"fake": Fake()}, QUESTIONS, tmp_path, progress=False)
    lines = (tmp_path / "fake" / PREDICTIONS).read_text().splitlines()
    assert len(lines) == len(QUESTIONS)
    first = json.loads(lines[0])
    for key in ("id", "question", "gold", "predicted", "prompts", "tokens", "llm_calls",
                "timings", "triples", "status", "failed_calls", "latency_ms", "scores"):
        assert key in first
    assert first["scores"] == {"H@1": 1.0, "Hit": 1.0, "F1": pytest.approx(2 / 3)}
    assert first["tokens"] == {"prompt": 100, "completion": 5, "total": 105, "knowledge": 40,
                               "naive": 80}
    failed = json.loads(lines[3])
    assert failed["failed_calls"] == 1 and failed["status"] == "fallback"
    assert failed["error"] == "timeout: boom"

    s = summary["fake"]
    assert tuple(s) == SUMMARY_KEYS  # exactly the specified keys, in order
    assert s["n"] == 12 and s["H@1"] == 0.5 and s["Hit"] == 0.5
    assert s["F1"] == pytest.approx(0.5 * 2 / 3, abs=1e-6)
    assert s["TCR"] == 0.5 and s["calls/q"] == 1.0
    assert s["tok/q"] == pytest.approx(105 + 5.5)
    assert s["failed_calls"] == 1 and s["failed_questions"] == 1


def test_resume_after_interruption_and_truncated_line(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        evaluate({"fake": Fake(stop_after=5)}, QUESTIONS, tmp_path / "run", progress=False)
    path = tmp_path / "run" / "fake" / PREDICTIONS
    assert len(path.read_text().splitlines()) == 5
    # a process killed mid-write leaves half a line
    half = json.dumps({"id": "q-05", "question": QUESTIONS[5].question})[:30]
    with open(path, "a") as fh:
        fh.write(half)
    resumed = Fake()
    summary = evaluate({"fake": resumed}, QUESTIONS, tmp_path / "run", progress=False)
    assert resumed.calls == 7  # finished questions are not recomputed, the torn one is
    records = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["id"] for r in records] == [q.id for q in QUESTIONS]
    straight = evaluate({"fake": Fake()}, QUESTIONS, tmp_path / "straight", progress=False)
    assert without_latency(summary) == without_latency(straight)
    again = Fake()
    evaluate({"fake": again}, QUESTIONS, tmp_path / "run", progress=False)
    assert again.calls == 0  # everything done: nothing recomputed


def test_same_command_twice_same_summary(tmp_path):
    a = evaluate({"fake": Fake()}, QUESTIONS, tmp_path / "a", progress=False)
    b = evaluate({"fake": Fake()}, QUESTIONS, tmp_path / "b", progress=False)
    assert json.dumps(without_latency(a)) == json.dumps(without_latency(b))


def test_corrupt_or_foreign_lines_stop_the_run(tmp_path):
    evaluate({"fake": Fake()}, QUESTIONS[:3], tmp_path, progress=False)
    path = tmp_path / "fake" / PREDICTIONS
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "{broken\n" + lines[2])
    with pytest.raises(EvalError, match=r"predictions.jsonl:2: corrupt prediction line"):
        read_predictions(path)
    changed = (Question("q-00", "a different question ?", ("x",)),)
    path.write_text(lines[0])
    with pytest.raises(EvalError, match="q-00 reads"):
        evaluate({"fake": Fake()}, changed, tmp_path, progress=False)
    with pytest.raises(EvalError, match="no questions"):
        evaluate({"fake": Fake()}, (), tmp_path, progress=False)


def test_run_file_refuses_other_settings(tmp_path):
    settings = {"dataset": {"sha256": "a"}, "llm": "none", "budget": 2048}
    check_run_file(tmp_path, settings, "lokg eval --x 1")
    check_run_file(tmp_path, dict(settings), "lokg eval --x 2")
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["commands"] == ["lokg eval --x 1", "lokg eval --x 2"]
    with pytest.raises(EvalError, match="budget, llm differ"):
        check_run_file(tmp_path, {**settings, "budget": 1024, "llm": "local"}, "x")
    # stores: one more is added, a known one must hold the same build
    with_store = {**settings, "stores": {"store": "B1"}}
    (tmp_path / "run.json").unlink()
    check_run_file(tmp_path, with_store, "c1")
    run = check_run_file(tmp_path, {**settings, "stores": {"store_no_scos": "B2"}}, "c2")
    assert run["settings"]["stores"] == {"store": "B1", "store_no_scos": "B2"}
    with pytest.raises(EvalError, match="stores.store differ"):
        check_run_file(tmp_path, {**settings, "stores": {"store": "B3"}}, "c3")


def test_merge_keeps_earlier_methods_in_registry_order(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"tog": {"n": 1}, "lokg": {"n": 1}}))
    merged = merge_summary(tmp_path, {"kaping": {"n": 2}, "lokg": {"n": 2}},
                           ["lokg", "kaping", "tog"])
    assert list(merged) == ["lokg", "kaping", "tog"] and merged["lokg"] == {"n": 2}


def test_reports(tmp_path):
    summary = evaluate({"fake": Fake(), "other": Fake()}, QUESTIONS, tmp_path, progress=False)
    summary["none-reader"] = {**summary["fake"], "P@1K": None, "TCR": None, "tok/q": 0.0}
    table = markdown_table(summary)
    rows = table.strip().splitlines()
    assert rows[0].startswith("| method | n | H@1 | Hit | F1 | TCR | tok/q |")
    assert len(rows) == 2 + 3
    assert "| `fake` | 12 | 0.500 | 0.500 | 0.333 | 0.500 | 110.5 |" in table
    assert "—" in rows[-1]
    run = {"settings": {"dataset": {"kind": "jsonl", "source": "/x/q.jsonl", "split": None},
                        "llm": "none", "budget": 2048, "entities": "gold",
                        "stores": {"store": "B1"}},
           "commands": ["lokg eval --dataset jsonl:/x/q.jsonl"]}
    md = render_markdown(summary, run)
    assert "Reader `none`" in md and "    lokg eval --dataset jsonl:/x/q.jsonl" in md
    png = plot_accuracy_vs_tokens(summary, tmp_path / "plot.png", "title")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


class _Inner:
    name, calls_model, model = "fake", True, "m"

    def __init__(self):
        self.n = 0

    def complete(self, prompt, *, max_tokens, system=""):
        self.n += 1
        if self.n % 2 == 0:
            raise LLMError("refused", kind="connect")
        return Completion("x", 1, 1, 0.0, "m", 1)


def test_counting_llm_counts_calls_and_failures():
    llm = CountingLLM(_Inner())
    llm.complete("p", max_tokens=8)
    with pytest.raises(LLMError):
        llm.complete("p", max_tokens=8)
    assert (llm.calls, llm.failed, llm.errors) == (2, 1, ["connect: refused"])
    llm.reset()
    assert (llm.calls, llm.failed) == (0, 0)


def test_method_names():
    assert method_names("all")[0] == "lokg" and len(method_names("all")) == 8
    assert method_names("tog, kaping,tog") == ["tog", "kaping"]
    with pytest.raises(MethodError, match="unknown method"):
        method_names("lokg,gpt")

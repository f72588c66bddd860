"""Identify missing with an LLM (runtime/feedback_llm.py): the prompt compares question, answer
and context; a valid JSON reply becomes the record's sub-questions, a malformed one or a failed
call a flagged fallback to the structural record; off by default (no call)."""

from __future__ import annotations

import pytest

from lokg.runtime import feedback, feedback_llm
from lokg.runtime.llm import base
from lokg.runtime.llm.base import Completion, LLMError
from lokg.testing.doubles import route_answer as _answer


class Double:
    """A test double of an LLM backend: the replies it is given, and the prompts it saw."""

    name, calls_model = "double", True

    def __init__(self, *replies):
        self.replies, self.prompts = list(replies), []

    def complete(self, prompt: str, *, max_tokens: int, system: str = "",
                 **options) -> Completion:
        self.prompts.append((system, prompt))
        self.options = options
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return Completion(reply, 50, 12, 1.0, "double", 1)


def _structural():
    answer = _answer(["Neil Young"], ["Neil Young"])
    return answer, feedback.missing_record(answer, 3)


def test_a_valid_reply_lists_the_missing_facts_as_sub_questions():
    answer, record = _structural()
    llm = Double('Sure.\n```json\n{"missing": [{"entity": "Neil Young", "question": '
                 '"Who is the sibling of Neil Young?"}, {"entity": "Astrid", "question": '
                 '"When was she born?"}]}\n```')
    out = feedback_llm.identified(record, answer, llm)
    assert out["identified_by"] == "llm" and out["bridges"] == [
        {"name": "Neil Young", "text": "Who is the sibling of Neil Young?"},
        {"name": "Astrid", "text": "Astrid When was she born?"}]
    assert out["missing"] == record["missing"] and out["mentions"] == record["mentions"]
    assert out["llm_usage"] == {"prompt_tokens": 50, "completion_tokens": 12}
    system, prompt = llm.prompts[0]
    assert "JSON" in system
    assert "Question: Who is the sibling of the performer of Decade?" in prompt
    assert "Answer: Neil Young" in prompt
    assert feedback.record_problem({**out, "v": 1, "id": "x", "time": "t"}) is None


@pytest.mark.parametrize("reply, why", [
    ("I think Neil Young is missing.", "no JSON object"),
    ('{"missing": [{"entity": "Neil Young"}]}', "without a short non-empty"),
    ('{"missing": "Neil Young"}', "no list 'missing'"),
    ('{"missing": [{"entity": "A", "question": "q"}', "not JSON"),  # cut short
    ('{"missing": [}', "not JSON"),
    ('{"missing": [{"entity": "<entity name>", "question": "<sub-question>"}]}', "placeholder"),
    ('{"missing": [' + ", ".join(['{"entity": "A", "question": "q"}'] * 11) + "]}", "11 sub"),
])
def test_a_malformed_reply_falls_back_to_the_structural_record_flagged(reply, why):
    answer, record = _structural()
    out = feedback_llm.identified(record, answer, Double(reply))
    assert out["identified_by"] == "structural" and why in out["llm_problem"]
    assert out["bridges"] == record["bridges"] == [{"name": "Neil Young", "text": "Neil Young"}]


def test_a_backend_that_takes_a_grammar_is_held_to_the_json_shape():
    answer, record = _structural()
    plain = Double('{"missing": []}')
    assert feedback_llm.identified(record, answer, plain)["bridges"] == []  # nothing missing
    assert plain.options == {}
    held = Double('{"missing": []}')
    held.takes_grammar = True
    feedback_llm.identified(record, answer, held)
    assert held.options == {"grammar": feedback_llm.GRAMMAR}


def test_a_failed_call_falls_back_too():
    answer, record = _structural()
    out = feedback_llm.identified(record, answer, Double(LLMError("down", kind="connect")))
    assert out["identified_by"] == "structural" and out["llm_problem"] == "connect: down"


def test_only_a_configured_runtime_calls_the_llm_and_logs_its_sub_questions(gap_store, tmp_path,
                                                                           monkeypatch):
    from lokg.runtime.query import Runtime

    double = Double('{"missing": [{"entity": "fabio quist", "question": "What is the job of '
                    'fabio quist?"}]}')
    monkeypatch.setitem(base.BACKENDS, "identify-double", lambda: double)
    question = "what is the job of edda quist 's wife ?"
    plain = Runtime.open(gap_store, feedback_dir=str(tmp_path / "plain"))
    assert plain.feedback.identify is None
    plain.ask(question, policy="route")
    assert double.prompts == []  # the default path makes no call for feedback
    rt = Runtime.open(gap_store, feedback_dir=str(tmp_path / "llm"),
                      feedback_llm="identify-double")
    rt.ask(question, policy="route")
    (record,) = feedback.read_log(tmp_path / "llm").records
    assert len(double.prompts) == 1 and record["identified_by"] == "llm"
    assert record["bridges"] == [{"name": "fabio quist", "text": "What is the job of fabio quist?"}]
    assert record["missing"][0]["entity"] == "e5"  # the structural chain stop stays
    assert feedback.stats(feedback.read_log(tmp_path / "llm"))["identified_by_llm"] == 1

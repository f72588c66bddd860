"""Doubles of what the runtime talks to and returns: readers that reply with a fixed text
(one of them constrains its reply to the listed choices) and an answer with a given route."""

from __future__ import annotations

from dataclasses import replace

from lokg.runtime.answer_record import Answer
from lokg.runtime.llm import Completion, LLMError


class FakeLLM:
    """A reader double: replies with a fixed text (or raises), and counts its calls."""

    name = "fake"
    model = "fake-1"
    calls_model = True

    def __init__(self, reply: str | None = None, error: LLMError | None = None):
        self.reply, self.error, self.calls, self.prompts = reply, error, 0, []

    def complete(self, prompt, *, max_tokens, system=""):
        self.calls += 1
        self.prompts.append((system, prompt))
        if self.error is not None:
            raise self.error
        return Completion(text=self.reply, prompt_tokens=0, completion_tokens=0, latency_ms=1.0,
                          model=self.model, attempts=1)


class ChoosingLLM(FakeLLM):
    """A double of a backend that constrains its reply (the local model's grammar)."""

    constrains_choices = True

    def complete(self, prompt, *, max_tokens, system="", choices=None):
        self.choices = choices
        return super().complete(prompt, max_tokens=max_tokens, system=system)


def route_answer(answers, candidates, linked=("Decade",), **route) -> Answer:
    """The answer to a 2-hop question about Decade with these answers, candidates, linked
    topics and route (a zero-shot prediction, not derivable, unless ``route`` says else)."""
    return replace(Answer.empty("ok", "", {}, budget=10, question="Who is the sibling of the "
                                "performer of Decade?", llm={}, build_id="b1", retrieval="taimr",
                                policy="route", linked=[{"name": n, "key": n.lower()}
                                                        for n in linked]),
                   answers=list(answers), candidates=[{"name": c} for c in candidates],
                   route={"predictor": "zero-shot", "derivable": False, "stopped": None, **route})

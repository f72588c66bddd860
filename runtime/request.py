"""One ``Runtime.ask`` request: its arguments checked before any work, and its step timings.

Bad input never surfaces as a traceback: every invalid argument raises :class:`QueryError`, a
ValueError whose message names the argument.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

import numpy as np

from lokg.runtime.config import ENCODINGS, MAX_BUDGET, POLICIES, RETRIEVALS
from lokg.runtime.errors import LokgError
from lokg.runtime.llm import LLM, LLMError

#: Hard limits on a request; beyond them ask() refuses with a QueryError.
MAX_QUESTION_CHARS = 4096
MAX_GIVEN_ENTITIES = 32


class QueryError(LokgError, ValueError):
    """A request the runtime refuses (bad argument); the message names the argument."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def _refuse_lone_surrogates(question: str) -> None:
    """A lone surrogate (what undecodable bytes on a command line or a JSON ``"\\ud800"``
    escape become) is not text: the question encoder's tokenizer raises on it, and replacing
    it would answer a question nobody asked, so it is refused, saying where it is."""
    found = _SURROGATE.search(question)
    if found is not None:
        raise QueryError(f"question is not valid Unicode text: lone surrogate "
                         f"U+{ord(found.group()):04X} at character {found.start() + 1} "
                         "(undecodable bytes, e.g. from a non-UTF-8 terminal); send UTF-8 text")


@dataclass(frozen=True)
class Request:
    """The arguments of one ask(), checked, with the settings' defaults filled in."""

    question: str
    budget: int
    reader: LLM
    policy: str
    retrieval: str
    encoding: str
    relation_weight: float
    chain_boost: bool
    source_sentences: bool  # restored source sentences offered as the verbose granularity
    passage_items: int = 0  # chunks offered to ITTC beside the triples (query.passage_items)


def _check_question(question) -> None:
    if not isinstance(question, str):
        raise QueryError(f"question must be a string; got {type(question).__name__}")
    if not question.strip():
        raise QueryError("question is empty")
    if len(question) > MAX_QUESTION_CHARS:
        raise QueryError(f"question is {len(question)} characters; the limit is "
                         f"{MAX_QUESTION_CHARS}")
    _refuse_lone_surrogates(question)


def _check_budget(budget) -> None:
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise QueryError(f"budget must be an integer number of tokens; got {budget!r}")
    if not 1 <= budget <= MAX_BUDGET:
        raise QueryError(f"budget must be between 1 and {MAX_BUDGET} tokens; got {budget}")


def _checked_weight(raw) -> float:
    try:
        weight = float(raw)
    except (TypeError, ValueError):
        weight = math.nan
    if not math.isfinite(weight) or weight < 0:
        raise QueryError(f"relation_weight must be a finite number >= 0; got {raw!r}")
    return weight


def checked_request(runtime, question, budget, llm, policy, retrieval, encoding,
                    relation_weight, chain_boost, source_sentences=True,
                    passage_items=None) -> Request:
    """Every argument checked (a QueryError naming it) before any work is done; the
    ``runtime``'s settings fill in what is None, and it makes the reader."""
    _check_question(question)
    _check_budget(budget)
    if policy is None:
        policy = "route" if runtime.relknow is not None else "lokg"
    for name, value, allowed in (("policy", policy, POLICIES),
                                 ("retrieval", retrieval, RETRIEVALS),
                                 ("encoding", encoding, ENCODINGS)):
        if value not in allowed:
            raise QueryError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    settings = runtime.settings
    weight = _checked_weight(settings["relation_weight"] if relation_weight is None
                             else relation_weight)
    boost = bool(settings["chain_boost"] if chain_boost is None else chain_boost)
    try:
        reader = runtime.llm(llm)
    except LLMError as exc:
        raise QueryError(f"llm: {exc}") from None
    return Request(question, int(budget), reader, policy, retrieval, encoding, weight, boost,
                   bool(source_sentences), _checked_items(settings["passage_items"]
                                                          if passage_items is None
                                                          else passage_items))


def _checked_items(raw) -> int:
    if isinstance(raw, bool) or not isinstance(raw, (int, np.integer)) or raw < 0:
        raise QueryError(f"passage_items must be an integer >= 0; got {raw!r}")
    return int(raw)


class Timer:
    """Milliseconds per step of one ask() (each since the previous lap), and the total."""

    def __init__(self):
        self.timings: dict[str, float] = {}
        self._started = self._last = time.perf_counter()

    def mark(self) -> None:
        """Start the next step here: the time before it counts in the total only."""
        self._last = time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.timings[step] = round((now - self._last) * 1000.0, 3)
        self._last = now

    def done(self) -> dict[str, float]:
        self.timings["total"] = round((time.perf_counter() - self._started) * 1000.0, 3)
        return self.timings

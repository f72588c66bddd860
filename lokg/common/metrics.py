"""The metrics an evaluation reports, per question and per method, with the answer
normalisation (the relation_knowledge stage scores its dev questions with them too).

**Normalisation** (:func:`normalise_answer`), applied to gold and predicted answers alike:
NFKC, casefold; ``_`` → space; apostrophes (``'`` ``’`` ``ʼ`` and the backtick) deleted, so
``O'Brien`` = ``OBrien``; every other punctuation character (Unicode category P*: hyphens,
dots, commas, brackets, slashes, ``&`` …) → space, so ``burnham-on-sea`` = ``burnham on sea``;
the articles ``a``, ``an``, ``the`` dropped as words; whitespace collapsed. A name made only of
articles keeps them (``The The`` stays ``the the``). Accents and symbols (``+``, ``$``) are kept.

**Per question** (:func:`score`), with P = the set of normalised predictions (empty strings
dropped; a duplicate counts once, so repeating an answer neither helps nor hurts) and G = the
normalised gold set:

* ``H@1`` = 1 if the first prediction is in G, else 0;
* ``Hit`` = 1 if any prediction is in G;
* ``F1`` = 2·p·r/(p + r) with p = |P∩G|/|P| and r = |P∩G|/|G|; 0 when P is empty or P∩G is.

**Per method** (:func:`summarise`), over the n questions of the run:

* ``H@1``, ``Hit``, ``F1``: means of the per-question values;
* ``TCR``: mean of T_after/T_naive (knowledge tokens injected / tokens of the naive rendering)
  over the questions with T_naive > 0 — a question with no knowledge has nothing to compress and
  is left out; ``null`` when no question had knowledge;
* ``tok/q``: mean over questions of all prompt + completion tokens over all LLM calls
  (cl100k_base, failed calls included with the prompt tokens they sent); ``calls/q``: mean
  LLM calls, failed ones included;
* ``P@1K`` = 1000·F1/tok and ``H@1K`` = 1000·H@1/tok are **ratios of the means**: computed from
  the averaged F1 (H@1) and the averaged tok/q, as the LOKG paper reads them (a per-question
  average would be dominated by the cheapest questions and is undefined at 0 tokens); ``null``
  when tok/q = 0 (the ``none`` reader spends no tokens, so accuracy per token is undefined);
* ``latency_ms_mean`` and ``latency_ms_p95`` (nearest rank: the ⌈0.95·n⌉-th smallest) of the
  wall-clock time of each question's method call — the only keys that differ between two runs
  of one command;
* ``failed_calls`` (LLM calls that raised) and ``failed_questions`` (questions with at least one).

**Reading metrics** (multi-hop reading sets, evaluation/text_datasets.py), added
to a run that asks for them (``runner.evaluate(..., reading=True)``), per question from the
first prediction (the reader's best answer) and the gold answer with its aliases, under the
SQuAD normalisation (:func:`squad_normalise`: lowercase, punctuation *deleted*, articles
``a``/``an``/``the`` dropped, whitespace collapsed — the official SQuAD v1.1 script's rules,
not :func:`normalise_answer`'s):

* ``EM`` = 1 if the normalised prediction equals a normalised gold answer or alias, else 0;
* ``F1-SQuAD`` = the best, over gold answer and aliases, SQuAD token F1 (bag-of-words overlap
  of the normalised strings); 0 for an empty prediction (no prediction, reader ``none``);
* ``context_recall`` = 1 if a normalised gold answer or alias occurs in the normalised
  knowledge text the reader was given (or, reader ``none``, would have been given), on word
  boundaries — the best any reader of that knowledge could do. Word boundaries so that ``1``
  is not found in ``1990``; a yes/no answer (HotpotQA comparisons) is found only where the
  knowledge happens to say the word.

The summary gets their means (keys :data:`READING_KEYS`, after :data:`SUMMARY_KEYS`).

Values are rounded to 6 decimals so the summary is stable text.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

ARTICLES = frozenset({"a", "an", "the"})
#: The summary keys of one method, in order (latency keys are the nondeterministic ones).
SUMMARY_KEYS = ("H@1", "Hit", "F1", "TCR", "tok/q", "calls/q", "P@1K", "H@1K", "n",
                "latency_ms_mean", "latency_ms_p95", "failed_calls", "failed_questions")
LATENCY_KEYS = ("latency_ms_mean", "latency_ms_p95")
#: The summary keys a reading run adds (module docstring, "Reading metrics").
READING_KEYS = ("EM", "F1-SQuAD", "context_recall")
DECIMALS = 6

_APOSTROPHES = re.compile(r"['’ʼ`]")
_SQUAD_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SQUAD_PUNCTUATION = frozenset(string.punctuation)


def normalise_answer(text: str) -> str:
    """The comparison form of an answer (module docstring)."""
    folded = unicodedata.normalize("NFKC", str(text)).casefold().replace("_", " ")
    folded = _APOSTROPHES.sub("", folded)
    folded = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in folded)
    words = folded.split()
    kept = [w for w in words if w not in ARTICLES]
    return " ".join(kept or words)


@dataclass(frozen=True)
class Scores:
    h1: float
    hit: float
    f1: float

    def to_dict(self) -> dict:
        return {"H@1": self.h1, "Hit": self.hit, "F1": self.f1}


def score(predicted: Sequence[str], gold: Iterable[str]) -> Scores:
    """H@1, Hit and F1 of a ranked prediction list against a gold answer set."""
    gold_set = {g for g in (normalise_answer(x) for x in gold) if g}
    ranked = [p for p in (normalise_answer(x) for x in predicted) if p]
    if not ranked or not gold_set:
        return Scores(0.0, 0.0, 0.0)
    pred_set = set(ranked)
    common = len(pred_set & gold_set)
    h1 = 1.0 if ranked[0] in gold_set else 0.0
    if common == 0:
        return Scores(h1, 0.0, 0.0)
    return Scores(h1, 1.0, _f1(common, len(pred_set), len(gold_set)))


def _f1(common: int, predicted: int, gold: int) -> float:
    """The harmonic mean of precision common/predicted and recall common/gold (common > 0)."""
    precision, recall = common / predicted, common / gold
    return 2 * precision * recall / (precision + recall)


def squad_normalise(text: str) -> str:
    """The SQuAD v1.1 answer normalisation: lowercase, delete ASCII punctuation, drop the
    articles a/an/the, collapse whitespace (as the official script, in its order)."""
    lowered = str(text).lower()
    kept = "".join(ch for ch in lowered if ch not in _SQUAD_PUNCTUATION)
    return " ".join(_SQUAD_ARTICLES.sub(" ", kept).split())


def _token_f1(predicted: str, gold: str) -> float:
    pred, ref = predicted.split(), gold.split()
    common = sum((Counter(pred) & Counter(ref)).values())
    return _f1(common, len(pred), len(ref)) if common else 0.0


@dataclass(frozen=True)
class Reading:
    """The reading metrics of one question (module docstring)."""

    em: float
    f1: float
    context_recall: float

    def to_dict(self) -> dict:
        return {"EM": self.em, "F1-SQuAD": self.f1, "context_recall": self.context_recall}


def contains_answer(knowledge: str, gold: Iterable[str]) -> bool:
    """Whether a normalised gold answer occurs in the normalised knowledge on word boundaries."""
    text = f" {squad_normalise(knowledge)} "
    return any(f" {g} " in text for g in map(squad_normalise, gold) if g)


def read_scores(predicted: Sequence[str], gold: Iterable[str], knowledge: str) -> Reading:
    """EM and SQuAD F1 of the first prediction (best over gold and aliases), and context
    recall of the knowledge."""
    gold = list(gold)
    golds = [g for g in map(squad_normalise, gold) if g]
    first = squad_normalise(predicted[0]) if predicted else ""
    if not first or not golds:
        em = f1 = 0.0
    else:
        em = float(first in golds)
        f1 = max(_token_f1(first, g) for g in golds)
    return Reading(em, f1, float(contains_answer(knowledge, gold)))


@dataclass(frozen=True)
class Outcome:
    """The numbers one question contributes to its method's summary."""

    scores: Scores
    tokens: int  # prompt + completion over all calls
    calls: int
    knowledge_tokens: int  # T_after
    naive_tokens: int  # T_naive
    latency_ms: float
    failed_calls: int
    reading: Reading | None = None  # a reading run's EM, SQuAD F1, context recall


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def p95(values: Sequence[float]) -> float:
    """Nearest-rank 95th percentile: the ⌈0.95·n⌉-th smallest value."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), DECIMALS)


def summarise(outcomes: Sequence[Outcome]) -> dict:
    """One method's summary over its questions, keys :data:`SUMMARY_KEYS` (module docstring),
    then :data:`READING_KEYS` when the outcomes carry reading metrics."""
    if not outcomes:
        raise ValueError("cannot summarise a method with no questions")
    readings = [o.reading for o in outcomes if o.reading is not None]
    if readings and len(readings) != len(outcomes):
        raise ValueError("cannot summarise outcomes with and without reading metrics together")
    h1 = _mean([o.scores.h1 for o in outcomes])
    f1 = _mean([o.scores.f1 for o in outcomes])
    tok = _mean([o.tokens for o in outcomes])
    ratios = [o.knowledge_tokens / o.naive_tokens for o in outcomes if o.naive_tokens > 0]
    latencies = [o.latency_ms for o in outcomes]
    summary = {
        "H@1": h1,
        "Hit": _mean([o.scores.hit for o in outcomes]),
        "F1": f1,
        "TCR": _mean(ratios) if ratios else None,
        "tok/q": tok,
        "calls/q": _mean([o.calls for o in outcomes]),
        "P@1K": 1000.0 * f1 / tok if tok > 0 else None,
        "H@1K": 1000.0 * h1 / tok if tok > 0 else None,
        "n": len(outcomes),
        "latency_ms_mean": _mean(latencies),
        "latency_ms_p95": p95(latencies),
        "failed_calls": sum(o.failed_calls for o in outcomes),
        "failed_questions": sum(1 for o in outcomes if o.failed_calls > 0),
    }
    if readings:
        summary.update({"EM": _mean([r.em for r in readings]),
                        "F1-SQuAD": _mean([r.f1 for r in readings]),
                        "context_recall": _mean([r.context_recall for r in readings])})
    return {k: v if isinstance(v, int) else _round(v) for k, v in summary.items()}


def without_latency(summary: dict) -> dict:
    """A run summary (method → keys) without the latency keys: the part that is reproducible."""
    return {method: {k: v for k, v in keys.items() if k not in LATENCY_KEYS}
            for method, keys in summary.items()}

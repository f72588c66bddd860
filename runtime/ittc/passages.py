"""ITTC's passage items: a chunk of the documents a store was built from, offered to the
knapsack beside the triples' three renderings.

A :class:`Passage` is a chunk the passage ranking put first for the question (the dense scores,
or runtime/passage_rank.py's personalized PageRank), with its title, text, the sentences of
it that bear on the question (runtime/passage_items.py chooses them) and which of the
question's candidate triples each rendering holds. It is one knapsack row with three options
(:data:`OPTIONS`): ``none`` (0 tokens, value 0), ``sentences`` (the title and those sentences,
in text order) and ``passage`` (the title and the whole chunk, as dense
chunk retrieval packs it). Lines are ``title | text``, whitespace collapsed, newline-ended,
starting with a non-space: they add under cl100k like the triples' lines, and cost what
``count`` says (cl100k by default, as everything else).

**Value.** The passage at position i of the ranking (0 first) is worth
``PASSAGE_VALUE · PASSAGE_DECAY^i`` whole; its sentences are worth that times ``share`` (the
share of the question's match they hold) where the passage gives one, else times their share
of its tokens (``SENTENCES_EXPONENT`` 1: the same value per token, so they win only where the
whole chunk does not fit, as dense packing cuts its last chunk). The scale sits far above the
triples' values (β·α·H(O|R): a few bits at most on relation phrases extracted from text, λ_boost
3), so the knapsack spends the budget down the ranking as dense retrieval does, short chunks a
little earlier, and the triples take what the passages leave (about 30 ranks down a passage is
worth no more than a focus triple). Chosen on MuSiQue dev-200 (docs/BENCHMARKS.md, Documents):
at a scale of 100 the triples displaced the third and later passages and context recall fell
below dense; a flatter decay (0.9) favours short low-ranked chunks over long high-ranked ones.

**Cover.** A triple extracted from a sentence an emitted rendering holds is not emitted on its
own line and costs nothing (its text is already there): :func:`select_covered` solves the
knapsack, fixes the passages it chose, takes the triples they cover out and solves again for the
rest of the budget, until no newly chosen passage covers a kept triple (at most one round per
passage; each round exact by DP up to B = 4096, greedy above). Beside passages a triple row has
a fourth option, none (0 tokens, value 0), so a passage can take a triple's tokens. The kept
rows of each round fit the budget left, so the emitted lines never exceed B, and no triple is
paid for twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from lokg.runtime.ittc.render import _clean
from lokg.runtime.tokens import count_tokens

#: The options of a passage row, in column order.
OPTIONS = ("none", "sentences", "passage")
#: Value of the first-ranked passage whole, and the factor per ranking position below it.
PASSAGE_VALUE = 1e4
PASSAGE_DECAY = 0.85
#: The sentences option is worth (c_sentences / c_passage)^SENTENCES_EXPONENT of the whole.
SENTENCES_EXPONENT = 1.0


@dataclass(frozen=True)
class Passage:
    """One chunk offered to ITTC. ``sentences``: (sentence id, text) of the sentences option,
    in text order (empty: no sentences option). ``covers``: the indices (into the triples
    encoded with it) of the triples the sentences option holds, then the whole passage."""

    chunk_id: str
    doc_id: str
    title: str
    text: str
    sentences: tuple[tuple[str, str], ...] = ()
    covers: tuple[frozenset[int], frozenset[int]] = (frozenset(), frozenset())
    rank: int = 0  # position in the passage ranking, 0 first
    score: float = 0.0  # the ranking's score (reported, not valued)
    #: every sentence of the chunk, for the citations of the whole passage
    all_sentences: tuple[tuple[str, str], ...] = ()
    #: the sentences option's share of the passage's value (None: its share of the tokens)
    share: float | None = None


@dataclass(frozen=True)
class EncodedPassage:
    """What happened to one offered passage (``granularity`` None = not emitted)."""

    index: int
    chunk_id: str
    rank: int
    score: float
    granularity: str | None  # sentences | passage | None
    line: str
    cost: int
    value: float
    costs: tuple[int, int, int]
    values: tuple[float, float, float]
    covers: tuple[int, ...]  # the triples this emitted rendering holds
    passage: Passage | None = field(default=None, repr=False, compare=False)  # what was offered

    def to_dict(self) -> dict:
        return {"index": self.index, "chunk_id": self.chunk_id, "rank": self.rank,
                "score": self.score, "granularity": self.granularity, "cost": self.cost,
                "value": self.value, "costs": list(self.costs), "values": list(self.values),
                "covers": list(self.covers), "line": self.line}


def passage_line(title: str, body: str) -> str:
    """``title | body`` on one newline-ended line (``body`` alone without a title; "" when
    there is no body)."""
    body, title = _clean(body), _clean(title)
    if not body:
        return ""
    return f"{title} | {body}\n" if title else f"{body}\n"


@lru_cache(maxsize=1 << 14)
def _line_cost(line: str) -> int:
    """cl100k tokens of a passage's line, memoised: the same chunks come back across questions,
    and their lines are longer than tokens.count_tokens memoises."""
    return count_tokens(line)


def passage_rows(passages: Sequence[Passage], count: Callable[[str], int]
                 ) -> tuple[list[tuple[str, str, str]], np.ndarray, np.ndarray]:
    """(lines, costs, values) of the passages' rows: m lines triples and m×3 arrays, columns in
    :data:`OPTIONS` order. A passage without a sentences option has a second none there
    (0 tokens, value 0)."""
    lines, costs, values = [], [], []
    count = _line_cost if count is count_tokens else count
    for p in passages:
        whole = passage_line(p.title, p.text)
        part = passage_line(p.title, " ".join(t for _, t in p.sentences))
        c_whole = count(whole) if whole else 0
        c_part = (count(part) if part != whole else c_whole) if part else 0
        v_whole = PASSAGE_VALUE * PASSAGE_DECAY ** p.rank if whole else 0.0
        v_part = v_whole * (p.share if p.share is not None else (c_part / c_whole) **
                            SENTENCES_EXPONENT) if c_whole and part else 0.0
        lines.append(("", part, whole))
        costs.append((0, c_part, c_whole))
        values.append((0.0, v_part, v_whole))
    return (lines, np.array(costs, dtype=np.int64).reshape(-1, 3),
            np.array(values, dtype=np.float64).reshape(-1, 3))


@dataclass
class Selection:
    """The knapsack's choice over triples and passages: ``choices[i]`` a triple's granularity
    index (-1: not on its own line), ``pchoices[j]`` a passage's option index (0: none),
    ``covered_by[i]`` the passage holding triple i."""

    choices: list[int]
    pchoices: list[int]
    covered_by: dict[int, int]
    solve_ms: float = 0.0


def select_covered(costs: np.ndarray, values: np.ndarray, kept: list[int],
                   pcosts: np.ndarray, pvalues: np.ndarray, passages: Sequence[Passage],
                   budget: int, solver) -> Selection:
    """The rounds of the module docstring's cover rule over the triples ``kept`` and every
    passage; ``solver`` is mckp.solve_mckp or solve_greedy. Beside passages a triple row has a
    fourth option, none (0 tokens, value 0): a passage may hold it, or carry more per token."""
    sel = Selection([-1] * len(costs), [0] * len(passages), {})
    active, left = list(range(len(passages))), budget
    kept = list(kept)
    while True:
        chosen = solver(*_rows(costs, values, kept, pcosts, pvalues, active), left)[0].tolist()
        bought = [(j, min(c, 2)) for j, c in zip(active, chosen[len(kept):]) if c > 0]
        held = set(kept)
        newly = {i: j for j, c in bought for i in sorted(passages[j].covers[c - 1]) if i in held}
        if not newly:
            for i, c in zip(kept, chosen[:len(kept)]):
                sel.choices[i] = c - 1
            for j, c in bought:
                sel.pchoices[j] = c
            return sel
        for j, c in bought:  # fixed: their tokens leave the budget, their triples the rows
            sel.pchoices[j] = c
            left -= int(pcosts[j, c])
        for i, j in newly.items():
            sel.covered_by.setdefault(i, j)
        kept = [i for i in kept if i not in newly]
        active = [j for j in active if sel.pchoices[j] == 0]


def _rows(costs, values, kept, pcosts, pvalues, active) -> tuple[np.ndarray, np.ndarray]:
    """One round's knapsack: the kept triples (none, then their three granularities) above the
    active passages (their three options, the whole passage repeated to fill the fourth)."""
    def stacked(triples: np.ndarray, rows: np.ndarray) -> np.ndarray:
        triples = triples.reshape(-1, 3)
        rows = rows.reshape(-1, 3)
        return np.vstack([np.hstack([np.zeros((len(triples), 1), triples.dtype), triples]),
                          np.hstack([rows, rows[:, 2:]])])

    return stacked(costs[kept], pcosts[active]), stacked(values[kept], pvalues[active])


def covered_whole(passages: Sequence[Passage]) -> dict[int, int]:
    """triple index → the first passage whose whole rendering holds it."""
    out: dict[int, int] = {}
    for j, p in enumerate(passages):
        for i in sorted(p.covers[1]):
            out.setdefault(i, j)
    return out

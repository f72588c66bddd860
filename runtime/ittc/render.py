"""ITTC's renderings: each :class:`KnowledgeTriple` as one line in σ* order at three
granularities, with the token cost of each line summed from its memoised fields."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from lokg.runtime.ittc.order import check_order
from lokg.runtime.tokens import count_tokens

GRANULARITIES = ("compact", "balanced", "verbose")
SHORT_DESCRIPTION_CHARS = 80
MAX_ALIASES = 3
MAX_ATTRIBUTES = 4
MAX_SOURCE_CHARS = 240
SEPARATOR = " | "


@dataclass(frozen=True)
class KnowledgeTriple:
    """One candidate triple with everything its three renderings and its value need.

    ``rank``: retrieval rank, smaller is better (ties keep input order); the lowest-ranked
    (largest rank) are dropped first. ``tail_entropy``: H(O|R=r) of the relation (bits, as
    relation_stats writes it). ``focus``: s or o is a query or candidate entity (α = λ_boost).
    """

    subject: str
    relation: str
    object: str
    rank: int = 0
    score: float = 0.0
    tail_entropy: float = 0.0
    focus: bool = False
    subject_type: str = ""
    object_type: str = ""
    subject_description: str = ""
    object_description: str = ""
    subject_aliases: tuple[str, ...] = ()
    object_aliases: tuple[str, ...] = ()
    subject_attributes: tuple[tuple[str, str], ...] = ()
    object_attributes: tuple[tuple[str, str], ...] = ()
    source: str = ""

    def __post_init__(self):
        # The runtime builds dozens a question, already typed: only other values are converted.
        if type(self.tail_entropy) is not float or not 0.0 <= self.tail_entropy < math.inf:
            try:
                h = float(self.tail_entropy)
            except (TypeError, ValueError):
                h = math.nan
            if isinstance(self.tail_entropy, bool) or not math.isfinite(h) or h < 0:
                raise ValueError(
                    f"tail_entropy must be a finite number ≥ 0; got {self.tail_entropy!r}")
            object.__setattr__(self, "tail_entropy", h)
        for name in ("subject_aliases", "object_aliases"):  # hashable: renderings are memoised
            if type(getattr(self, name)) is not tuple:
                object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("subject_attributes", "object_attributes"):
            pairs = getattr(self, name)
            if type(pairs) is not tuple or any(type(kv) is not tuple for kv in pairs):
                object.__setattr__(self, name, tuple(tuple(kv) for kv in pairs))


_WHITESPACE = re.compile(r"\s+")


def _clean(text) -> str:
    """One line, single spaces, no leading/trailing space, valid UTF-8 (lone surrogates → '?')."""
    text = text if isinstance(text, str) else str(text)
    # fast path: printable (no control, separator or surrogate characters but the ASCII space)
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return _WHITESPACE.sub(" ", text).strip()


def _shorten(text, limit: int) -> str:
    text = _clean(text)
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


@lru_cache(maxsize=1 << 16)
def _entity_levels(name, etype, description, aliases, attributes) -> tuple[str, str, str]:
    """An entity at the three granularities: name; + type, short description; + aliases, attrs.

    Memoised: the same entities recur across a question's triples and across questions."""
    text = _clean(name) or "?"
    details = [d for d in (_clean(etype), _shorten(description, SHORT_DESCRIPTION_CHARS)) if d]
    balanced = f"{text} ({'; '.join(details)})" if details else text
    names = [a for a in (_clean(a) for a in aliases) if a][:MAX_ALIASES]
    if names:
        details.append("aka " + ", ".join(names))
    pairs = [(_clean(k), _clean(v)) for k, v in attributes]
    pairs = [f"{k}={v}" for k, v in pairs if k or v][:MAX_ATTRIBUTES]
    if pairs:
        details.append(", ".join(pairs))
    verbose = f"{text} ({'; '.join(details)})" if details else text
    return text, balanced, verbose


@lru_cache(maxsize=1 << 12)
def _relation_levels(relation) -> tuple[str, str, str]:
    """A relation at the three granularities (always its name alone)."""
    text = _clean(relation) or "?"
    return text, text, text


#: Per granularity, what ends a field: nothing, the line's newline, or (the last component of
#: a triple with a source, which only the verbose line shows) the newline but at verbose.
_INNER, _LAST, _BEFORE_SOURCE, _SOURCE = ("", "", ""), ("\n",) * 3, ("\n", "\n", ""), ("", "", "\n")


@lru_cache(maxsize=1 << 17)
def _field(levels: tuple[str, str, str], lead: str,
           tails: tuple[str, str, str]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """One field of a line at the three granularities as the line holds it — ``lead`` (the
    separator; "" for the first field) before, ``tails`` after, "" where the granularity
    omits the field — and the cl100k count of each. A field starts and ends with a non-space
    (:func:`_clean`) and a separator starts with a space, so no pre-token spans two fields
    (tokens.splits) and a line's count is the sum of its fields'. Memoised: entities recur
    across triples and questions, so a new triple of known entities costs no tokenizer call."""
    assert all(not x or not (x[0].isspace() or x[-1].isspace()) for x in levels), levels
    texts = tuple(lead + x + tail if x else "" for x, tail in zip(levels, tails))
    return texts, tuple(count_tokens(x) for x in texts)


def lines_and_costs(triple: KnowledgeTriple, order: tuple[str, str, str]):
    """(lines, cl100k costs) of ``triple`` at the three granularities, components in
    ``order``; each line ends with its newline."""
    t = triple
    components = {
        "s": _entity_levels(t.subject, t.subject_type, t.subject_description, t.subject_aliases,
                            t.subject_attributes),
        "r": _relation_levels(t.relation),
        "o": _entity_levels(t.object, t.object_type, t.object_description, t.object_aliases,
                            t.object_attributes),
    }
    source = _shorten(t.source, MAX_SOURCE_CHARS) if t.source else ""
    (a, ac), (b, bc), (c, cc) = (
        _field(components[order[0]], "", _INNER), _field(components[order[1]], SEPARATOR, _INNER),
        _field(components[order[2]], SEPARATOR, _BEFORE_SOURCE if source else _LAST))
    # spelled out per granularity: this runs for every triple of every question
    lines = [a[0] + b[0] + c[0], a[1] + b[1] + c[1], a[2] + b[2] + c[2]]
    costs = [ac[0] + bc[0] + cc[0], ac[1] + bc[1] + cc[1], ac[2] + bc[2] + cc[2]]
    if source:
        (_, _, tail), (_, _, tail_cost) = _field(("", "", f"source: {source}"), SEPARATOR, _SOURCE)
        lines[2] += tail
        costs[2] += tail_cost
    return tuple(lines), tuple(costs)


def render_levels(triple: KnowledgeTriple, order: Sequence[str]) -> tuple[str, str, str]:
    """The (compact, balanced, verbose) lines of ``triple``, components in ``order``, each
    ending with its newline."""
    return lines_and_costs(triple, tuple(order))[0]  # type: ignore[return-value]


def render(triple: KnowledgeTriple, order: Sequence[str], level: int | str) -> str:
    """The line of ``triple`` at one granularity (index or name), with its trailing newline."""
    if isinstance(level, str):
        level = GRANULARITIES.index(level)
    return render_levels(triple, check_order(order))[level]

"""The prompt around the knowledge, and the answer list out of whatever the LLM wrote back.

**Prompt.** :func:`build_prompt` returns a :class:`Prompt`: ``system`` — the fixed instructions
(:data:`INSTRUCTIONS`, kept short because every token of it is paid per question) — and
``user`` — ``"Knowledge:\\n" + knowledge + "Question: " + question``; with a forced choice the
candidates come between the two (``"Candidates:\\n- A\\n- B\\n"``) and the instructions are
:data:`CHOICE_INSTRUCTIONS`. The question is put on one line (whitespace runs → one space, lone
surrogates → ``?``). The runtime reports the knowledge
budget and the fixed overhead separately: :func:`prompt_overhead` counts (cl100k_base) the
instructions and the user message with empty knowledge. When the knowledge is ITTC output
(lines that start with a non-space character and end with ``\\n``), no token spans the
knowledge's boundaries — the header ends in ``:\\n`` and the question line starts with a
letter — so ``prompt_tokens(p) == prompt_overhead(q).total + count_tokens(knowledge)`` exactly
(tests/test_answers.py checks it). Knowledge without its final newline gets one. The counts
are of the message texts; the chat template a server wraps them in costs it a few tokens more,
which it reports in its own ``usage``.

**Parsing.** :func:`parse_answers` turns a reply into a clean, ordered, de-duplicated list and
never raises on any string. In order:

1. ``<think>…</think>`` reasoning is removed (an unclosed ``<think>`` drops the rest: the model
   never answered); a JSON list of strings (``["A", "B"]``) is taken as the list itself.
2. Lines: code fences, empty lines and heading lines ending in ``:`` ("Here are the answers:")
   are skipped, a leading ``Answer:`` / ``Answers:`` / ``Final answer:`` / ``The answer is``
   label (also in markdown bold) is removed. Bullets (``-``, ``*``, ``+``, ``•`` and kin) are
   removed; numbers (``1.``, ``1)``, ``(1)``) are removed when the line's number is 1 or
   another line is numbered too — so a lone ``3. Liga`` keeps its number. ``1. A 2. B`` on one
   line is split.
3. Separators: every line break, ``;``, ``|`` and `` / `` (slash with spaces, so ``AC/DC``
   stays whole).
4. **Commas** split only when the reply is a single item after steps 2–3 *and* is clearly a
   list: at least two ``", "`` commas, or an Oxford ``", and "`` / ``", or "``. One comma
   alone never splits (``Washington, D.C.``, ``Paris, Texas``, ``Tyler, the Creator``,
   ``Earth, Wind & Fire``), a comma between digits never does (``1,000``), an item that is an
   abbreviation or suffix (``D.C.``, ``U.K.``, ``Jr.``, ``Inc.``, ``III``) is glued back to the
   one before it (``Washington, D.C., Boston`` → two items), and a leading ``and``/``or`` of the
   last item is removed. ``and`` inside an item never splits (``Trinidad and Tobago``,
   ``Peter, Paul and Mary``): ``A, B and C`` stays one item, ``A, B, C and D`` gives ``A``,
   ``B``, ``C and D`` (the first answer, the one that counts most, is right). Known limits:
   names with two or more commas (``Crosby, Stills, Nash & Young``) and ``City, State`` lists
   are split when they are the whole reply on one line — but a reply with one answer per
   line, as the instructions ask, never has its commas touched.
5. Each item: surrounding double quotes, backticks, guillemets and markdown ``*``/``_`` are
   stripped (single quotes only as a matching pair, so ``'s-Hertogenbosch`` keeps its
   apostrophe), whitespace collapsed, trailing ``.`` / ``,`` / ``:`` removed except the final
   dot of an abbreviation (``D.C.``, ``Jr.``, ``Inc.``).
6. Items without a letter or digit, and refusals (``none``, ``unknown``, ``n/a``, ``I don't
   know…``, ``not enough information…``) are dropped; duplicates are dropped case-insensitively
   (``casefold``), the first spelling and the order kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from lokg.runtime.tokens import count_tokens

INSTRUCTIONS = (
    "Answer the question using the knowledge (one fact per line, fields separated by |). "
    "Reply with only the answer names, one per line, best first, no explanations. "
    "If you cannot answer, reply: none"
)
#: Forced choice (``query.reader: choice``): the reply must be one of the listed candidates.
CHOICE_INSTRUCTIONS = (
    "Answer the question using the knowledge (one fact per line, fields separated by |). "
    "Reply with exactly one of the candidates, copied as written, nothing else."
)
KNOWLEDGE_HEADER = "Knowledge:\n"
CHOICES_HEADER = "Candidates:\n"
QUESTION_PREFIX = "Question: "
#: A sensible completion budget for an answer list.
ANSWER_MAX_TOKENS = 128


class Prompt(NamedTuple):
    """The two messages of the one LLM call (``system, user = build_prompt(...)`` works)."""

    system: str
    user: str

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system},
                {"role": "user", "content": self.user}]

    def to_dict(self) -> dict[str, str]:
        return {"system": self.system, "user": self.user}


@dataclass(frozen=True)
class PromptOverhead:
    """Tokens of a prompt that are not knowledge."""

    instructions: int  # the system message
    question: int  # the user message around the knowledge: header + question line

    @property
    def total(self) -> int:
        return self.instructions + self.question

    def to_dict(self) -> dict[str, int]:
        return {"instructions": self.instructions, "question": self.question,
                "total": self.total}


_WS = re.compile(r"\s+")


def clean_question(question: str) -> str:
    """The question on one line: whitespace runs → one space, lone surrogates → '?'."""
    if not isinstance(question, str):
        raise TypeError(f"question must be a string; got {type(question).__name__}")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError:
        question = question.encode("utf-8", "replace").decode("utf-8")
    return _WS.sub(" ", question).strip()


def choice_lines(choices: Sequence[str]) -> list[str]:
    """The candidates as the prompt lists them (and a grammar allows them): one line each,
    whitespace collapsed, empty and repeated ones dropped."""
    return list(dict.fromkeys(line for c in choices if (line := clean_question(c))))


def build_prompt(knowledge: str, question: str, *, instructions: str | None = None,
                 choices: Sequence[str] = ()) -> Prompt:
    """The system (instructions) and user (knowledge, the candidates when the reply is a
    forced choice, then the question) messages. Default instructions: :data:`INSTRUCTIONS`,
    or :data:`CHOICE_INSTRUCTIONS` with choices."""
    if not isinstance(knowledge, str):
        raise TypeError(f"knowledge must be a string; got {type(knowledge).__name__}")
    if knowledge and not knowledge.endswith("\n"):
        knowledge += "\n"
    listed = "".join(f"- {line}\n" for line in choice_lines(choices))
    if instructions is None:
        instructions = CHOICE_INSTRUCTIONS if listed else INSTRUCTIONS
    return Prompt(instructions, f"{KNOWLEDGE_HEADER}{knowledge}"
                                f"{CHOICES_HEADER + listed if listed else ''}{QUESTION_PREFIX}"
                                f"{clean_question(question)}")


@lru_cache(maxsize=8)
def _instruction_tokens(instructions: str) -> int:
    return count_tokens(instructions)


def prompt_overhead(question: str, *, instructions: str | None = None,
                    choices: Sequence[str] = ()) -> PromptOverhead:
    """Tokens of everything but the knowledge: instructions, header, candidates (forced
    choice) and question line."""
    empty = build_prompt("", question, instructions=instructions, choices=choices)
    return PromptOverhead(_instruction_tokens(empty.system), count_tokens(empty.user))


def prompt_tokens(prompt: Prompt) -> int:
    """cl100k_base tokens of both messages' texts."""
    return _instruction_tokens(prompt.system) + count_tokens(prompt.user)


# --------------------------------------------------------------------------------------------
# parsing

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_FENCE = re.compile(r"^```[\w+-]*$")
_EMPH = r"[ \t*_]*"
_LABEL = re.compile(
    rf"^{_EMPH}(?:final\s+)?answers?(?:\s*\(s\))?{_EMPH}[:：]{_EMPH}"
    r"|^(?:the\s+)?(?:final\s+)?answers?\s+(?:is|are|would\s+be)\s*:?\s+",
    re.I)
_LABEL_ONLY = re.compile(rf"^#*{_EMPH}(?:final\s+)?answers?(?:\s*\(s\))?{_EMPH}[:：]?{_EMPH}$",
                         re.I)
_HEADING = re.compile(r"^#{1,6}\s+")
_BULLET = re.compile(r"^(?:[-*+]\s+|[•·‣◦▪▸►●○■□–—]\s*)")
_NUMBER = re.compile(r"^(?:(\d{1,3})[.)]|\((\d{1,3})\))\s+")
_INLINE_NUMBER = re.compile(r"\s+\d{1,3}[.)]\s+(?=\S)")
_SEPARATORS = re.compile(r"\s*[;|]\s*|\s+/\s+")
_COMMA = re.compile(r",\s+")
_CONJUNCTION = re.compile(r"^(?:and|or)\s+", re.I)
_SUFFIX = re.compile(
    r"^(?:(?:[A-Za-z]\.){1,4}|(?:[A-Za-z]\.){1,3}[A-Za-z]"
    r"|(?:Jr|Sr|Inc|Ltd|LLC|L\.L\.C|Co|Corp|PLC|GmbH|AG|S\.A|N\.V|Esq|Ph\.D|M\.D)\.?|II|III|IV)$")
_ABBREV_END = re.compile(
    r"(?:^|[\s,(])(?:[A-Za-z]\.){2,}$"
    r"|\b(?:Jr|Sr|Inc|Ltd|Co|Corp|St|Dr|Mr|Mrs|Ms|Bros|Esq|Mt|Ft|vs|etc)\.$")
_EDGE_CHARS = "\"`“”„«»‹›*_"
_QUOTE_PAIRS = {"'": "'", "‘": "’", "’": "’"}
_REFUSALS = frozenset({
    "none", "unknown", "n/a", "na", "null", "nil", "no answer", "not known", "not found",
    "not available", "not applicable", "not specified", "not mentioned", "no information",
    "no data", "insufficient information", "insufficient data", "not enough information",
    "cannot be determined", "cannot determine", "cannot answer", "can't answer",
    "unanswerable", "no answers", "none found", "unknown answer", "not provided",
})
_REFUSAL_PREFIX = re.compile(
    r"^(?:i\s+(?:do\s+not|don't|dont|cannot|can't|can\s+not|am\s+unable|'m\s+unable|am\s+not"
    r"\s+sure|'m\s+not\s+sure)\b|i'm\s+(?:not\s+sure|unable|sorry)\b|sorry\b|unable\s+to\b"
    r"|there\s+is\s+no\s+(?:answer|information)\b|(?:not\s+)?enough\s+information\b"
    r"|not\s+enough\b|insufficient\s+(?:information|data|knowledge)\b"
    r"|no\s+(?:answer|information|relevant)\b"
    r"|(?:the\s+)?(?:provided\s+|given\s+)?knowledge\s+(?:does\s+not|doesn't)\b"
    r"|(?:the\s+)?answer\s+is\s+(?:unknown|not\b))",
    re.I)


def _strip_think(text: str) -> str:
    text = _THINK.sub("\n", text)
    low = text.lower()
    close = low.rfind("</think>")
    if close >= 0:  # the template opened the block inside the prompt
        text = text[close + len("</think>"):]
        low = low[close + len("</think>"):]
    start = low.find("<think>")
    if start >= 0:  # never closed: the model was still thinking
        text = text[:start]
    return text


def _json_list(text: str) -> list[str] | None:
    stripped = text.strip()
    if not (stripped.startswith("[") and stripped.endswith("]")) or len(stripped) > 1_000_000:
        return None
    try:
        data = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, list) or not all(isinstance(x, (str, int, float)) for x in data):
        return None
    return [str(x) for x in data if not isinstance(x, bool)]


def _strip_edges(item: str) -> str:
    """Quotes, backticks, emphasis and trailing punctuation off both ends, until stable."""
    while True:
        before = item
        item = item.strip().strip(_EDGE_CHARS).strip()
        if len(item) >= 2 and _QUOTE_PAIRS.get(item[0]) == item[-1]:
            item = item[1:-1]
        while item and item[-1] in ".,:" and not (item[-1] == "." and _ABBREV_END.search(item)):
            item = item[:-1].rstrip()
        if item == before:
            return item


def _is_refusal(item: str) -> bool:
    key = item.casefold().replace("’", "'").replace("‘", "'")
    key = _WS.sub(" ", key).strip(" .!?,;:-")
    return key in _REFUSALS or bool(_REFUSAL_PREFIX.match(key))


def _split_commas(item: str) -> list[str]:
    """The comma rule (module docstring, step 4) for a reply that is one item."""
    parts = [p for p in _COMMA.split(item)]
    if len(parts) < 2:
        return [item]
    oxford = bool(_CONJUNCTION.match(parts[-1]))
    if len(parts) < 3 and not oxford:
        return [item]
    if oxford:
        parts[-1] = _CONJUNCTION.sub("", parts[-1], count=1)
    glued: list[str] = []
    for part in parts:
        if glued and _SUFFIX.match(part.strip()):
            glued[-1] = f"{glued[-1]}, {part}"
        else:
            glued.append(part)
    return glued


def _lines(text: str) -> list[str]:
    """Content lines: fences, labels, empties and (when there is more) headings removed."""
    out: list[str] = []
    headings: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or _FENCE.match(line) or _LABEL_ONLY.match(line):
            continue
        line = _HEADING.sub("", line)
        line = _LABEL.sub("", line, count=1).strip()
        if not line:
            continue
        if line.endswith((":", "：")):
            headings.append(line[:-1])
            continue
        out.append(line)
    return out if out else headings


def _line_items(line: str, numbered: int) -> list[str]:
    """The items one line of a reply holds, its number or bullet taken off: a line numbered
    1 may hold several numbered items; another number is a list's only when the reply
    numbers more than one line (``numbered``)."""
    match = _NUMBER.match(line)
    if not match:
        return [_BULLET.sub("", line, count=1)]
    first = int(match.group(1) or match.group(2))
    if first == 1 and _INLINE_NUMBER.search(line):  # "1. A 2. B" on one line
        return _INLINE_NUMBER.split(line[match.end():])
    if first == 1 or numbered > 1:
        return [line[match.end():]]
    return [line]


def _text_pieces(text: str) -> list[str]:
    """The candidate answers of a reply that is not a JSON list: its lines' items split at
    the separators, edges stripped; a single piece split at its commas."""
    lines = _lines(text)
    numbered = sum(1 for line in lines if _NUMBER.match(line))
    pieces = [piece for line in lines for item in _line_items(line, numbered)
              for piece in _SEPARATORS.split(item)]
    pieces = [_strip_edges(p) for p in pieces]
    pieces = [p for p in pieces if p]
    if len(pieces) == 1:
        pieces = _split_commas(pieces[0])
    return pieces


def parse_answers(text: str) -> list[str]:
    """The answers in an LLM reply, in order, cleaned and de-duplicated (module docstring)."""
    if not isinstance(text, str):
        raise TypeError(f"expected the reply text as a string; got {type(text).__name__}")
    text = _strip_think(text)
    listed = _json_list(text)
    if listed is not None:
        pieces = [p for x in listed for p in x.splitlines()]
    else:
        pieces = _text_pieces(text)
    answers: list[str] = []
    seen: set[str] = set()
    for piece in pieces:
        item = _strip_edges(_WS.sub(" ", piece))
        if not item or not any(ch.isalnum() for ch in item) or _is_refusal(item):
            continue
        key = item.casefold()
        if key not in seen:
            seen.add(key)
            answers.append(item)
    return answers

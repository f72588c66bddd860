"""Sentences and chunks of a document, as character spans of its text.

Sentences come from a rule splitter (end punctuation followed by a capital, a digit or a quote;
paragraph breaks; not after common abbreviations or initials) unless the reader gave them.
Chunks are whole sentences packed up to ``max_tokens`` cl100k_base tokens; consecutive chunks
share their last sentences up to ``overlap`` tokens, so a fact stated across a boundary is seen
whole by one chunk. A sentence longer than ``max_tokens`` is cut into token windows first.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from lokg.runtime.tokens import count_tokens, get_encoding

Span = tuple[int, int]

_BOUNDARY = re.compile(r"""(?<=[.!?])["')\]]*\s+(?=["'(\[]?[A-Z0-9])|\n\s*\n""")
_ABBREVIATION = re.compile(
    r"(?:\b(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|Mt|Gen|Col|Lt|Sgt|Capt|Rev|Hon|Inc|Ltd|Co|Corp|vs|etc|"
    r"No|Vol|pp|Fig|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)|\b[A-Z]|\be\.g|\bi\.e|"
    r"\b[A-Z]\.[A-Z])\.$")


def content_id(*parts) -> str:
    """A 16-hex content hash of the parts: the same content gets the same id in every build."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


def split_sentences(text: str) -> list[Span]:
    """Sentence spans of ``text``, stripped of surrounding whitespace, in order."""
    spans, start = [], 0
    for match in _BOUNDARY.finditer(text):
        before = text[max(start, match.start() - 12):match.start()]
        if "\n" not in match.group(0) and _ABBREVIATION.search(before):
            continue  # "Dr. Smith", "J. K. Rowling", "e.g. this"
        spans.append((start, match.end()))
        start = match.end()
    spans.append((start, len(text)))
    return [s for s in (_stripped(text, a, b) for a, b in spans) if s[1] > s[0]]


def _stripped(text: str, start: int, end: int) -> Span:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _windows(text: str, span: Span, max_tokens: int) -> list[Span]:
    """``span`` cut into pieces of at most ``max_tokens`` tokens (at token boundaries)."""
    start, end = span
    tokens = get_encoding().encode_ordinary(text[start:end])
    if len(tokens) <= max_tokens:
        return [span]
    _, offsets = get_encoding().decode_with_offsets(tokens)
    cuts = [start + offsets[i] for i in range(0, len(tokens), max_tokens)] + [end]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def sentence_units(text: str, given: Sequence[Span], max_tokens: int) -> list[Span]:
    """The sentences of a document (given or split), none longer than ``max_tokens``."""
    spans = [_stripped(text, a, b) for a, b in given] if given else split_sentences(text)
    return [w for span in spans if span[1] > span[0] for w in _windows(text, span, max_tokens)]


def pack(counts: Sequence[int], max_tokens: int, overlap: int) -> list[tuple[int, int]]:
    """Chunks as ``[first, stop)`` ranges of sentence indexes: at most ``max_tokens`` a chunk
    (a single larger sentence makes its own chunk), the next one starting at the earliest of the
    previous chunk's last sentences that together fit in ``overlap``."""
    chunks, first, n = [], 0, len(counts)
    while first < n:
        stop, total = first, 0
        while stop < n and (stop == first or total + counts[stop] <= max_tokens):
            total += counts[stop]
            stop += 1
        chunks.append((first, stop))
        if stop == n:
            break
        back, shared = stop, 0
        while back - 1 > first and shared + counts[back - 1] <= overlap:
            back -= 1
            shared += counts[back]
        # an overlap the next sentence does not fit beside would make a chunk of nothing new
        first = back if shared + counts[stop] <= max_tokens else stop
    return chunks


def chunk_document(text: str, given: Sequence[Span], max_tokens: int,
                   overlap: int) -> tuple[list[Span], list[tuple[int, int]]]:
    """(sentence spans, chunks as sentence ranges) of one document."""
    sentences = sentence_units(text, given, max_tokens)
    # a sentence's tokens with the whitespace before it: the chunk's text is one contiguous span
    counts = [count_tokens(text[(sentences[i - 1][1] if i else a):b])
              for i, (a, b) in enumerate(sentences)]
    return sentences, pack(counts, max_tokens, overlap)

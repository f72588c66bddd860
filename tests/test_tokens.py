"""The offline cl100k_base counter: exact counts, and a clear refusal instead of a download."""

from __future__ import annotations

import shutil

import pytest
import tiktoken
import tiktoken.load
from hypothesis import given
from hypothesis import strategies as st

from lokg.runtime import tokens
from lokg.runtime.tokens import (
    BPE_CACHE_KEY,
    TokenizerUnavailable,
    bpe_path,
    count_joined,
    count_tokens,
    get_encoding,
    load_cl100k,
    splits,
)

SAMPLES = [
    "",
    "hello world",
    "tiktoken is great!",
    "people.person.place_of_birth | Barack Obama | Honolulu\n",
    "Zürich (location.citytown; größte Stadt der Schweiz) | ÆØÅ 東京 🙂\n",
    "  leading spaces\r\n\ttabs\u3000ideographic\u2028separator\n\n\n",
    "it's we'll they've 1234567 $$$ ((()))",
    "<|endoftext|> looks special but is text",
]


def test_known_counts():
    assert count_tokens("hello world") == 2
    assert count_tokens("tiktoken is great!") == 6
    assert count_tokens("") == 0


@pytest.mark.parametrize("text", SAMPLES)
def test_matches_tiktoken_on_the_same_cached_file(text):
    # The cache file exists (get_encoding loaded it), so tiktoken reads it and never fetches.
    reference = tiktoken.get_encoding("cl100k_base")
    assert get_encoding().encode_ordinary(text) == reference.encode_ordinary(text)
    assert count_tokens(text) == len(reference.encode_ordinary(text))


def _tiktoken(text: str) -> int:
    """The reference: the whole text through tiktoken, no memo, no splitting."""
    return len(get_encoding().encode_ordinary(text))


TRICKY = [" ", "\n", "\r\n", " \n", "\n\n", "'s", "'ll", "1234", ")", "(x)", " | ", "...",
          "\t", "\u3000", "\u2028", "\x85", "\xa0", "\x1c", "\u180e", "東京", "🙂", "\ud83d",
          "\ude00", "e\u0301", "$$ ", "<|endoftext|>"]
PIECE = st.one_of(st.sampled_from(TRICKY), st.text(max_size=8),
                  st.text(alphabet=st.characters(codec="utf-8"), max_size=6))


@given(PIECE, PIECE)
def test_splits_where_no_pre_token_spans_the_boundary(left, right):
    # the two cases of splits(): non-space | space…, and …\n | non-space
    for a, b in ((left.rstrip() or "x", " " + right), (left + "\n", right.lstrip() or "x")):
        assert splits(a, b)
        assert _tiktoken(a + b) == _tiktoken(a) + _tiktoken(b)


@given(st.lists(st.lists(st.sampled_from(TRICKY + list("ab1.|")), max_size=4).map("".join),
                max_size=8))
def test_count_joined_is_the_count_of_the_joined_text(parts):
    expected = _tiktoken("".join(parts))
    assert count_joined(parts) == expected
    assert count_joined(parts, [count_tokens(p) for p in parts]) == expected


def test_special_token_lookalikes_are_counted_as_text():
    assert count_tokens("<|endoftext|>") > 1


def test_encoding_is_loaded_once():
    assert get_encoding() is get_encoding()


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt by tiktoken to fetch the file fails the test loudly."""

    def refuse(*args, **kwargs):
        raise AssertionError("tried to download the BPE file")

    monkeypatch.setattr(tiktoken.load, "read_file", refuse)


def test_missing_file_is_refused_naming_the_variable(tmp_path, no_network):
    with pytest.raises(TokenizerUnavailable) as err:
        load_cl100k(tmp_path)
    message = str(err.value)
    assert "TIKTOKEN_CACHE_DIR" in message
    assert str(tmp_path / BPE_CACHE_KEY) in message
    assert "never downloads" in message


def test_environment_points_at_an_empty_cache(tmp_path, monkeypatch, no_network):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert bpe_path() == tmp_path / BPE_CACHE_KEY
    with pytest.raises(TokenizerUnavailable, match="TIKTOKEN_CACHE_DIR"):
        load_cl100k()


def test_disabled_cache_is_refused(monkeypatch, no_network):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    with pytest.raises(TokenizerUnavailable, match="empty string"):
        load_cl100k()


def test_corrupted_file_is_refused(tmp_path, no_network):
    source = bpe_path()
    target = tmp_path / BPE_CACHE_KEY
    shutil.copyfile(source, target)
    with open(target, "ab") as fh:
        fh.write(b"garbage 1\n")
    with pytest.raises(TokenizerUnavailable, match="sha256 mismatch"):
        load_cl100k(tmp_path)


def test_a_copied_cache_loads(tmp_path, no_network):
    shutil.copyfile(bpe_path(), tmp_path / BPE_CACHE_KEY)
    enc = load_cl100k(tmp_path)
    assert enc.encode_ordinary("hello world") == get_encoding().encode_ordinary("hello world")


def test_cache_key_is_the_sha1_of_the_official_url():
    assert BPE_CACHE_KEY == "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
    assert tokens.ENCODING_NAME == "cl100k_base"

"""The prompt frame (overhead counted apart from the knowledge) and the answer-list parser."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lokg.runtime.prompt import (
    INSTRUCTIONS,
    Prompt,
    build_prompt,
    clean_question,
    parse_answers,
    prompt_overhead,
    prompt_tokens,
)
from lokg.runtime.ittc import KnowledgeTriple, render
from lokg.runtime.tokens import count_tokens


CASES = [
    # numbered lists
    ("1. Paris\n2. London\n3. Berlin", ["Paris", "London", "Berlin"]),
    ("1) Paris\n2) London", ["Paris", "London"]),
    ("(1) Paris\n(2) London", ["Paris", "London"]),
    ("1. Paris 2. London 3. Berlin", ["Paris", "London", "Berlin"]),
    ("1. Barack Obama", ["Barack Obama"]),
    ("3. Liga", ["3. Liga"]),  # a lone number other than 1 is part of the name
    ("2001: A Space Odyssey", ["2001: A Space Odyssey"]),
    # bullets
    ("- Paris\n- London", ["Paris", "London"]),
    ("* Paris\n* London", ["Paris", "London"]),
    ("• Paris\n•London", ["Paris", "London"]),
    ("+ Paris", ["Paris"]),
    ("* **Paris**\n* __London__", ["Paris", "London"]),
    # separators
    ("Paris; London; Berlin", ["Paris", "London", "Berlin"]),
    ("Paris | London", ["Paris", "London"]),
    ("Paris / London", ["Paris", "London"]),
    ("AC/DC", ["AC/DC"]),
    ("Paris\r\nLondon\u2028Berlin", ["Paris", "London", "Berlin"]),
    # quotes, backticks, trailing periods
    ('"Paris"', ["Paris"]),
    ("`Paris`", ["Paris"]),
    ("“Paris”, “London”, “Berlin”", ["Paris", "London", "Berlin"]),
    ("'Paris'", ["Paris"]),
    ("'s-Hertogenbosch", ["'s-Hertogenbosch"]),
    ("Paris.", ["Paris"]),
    ("Paris...", ["Paris"]),
    ('"Paris".', ["Paris"]),
    ("Malcolm X.", ["Malcolm X"]),
    ("U.S.", ["U.S."]),
    ("Martin Luther King Jr.", ["Martin Luther King Jr."]),
    # commas
    ("Washington, D.C.", ["Washington, D.C."]),
    ("Paris, Texas", ["Paris, Texas"]),
    ("Tyler, the Creator", ["Tyler, the Creator"]),
    ("Earth, Wind & Fire", ["Earth, Wind & Fire"]),
    ("1,000,000", ["1,000,000"]),
    ("Paris, London, Berlin", ["Paris", "London", "Berlin"]),
    ("Paris, London, and Berlin", ["Paris", "London", "Berlin"]),
    ("Paris, and London", ["Paris", "London"]),
    ("Paris, London and Berlin", ["Paris, London and Berlin"]),  # documented: not split
    ("Washington, D.C., Boston, New York", ["Washington, D.C.", "Boston", "New York"]),
    ("Martin Luther King, Jr., Rosa Parks, Malcolm X",
     ["Martin Luther King, Jr.", "Rosa Parks", "Malcolm X"]),
    ("Washington, D.C.\nParis, Texas", ["Washington, D.C.", "Paris, Texas"]),
    ("- Springfield, Illinois, USA\n- Austin", ["Springfield, Illinois, USA", "Austin"]),
    # labels and headings
    ("Answer: Paris", ["Paris"]),
    ("Answers: Paris; London", ["Paris", "London"]),
    ("answer:Paris", ["Paris"]),
    ("**Answer:** Barack Obama", ["Barack Obama"]),
    ("Final answer: Paris", ["Paris"]),
    ("The answer is Paris.", ["Paris"]),
    ("Answers:\n1. Paris\n2. London", ["Paris", "London"]),
    ("Here are the answers:\n- Paris\n- London", ["Paris", "London"]),
    ("## Answers\n- Paris", ["Paris"]),
    ("```\nParis\nLondon\n```", ["Paris", "London"]),
    # reasoning blocks and JSON lists
    ("<think>Maybe Lyon?</think>\nParis", ["Paris"]),
    ("<think>still thinking about Lyon", []),
    ("Lyon?</think>Paris", ["Paris"]),
    ('["Paris", "London"]', ["Paris", "London"]),
    ('["Washington, D.C."]', ["Washington, D.C."]),
    # refusals
    ("none", []),
    ("None.", []),
    ("Unknown", []),
    ("N/A", []),
    ("I don't know.", []),
    ("I don’t know the answer.", []),
    ("Answer: none", []),
    ("Not enough information to answer.", []),
    ("The knowledge does not say.", []),
    ("Paris\nunknown", ["Paris"]),
    # empties and duplicates
    ("", []),
    ("   \n\n\t", []),
    ("-\n*\n...", []),
    ("Paris\nparis\nPARIS\nLondon\nParis.", ["Paris", "London"]),
    ("  Barack   Obama  ", ["Barack Obama"]),
]


@pytest.mark.parametrize("text, expected", CASES)
def test_parse_cases(text, expected):
    assert parse_answers(text) == expected


def test_parse_rejects_non_text():
    with pytest.raises(TypeError):
        parse_answers(None)  # type: ignore[arg-type]


def test_parse_huge_input_is_fast():
    import time

    text = ("Paris, London; Berlin | Rome / Madrid\n- 1. x\n" * 20_000) + "[" * 50_000
    started = time.perf_counter()
    out = parse_answers(text)
    assert time.perf_counter() - started < 5
    assert out == ["Paris, London", "Berlin", "Rome", "Madrid", "1. x"]


def _check_items(items):
    assert isinstance(items, list)
    assert all(isinstance(i, str) for i in items)
    assert all(i and i == i.strip() for i in items)
    assert all(len(i.splitlines()) == 1 for i in items)
    keys = [i.casefold() for i in items]
    assert len(keys) == len(set(keys))


@given(st.text())
def test_parse_never_raises_on_any_text(text):
    _check_items(parse_answers(text))


LISTY = st.lists(
    st.one_of(
        st.sampled_from(["1. ", "2) ", "- ", "* ", "• ", "Answer: ", '"', "`", "'", ", ", "; ",
                         " | ", " / ", "\n", "\r\n", ".", "none", "<think>", "</think>", "[",
                         "]", "**", "D.C.", "Jr.", " and ", ":", "\u2028", "\x85"]),
        st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12),
    ),
    max_size=30,
).map("".join)


@given(LISTY)
def test_parse_never_raises_on_list_like_text(text):
    _check_items(parse_answers(text))


@given(st.lists(st.from_regex(r"[A-Z][a-z]{1,8}( [A-Z][a-z]{1,8}){0,2}", fullmatch=True),
                min_size=1, max_size=6))
def test_one_per_line_round_trips(names):
    expected = list(dict.fromkeys(names))  # exact duplicates only (names differ otherwise)
    seen, unique = set(), []
    for name in expected:
        if name.casefold() not in seen and name.casefold() not in {"none", "unknown", "nil",
                                                                      "null", "na"}:
            seen.add(name.casefold())
            unique.append(name)
    text = "\n".join(f"{i + 1}. {n}" for i, n in enumerate(names))
    assert parse_answers(text) == unique
    assert parse_answers("\n".join(names)) == unique


# --------------------------------------------------------------------------------------------
# the prompt


def test_build_prompt_shape():
    prompt = build_prompt("Obama | born_in | Honolulu\n", "  Where was\nObama born? ")
    assert isinstance(prompt, Prompt)
    system, user = prompt
    assert system == INSTRUCTIONS and "one per line" in system and "none" in system
    assert user == "Knowledge:\nObama | born_in | Honolulu\nQuestion: Where was Obama born?"
    assert prompt.messages() == [{"role": "system", "content": system},
                                 {"role": "user", "content": user}]
    assert prompt.to_dict() == {"system": system, "user": user}


def test_instructions_are_short():
    assert count_tokens(INSTRUCTIONS) <= 60


def test_knowledge_without_final_newline_gets_one():
    assert build_prompt("a | r | b", "q?").user == "Knowledge:\na | r | b\nQuestion: q?"
    assert build_prompt("", "q?").user == "Knowledge:\nQuestion: q?"


def test_clean_question():
    assert clean_question("a\tb\n\nc ") == "a b c"
    assert clean_question("x\ud800y") == "x?y"
    with pytest.raises(TypeError):
        clean_question(None)  # type: ignore[arg-type]


def test_overhead_parts():
    overhead = prompt_overhead("Where was Obama born?")
    assert overhead.instructions == count_tokens(INSTRUCTIONS)
    assert overhead.question == count_tokens("Knowledge:\nQuestion: Where was Obama born?")
    assert overhead.total == overhead.instructions + overhead.question
    assert overhead.to_dict()["total"] == overhead.total
    assert prompt_tokens(build_prompt("", "Where was Obama born?")) == overhead.total


NAMES = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=20)


@given(st.lists(st.tuples(NAMES, NAMES, NAMES, st.integers(0, 2)), max_size=6), st.text())
def test_prompt_tokens_are_overhead_plus_knowledge(rows, question):
    """With ITTC lines as knowledge, the prompt costs exactly overhead + knowledge tokens."""
    order = ("r", "s", "o")
    knowledge = "".join(
        render(KnowledgeTriple(subject=s, relation=r, object=o), order, level)
        for s, r, o, level in rows)
    prompt = build_prompt(knowledge, question)
    assert prompt_tokens(prompt) == prompt_overhead(question).total + count_tokens(knowledge)

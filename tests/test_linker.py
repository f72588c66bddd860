"""The linker's preference for what a question writes as a name (graphs extracted from text
hold common nouns such as "country" as entities)."""

from __future__ import annotations

import pytest

from runtime.linker import Linker, surface_forms

FORMS = [(0, "country"), (1, "Bubye River"), (2, "Publix"), (3, "state"), (4, "1990"),
         (5, "rock")]


@pytest.mark.parametrize("question, expected", [
    ("What is the waterfall in the country where the Bubye River is found?", ["Bubye River"]),
    ("How many Publix stores are in the state?", ["Publix"]),
    ("which country was the state founded in 1990 ?", ["1990"]),
    ("what is the country of the bubye river ?", ["country", "Bubye River"]),  # all lower case
    ("Which country plays rock?", ["country", "rock"]),  # only the question's first word
])
def test_names_the_question_writes_as_names_win_over_common_nouns(question, expected):
    linker = Linker(FORMS)
    names = {i: form for i, form in FORMS}
    assert [names[link.id] for link in linker.link(question)] == expected


@pytest.mark.parametrize("question, expected", [
    ("who directed John Smith ?", [0]),  # the name without its disambiguator
    ("what films did john_smith star in", [0]),
    ("what films did John Smith (actor) star in", [0]),  # as written, too
    ("where is Paris, Texas ?", [2]),  # only a trailing parenthesis is a disambiguator
    ("what genre is (Untitled) ?", [1]),  # a name that is only a parenthesis stays itself
])
def test_names_with_disambiguators_link_without_them(question, expected):
    forms = surface_forms(["John Smith (actor)", "(Untitled)", "Paris, Texas"],
                          ["john_smith_(actor)", "m.1", "paris_texas"], [None, None, None])
    assert [link.id for link in Linker(forms).link(question)] == expected

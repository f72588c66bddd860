"""The linker's preference for what a question writes as a name (graphs extracted from text
hold common nouns such as "country" as entities)."""

from __future__ import annotations

import pytest

from runtime.linker import Linker

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

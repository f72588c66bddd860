"""The linker's preference for what a question writes as a name (graphs extracted from text
hold common nouns such as "country" as entities)."""

from __future__ import annotations

import pytest

from lokg.runtime.linker import Link, Linker, common_nouns, spelled_topics, surface_forms

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


# ---- common nouns only feedback added link as a fallback (issue 16: the "continent" takeover)

CONTINENT = "What is the continental limit of the continent with the lowest average temperature?"


def test_a_feedback_common_noun_links_only_when_nothing_else_does():
    forms = [(0, "Antarctica"), (1, "continent"), (2, "Africa"), (3, "average temperature")]
    linker = Linker(forms, fallback={1})
    (only,) = linker.link(CONTINENT.replace("average temperature", "coldest air"))
    assert (only.id, only.method) == (1, "fallback")
    assert [link.id for link in linker.link(CONTINENT)] == [3]  # another span links: not it
    assert [link.id for link in linker.link("Which continent is Africa on?")] == [2]
    assert [(link.id, link.method) for link in Linker(forms).link(CONTINENT)] == \
        [(1, "exact"), (3, "exact")]  # without the flag it links like any entity


def test_a_fallback_form_claims_no_words_and_a_same_named_entity_still_links():
    linker = Linker([(0, "continent"), (1, "continent"), (2, "continent limit")], fallback={0})
    assert [(link.id, link.method) for link in linker.link("the continent of it")] == \
        [(1, "exact")]
    linker = Linker([(0, "coldest continent"), (1, "continent")], fallback={0})
    assert [link.id for link in linker.link("the coldest continent")] == [1]
    extended = Linker([(0, "Antarctica")]).with_forms([(1, "continent")], None, fallback={1})
    assert [link.method for link in extended.link("the continent")] == ["fallback"]


def test_common_nouns_are_names_without_capitals_or_digits():
    names = ["continent", "Africa", "1990", "coldest continent", "iPhone"]
    assert common_nouns(names, range(5)) == {0, 3}
    assert common_nouns(names, [1, 3]) == {3}


def test_the_runtime_tries_the_vector_fallback_before_a_feedback_common_noun():
    """Round 1 of the 50-question run: "Africa *is* continent" made the entity "continent",
    which replaced round 0's vector link "coldest continent" (→ Antarctica, the gold's source)."""
    from types import SimpleNamespace

    import numpy as np

    from lokg.runtime.query import Runtime

    def runtime(linker, nearest):
        return SimpleNamespace(
            linker=linker, vectors=np.zeros((3, 2)), settings={"min_link_cosine": 0.5},
            embed=lambda _, question: (None, np.ones(2, dtype=np.float32)),
            search=lambda query, k: (np.array([[0.8]]), np.array([[nearest]])))

    forms = [(0, "coldest continent"), (1, "continent"), (2, "Norland")]
    rt = runtime(Linker(forms, fallback={1}), nearest=0)
    links, q_vec = Runtime._link(rt, CONTINENT, None)
    assert [(link.id, link.method) for link in links] == [(0, "vector")] and q_vec is not None
    rt = runtime(Linker(forms, fallback={1}), nearest=-1)  # the vector finds nothing
    assert [link.method for link in Runtime._link(rt, CONTINENT, None)[0]] == ["fallback"]
    rt = runtime(Linker(forms), nearest=0)  # an entity of the dump's own: linked as before
    assert [link.method for link in Runtime._link(rt, CONTINENT, None)[0]] == ["exact"]


# ---- qualified forms: one place or event split over several names (issue 16, recall) --------

SPLIT = ["Manchuria", "Soviet invasion of Manchuria", "seizure of Manchuria", "Izgoy",
         "State", "Golden State", "Garden State", "Empire State", "Mississippi State",
         "Manchurian Candidate"]


def split_linker(max_qualified=4):
    return Linker(list(enumerate(SPLIT)), max_qualified=max_qualified, names=SPLIT)


def test_a_written_name_also_links_the_names_that_qualify_it():
    """"Manchuria" in the question, the date in "Soviet invasion of Manchuria"'s triples: the
    qualified form links too (after the span's own link, claiming no words); an extracted
    phrase that is not itself a name ("seizure of Manchuria") and a name that only shares a
    prefix of a word ("Manchurian Candidate") do not."""
    links = split_linker().link("When did the country of Izgoy's performer invade Manchuria?")
    assert [(SPLIT[link.id], link.method) for link in links] == [
        ("Izgoy", "exact"), ("Manchuria", "exact"), ("Soviet invasion of Manchuria", "qualified")]
    assert links[-1].span == "manchuria"


def test_a_generic_word_with_many_qualified_forms_links_none_of_them():
    """Four names hold "State": past a limit of 3 it is a generic word, at 4 a name."""
    question = "Which State joined in 1817?"
    assert [SPLIT[link.id] for link in split_linker(3).link(question)] == ["State"]
    assert [SPLIT[link.id] for link in split_linker(4).link(question)] == [
        "State", "Golden State", "Garden State", "Empire State", "Mississippi State"]


def test_qualified_forms_only_for_names_the_question_writes_and_only_when_on():
    assert [link.method for link in split_linker().link("when was manchuria invaded ?")] == \
        ["exact"]  # written in lower case: not a name the question writes
    assert [link.method for link in split_linker(0).link("Manchuria?")] == ["exact"]
    extended = split_linker().with_forms([(10, "Red Army in Manchuria")], None,
                                         names=SPLIT + ["Red Army in Manchuria"])
    assert {extended.names[link.id] for link in extended.link("Manchuria?")} == {
        "Manchuria", "Soviet invasion of Manchuria", "Red Army in Manchuria"}


def test_a_top_candidates_qualified_forms_bring_their_triples_into_the_candidate_set():
    """Meehan Bonnar was born in "Fredericton, New Brunswick"; the diocese is in "Fredericton,
    New Brunswick, Canada" — a split bridge, whose other name's triples hold the next hop."""
    from types import SimpleNamespace

    from lokg.runtime.retrieval import Retriever

    names = ["Meehan Bonnar", "Fredericton, New Brunswick", "Fredericton, New Brunswick, Canada",
             "Diocese of Fredericton", "Boston Bruins", "cathedral of Boston Bruins"]
    graph = {2: [(3, 0, 2)], 5: [(5, 1, 4)]}

    def runtime(max_qualified, focus):
        return SimpleNamespace(
            linker=Linker(list(enumerate(names)), max_qualified=max_qualified, names=names),
            names=names, settings={"focus_candidates": focus},
            neighbourhood=lambda heads: [t for h in heads for t in graph.get(h, [])])

    candidates = [SimpleNamespace(id=4), SimpleNamespace(id=1)]
    assert Retriever(runtime(4, 2))._qualified_neighbourhood(candidates) == [(3, 0, 2)]
    assert Retriever(runtime(4, 1))._qualified_neighbourhood(candidates) == []  # not in focus
    assert Retriever(runtime(0, 2))._qualified_neighbourhood(candidates) == []  # off
    linker = runtime(4, 2).linker
    assert linker.qualified_forms_of("fredericton") == ()  # not written as a name
    assert linker.qualified_forms_of("Fredericton, New Brunswick") == (2,)


# ---- one mention, several entities: derive from the one the question spells exactly ----------

RIVERS = ["The Golden River", 'The "Golden" River', "Golden River", "John Smith",
          "John Smith (actor)", "Paris", "Paris", "PARIS", "Paris"]


def spelled(question: str) -> list[str]:
    forms = surface_forms(RIVERS, [f"m.{i}" for i in range(len(RIVERS))], [None] * len(RIVERS))
    linker = Linker(forms, max_per_span=4)
    return [RIVERS[i] for i in spelled_topics(question, linker.link(question),
                                              lambda i: (RIVERS[i], f"m.{i}"))]


@pytest.mark.parametrize("question, expected", [
    ('what is the language of The "Golden" River', ['The "Golden" River']),
    ("who wrote The Golden River", ["The Golden River"]),
    ("who wrote The “Golden” River ?", ['The "Golden" River']),  # typographic quotes
    ("who wrote the  golden river", ["The Golden River"]),  # case and spaces folded
    ("who wrote The Golden-River", ["The Golden River", 'The "Golden" River']),  # neither
    ("who wrote Golden River", ["Golden River"]),  # one entity: nothing to choose
    ("who is John Smith", ["John Smith", "John Smith (actor)"]),  # disambiguator unwritten
    ("who is John Smith (actor)", ["John Smith (actor)"]),
    ("where is PARIS", ["PARIS"]),  # case decides when it singles one out
])
def test_of_competing_links_a_chain_is_derived_from_the_exactly_spelled_ones(question, expected):
    assert sorted(spelled(question)) == sorted(expected)


def test_same_spelled_entities_all_stay_topics_and_other_mentions_are_untouched():
    linker = Linker([(0, "Paris"), (1, "Paris"), (2, "The Seine"), (3, 'The "Seine"')])
    question = "does The Seine flow through Paris ?"
    links = linker.link(question)
    assert [link.id for link in links] == [2, 3, 0, 1]
    names = {0: "Paris", 1: "Paris", 2: "The Seine", 3: 'The "Seine"'}
    assert spelled_topics(question, links, lambda i: (names[i],)) == [2, 0, 1]
    given = [Link(3, "m.3", "given", 1.0), Link(2, "m.2", "given", 1.0)]
    assert spelled_topics(question, given, lambda i: (names[i],)) == [3, 2]  # caller's ids

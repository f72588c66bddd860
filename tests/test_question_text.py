"""runtime/question_text.py: how questions and relation names are read as words (the topic
masked, spans, hop runs, relation names in any naming scheme)."""

from __future__ import annotations

import pytest

from lokg.runtime.question_text import (PLACEHOLDER, head_spans, hop_runs, mask_topic,
                                   relation_texts)


def test_mask_topic_replaces_the_mention_and_drops_filler_words():
    assert mask_topic("What is the gender of Alba_Quist's father?", ["alba quist"]) == \
        f"gender of {PLACEHOLDER} father"
    assert mask_topic("who is bob", ["alba quist"]) == "bob"


@pytest.mark.parametrize("names, texts", [
    (["/film/film/directed_by", "film.film.starring", "__film__film__country"],
     ["directed by", "starring", "country"]),
    (["filmFilmDirectedBy", "filmFilmStarring", "filmFilmCountry", "peoplePersonSpouse"],
     ["directed by", "starring", "country", "people person spouse"]),
    (["has_genre", "has_tags", "has_imdb_votes", "directed_by", "in_language"],
     ["genre", "tags", "imdb votes", "directed by", "in language"]),
    (["people.person.place_of_birth", "spouse", "HTTPServerName"],
     ["place of birth", "spouse", "http server name"]),
])
def test_relation_names_become_words_whatever_the_naming_scheme(names, texts):
    assert relation_texts(names) == texts


def test_head_spans_are_the_prefixes_of_the_first_run_of_content_words():
    assert head_spans("sovereign state native town of person behind camera of someone ?") \
        == ["sovereign", "sovereign state", "sovereign state native", "sovereign state native town"]
    assert head_spans("someone gender what ?") == []  # the topic comes first
    assert head_spans("country of capital of someone") == ["country"]


@pytest.mark.parametrize("question, topic, hops", [
    ("which sovereign state does the native town of the person behind the camera of "
     "River: Burning have ?", "River: Burning", (3, 3)),  # the asked head, 'of the', the topic
    ("starting from Nevuville , follow sovereign state , then seat of government , then land "
     "it lies in : what do you reach ?", "Nevuville", (3, 4)),  # a bare 'of' may join or not
    ("what is the nationality of yixin_prince_gong 's son's wife ?", "yixin_prince_gong",
     (3, 3)),  # possessives, the topic spelled as its key
    ("name the person who established it belonging to the backer of The \"Broken\" River ?",
     "The \"Broken\" River", (2, 2)),  # stop words inside a run, punctuation in the topic
    ("Where does Ana Lee\u2019s son work?", "Ana Lee", (1, 1)),  # a verb folds a hop in
    ("what is Ana Lee ?", "Ana Lee", (0, 0)),  # no content word
])
def test_hop_runs_are_the_runs_of_content_words_between_joins(question, topic, hops):
    """The topic, punctuation, possessives, "then", "belonging to", the asked head's verb and
    an "of" before an article cut a question into runs; each run with a content word names one
    hop, or one per part split at a bare "of"; frame words ("follow", "reach") name none."""
    assert hop_runs(question, [topic]).range == hops


@pytest.mark.parametrize("question, fewest, most", [
    ("what is the capital of ana lee 's child 's country of citizenship ?",
     ["child", "country citizenship", "capital"], ["child", "country", "citizenship", "capital"]),
    ("name the land it lies in belonging to the seat of government belonging to the passport "
     "issuer of ana lee ?", ["passport issuer", "seat government", "land lies"],
     ["passport issuer", "seat", "government", "land lies"]),
    ("starting from ana lee , follow helmer , then native town : what do you reach ?",
     ["helmer", "native town"], ["helmer", "native town"]),
])
def test_hop_runs_walk_outward_from_the_topic(question, fewest, most):
    """Runs after the topic in reading order, then those before it from the nearest: the
    order the chain walks; each reading gives one text per hop."""
    runs = hop_runs(question, ["Ana Lee"])
    assert (runs.hops("fewest"), runs.hops("most"), runs.hops("range")) == (fewest, most, None)
    assert runs.anchored and not hop_runs(question, ["Bo Kim"]).anchored

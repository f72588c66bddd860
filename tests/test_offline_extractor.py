"""The offline extraction backend (text/offline_extractor.py): the triples a reader would write
down for plain sentences, typed entities, clear refusals, and a stable, deterministic output."""

import copy
import sys

import pytest

from lokg.common.stage import StageError
from lokg.pipeline.config import DEFAULTS, check_config
from lokg.runtime.config import ConfigError
from lokg.text.extractors import ChunkExtractionError, make_extractor


@pytest.fixture(scope="module")
def extractor():
    return make_extractor(DEFAULTS["triple_extract"])


def has_triple(result, subject, relation_word, obj):
    return any(s == subject and relation_word in r.split() and o == obj
               for s, r, o in result["triples"])


@pytest.mark.parametrize("text, subject, relation_word, obj", [
    ("Marie Curie was born in Warsaw.", "Marie Curie", "born", "Warsaw"),
    ("The novel was published by Penguin Books in 1950.", "novel", "published", "Penguin Books"),
    ("The novel was published by Penguin Books in 1950.", "novel", "in", "1950"),
    ("Tolkien wrote The Hobbit in 1937.", "Tolkien", "wrote", "Hobbit"),
    ("Tolkien wrote The Hobbit in 1937.", "Tolkien", "in", "1937"),
    ("Paris is the capital of France.", "Paris", "capital", "France"),
    # a participle clause inherits the subject of the noun it modifies, through the copula
    ("The Lancet is a weekly medical journal published by Elsevier.", "Lancet", "published",
     "Elsevier"),
    ("Nature is a weekly journal published by Springer Nature.", "Nature", "published",
     "Springer Nature"),
    # a personal pronoun stands for the chunk's topic, its first subject
    ("Niels Bohr was a physicist. He died in Copenhagen.", "Niels Bohr", "died", "Copenhagen"),
    # conjoined verbs share their subject
    ("Ada Lovelace lived in London and died in Marylebone.", "Ada Lovelace", "died", "Marylebone"),
])
def test_sentence_gives_triple(extractor, text, subject, relation_word, obj):
    result = extractor.extract(text)
    assert has_triple(result, subject, relation_word, obj), result["triples"]


def test_triple_ends_are_listed_entities(extractor):
    result = extractor.extract("Marie Curie was born in Warsaw. She won the Nobel Prize in 1903.")
    names = {e["name"] for e in result["entities"]}
    assert all(s in names and o in names for s, _, o in result["triples"])
    assert not any(s == "She" for s, _, _ in result["triples"])


def test_entities_are_typed(extractor):
    result = extractor.extract("Marie Curie was born in Warsaw in 1867.")
    types = {e["name"]: e["type"] for e in result["entities"]}
    assert types["Marie Curie"] == "person"
    assert types["Warsaw"] == "location"
    assert types["1867"] == "date"
    assert all(set(e) == {"name", "type", "description"} for e in result["entities"])


def test_copula_gives_description(extractor):
    result = extractor.extract("Nature is a weekly scientific journal.")
    nature = next(e for e in result["entities"] if e["name"] == "Nature")
    assert nature["description"] == "weekly scientific journal"


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_empty_text_gives_nothing(extractor, text):
    assert extractor.extract(text) == {"entities": [], "triples": []}


def test_output_is_deterministic(extractor):
    text = ("The Journal of Mathematical Physics is a peer-reviewed journal published monthly by "
            "the American Institute of Physics. The journal was first published in January 1960.")
    first = extractor.extract(text)
    assert first["triples"] and all(extractor.extract(text) == first for _ in range(3))
    assert make_extractor(DEFAULTS["triple_extract"]).extract(text) == first


def test_fingerprint_is_stable_and_names_model_and_rules(extractor):
    again = make_extractor(DEFAULTS["triple_extract"])
    assert extractor.fingerprint == again.fingerprint
    assert DEFAULTS["triple_extract"]["offline_model"] in extractor.fingerprint
    assert "rules-" in extractor.fingerprint
    assert (extractor.name, extractor.concurrency) == ("offline", 1)


def test_non_text_chunk_is_refused(extractor):
    with pytest.raises(ChunkExtractionError, match="string"):
        extractor.extract(None)


def test_missing_model_is_a_clear_error():
    cfg = {**DEFAULTS["triple_extract"], "offline_model": "no_such_spacy_model"}
    with pytest.raises(StageError, match="offline_model.*no_such_spacy_model"):
        make_extractor(cfg)


def test_missing_spacy_names_the_extra_to_install(monkeypatch):
    """spaCy is an optional extra (make demo's set-up skips it): a documents build without it
    says what to install."""
    monkeypatch.setitem(sys.modules, "spacy", None)  # import spacy raises ImportError
    cfg = {**DEFAULTS["triple_extract"], "offline_model": "a_model_not_loaded_yet"}
    with pytest.raises(StageError, match=r"lokg\[documents\].*--extras"):
        make_extractor(cfg)


def test_offline_model_is_a_checked_setting():
    cfg = copy.deepcopy(DEFAULTS)
    cfg["triple_extract"]["offline_model"] = "not a package name"
    with pytest.raises(ConfigError, match="offline_model"):
        check_config(cfg)

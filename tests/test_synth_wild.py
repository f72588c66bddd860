"""The synthetic generator's wild wording (pipeline/synth_wild.py): the same questions as the
train wording in other texts, its forms, its noise at the configured shares, by seed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from lokg.pipeline.synth import generate
from lokg.pipeline.synth_names import relation_names
from lokg.pipeline.synth_schema import FAMILIES, MOVIE_FAMILIES
from lokg.pipeline.synth_wild import LEXICON, LOWER_SHARE, MARK, TYPO_SHARE, roughen, unit_forms
from lokg.pipeline.synth_wording import METAQA, render, renderings

WILD_ONLY = ("wording", "inverse", "question", "noise")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def steps_of(path: list[str]) -> list[tuple[str, tuple[str, ...], bool]]:
    """(dotted relation, its phrases, inverse) per hop of a dotted gold path."""
    phrases = {fam.base: fam.phrases for fam in FAMILIES + MOVIE_FAMILIES}
    return [(hop.lstrip("~"), phrases[hop.lstrip("~")], hop.startswith("~")) for hop in path]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """Train- and wild-worded dumps of both styles (the same options otherwise)."""
    root = tmp_path_factory.mktemp("wild")
    for style in ("pathquestion", "metaqa"):
        options = dict(n_triples=4000, seed=6, n_questions=400, question_style=style)
        generate(root / style / "train", **options)
        generate(root / style / "wild", **options, test_wording="wild")
    return root


@pytest.mark.parametrize("style", ["pathquestion", "metaqa"])
def test_wild_wording_asks_the_same_questions_in_other_texts(dumps, style):
    train, wild = dumps / style / "train", dumps / style / "wild"
    for split in ("train", "dev", "test"):  # topics, chains, answers: the same
        assert ([{k: v for k, v in q.items() if k not in WILD_ONLY}
                 for q in read_jsonl(train / f"{split}.jsonl")]
                == [{k: v for k, v in q.items() if k not in WILD_ONLY}
                    for q in read_jsonl(wild / f"{split}.jsonl")])
    assert [q["question"] for q in read_jsonl(train / "dev.jsonl")] == [
        q["question"] for q in read_jsonl(wild / "dev.jsonl")]
    asked = read_jsonl(wild / "test.jsonl")
    assert {q["wording"] for q in asked} == {"wild"} and len(asked) == 40
    for seen, q in zip(read_jsonl(train / "test.jsonl"), asked, strict=True):
        steps, topic = steps_of(q["path"]), q["topic_names"][0]
        assert q["question"] != seen["question"]
        assert q["question"] not in renderings(style, "train", steps, topic), q
    assert (train / "kg.nt").read_bytes() == (wild / "kg.nt").read_bytes()


@pytest.mark.parametrize("relation, kind, form", [
    ("film.film.directed_by", "fwd", "{x} was directed by whom"),
    ("film.film.directed_by", "fwd", "{x}'s director is who?"),
    ("film.film.directed_by", "fwd", "who helmed {x}"),
    ("film.film.directed_by", "inv", "what films did {x} direct"),
    ("film.film.directed_by", "share", "which films have the same director as {x}"),
    ("film.film.starring", "inv", "which movies was {x} an actor in"),
    ("organization.organization.founders", "fwd", "{x} was founded by whom"),
    ("organization.organization.founders", "inv", "what companies did {x} found"),
    ("people.person.place_of_birth", "share", "who shares a birthplace with {x}"),
    ("film.film.language", "fwd", "which language is {x} in"),
])
def test_wild_forms_ask_passives_far_ends_shares_and_the_wh_word_last(relation, kind, form):
    assert form in unit_forms(relation, kind)[0]


@pytest.mark.parametrize("relation", sorted(METAQA))
@pytest.mark.parametrize("kind", ["fwd", "inv", "share"])
def test_every_unit_has_several_forms_sharing_no_word_with_the_relation_name(relation, kind):
    plain = relation_names(FAMILIES + MOVIE_FAMILIES, "plain")[relation]
    name = set(re.split(r"[._]", relation)) | set(plain.split("_"))
    other = [f for f in unit_forms(relation, kind)[0]
             if not set(f.replace("{x}", "").replace("'s", "").split()) & name]
    assert len(other) >= 3, (relation, kind)


def test_every_family_has_a_lexicon():
    assert set(LEXICON) == {fam.base for fam in FAMILIES + MOVIE_FAMILIES}


@pytest.mark.parametrize("style, path", [
    ("metaqa", ["film.film.written_by", "~film.film.directed_by", "film.film.language"]),
    ("pathquestion", ["people.person.employer", "organization.organization.founders",
                      "people.person.nationality"]),
])
def test_wild_texts_nest_every_hop_around_the_topic(style, path):
    steps = steps_of(path)
    texts = {render(style, "wild", steps, "Topic Name", (i, j, k))
             for i in range(3) for j in range(2) for k in range(2)}
    assert len(texts) == 12 and all("Topic Name" in t for t in texts)


@pytest.mark.parametrize("topic", ["The Dark River", "Febaland"])
def test_noise_lower_cases_names_and_misspells_words_at_their_shares(topic):
    text = render("metaqa", "wild", steps_of(["~film.film.directed_by", "film.film.genre"]),
                  MARK, (0, 0))
    words, n, lower, typos = text.split(" "), 3000, 0, 0
    for i in range(n):
        noisy, noise = roughen(text, topic, np.random.default_rng([7, i]))
        name = topic.lower() if noise["lower"] else topic
        assert name in noisy
        rest = noisy.replace(name, MARK).split(" ")
        assert sum(a != b for a, b in zip(words, rest, strict=True)) == noise["typos"]
        lower += noise["lower"]
        typos += noise["typos"]
    eligible = sum(MARK not in w and len(w) >= 3 and w.isalpha() for w in words)
    assert lower / n == pytest.approx(LOWER_SHARE, abs=0.03)
    assert typos / (n * eligible) == pytest.approx(TYPO_SHARE, abs=0.01)


def test_wild_dump_records_its_noise_at_the_configured_shares(tmp_path):
    generate(tmp_path, n_triples=4000, seed=3, n_questions=3000, question_style="metaqa",
             test_wording="wild")
    asked = read_jsonl(tmp_path / "test.jsonl")
    lowered = [q for q in asked if q["noise"]["lower"]]
    assert 0.2 < len(lowered) / len(asked) < 0.4
    assert all(q["topic_names"][0].lower() in q["question"] for q in lowered)
    assert 0.1 < sum(q["noise"]["typos"] > 0 for q in asked) / len(asked) < 0.6
    for pattern in (r" was \w+ by ", r" did .+ \w+$", r" same ", r" is (who|what)\?$"):
        assert any(re.search(pattern, q["question"]) for q in asked), pattern


@pytest.mark.parametrize("seed", [0, 5])
def test_wild_wording_is_deterministic_by_seed(tmp_path, seed):
    options = dict(n_triples=3000, n_questions=300, question_style="metaqa",
                   test_wording="wild")
    for run in ("a", "b"):
        generate(tmp_path / run, seed=seed, **options)
    generate(tmp_path / "other", seed=seed + 1, **options)
    again = (tmp_path / "a" / "test.jsonl").read_bytes()
    assert again == (tmp_path / "b" / "test.jsonl").read_bytes()
    assert again != (tmp_path / "other" / "test.jsonl").read_bytes()

"""Dataset adapters: PathQuestion directories, synthetic questions.jsonl, generic JSONL."""

from __future__ import annotations

import json

import pytest

from lokg.common.datasets import (
    DatasetError,
    load_dataset,
    parse_pathquestion_answer,
    parse_pathquestion_path,
)
from lokg.pipeline.synth import generate
from lokg.testing.dumps import METAQA_KB, METAQA_TEST

PQ_TEST = (
    "what gender is ann_smith 's father ?\tmale(male/)\t"
    "ann_smith#parents#bob_smith#gender#male#<end>#male\n"
    "which country is ann_smith 's father from ?\tengland(united_kingdom/england/)\t"
    "ann_smith#parents#bob_smith#nationality#england#<end>#england\n"
    "\n"
    "the genre of cal_jones 's band 's label ?\tthe_x_(band)(the_x_(band)/)\t"
    "cal_jones#member_of#the_y#label#the_z#genre#the_x_(band)#<end>#the_x_(band)\n"
)


@pytest.fixture()
def pq_dir(tmp_path):
    root = tmp_path / "pq"
    root.mkdir()
    (root / "kb.txt").write_text("ann_smith\tparents\tbob_smith\nbob_smith\tgender\tmale\n")
    (root / "test.txt").write_text(PQ_TEST)
    (root / "train.txt").write_text(PQ_TEST.splitlines(keepends=True)[0])
    (root / "dev.txt").write_text("")
    return root


@pytest.mark.parametrize("field, expected", [
    ("male(male/)", ("male",)),
    ("england(united_kingdom/england/)", ("england", "united_kingdom")),
    ("swedish_people(swedish_american/swedish_people/)", ("swedish_people", "swedish_american")),
    ("the_x_(band)(the_x_(band)/)", ("the_x_(band)",)),  # parentheses inside the name
    ("paris", ("paris",)),  # no list: the field is the answer
    ("a(b/c/)", ("a", "b", "c")),  # head not in the list: still kept
])
def test_parse_pathquestion_answer(field, expected):
    assert parse_pathquestion_answer(field) == expected


def test_parse_pathquestion_path():
    assert parse_pathquestion_path("a#r1#b#r2#c#<end>#c") == ("a", ("r1", "r2"))
    with pytest.raises(ValueError, match="not topic#relation"):
        parse_pathquestion_path("a#r1#<end>#a")


def test_pathquestion_directory(pq_dir):
    data = load_dataset(f"pathquestion:{pq_dir}")  # split defaults to test
    assert data.kind == "pathquestion" and data.split == "test"
    assert [q.id for q in data.questions] == ["test-00001", "test-00002", "test-00004"]
    first, second, third = data.questions
    assert first.question == "what gender is ann_smith 's father ?"
    assert first.answers == ("male",)
    assert first.topic_entities == ("ann_smith",)
    assert first.path == ("parents", "gender")
    assert set(second.answers) == {"england", "united_kingdom"}
    assert third.path == ("member_of", "label", "genre") and third.answers == ("the_x_(band)",)
    assert data.kb == pq_dir / "kb.txt" and data.kb_format == "pathquestion"
    assert data.train_file == pq_dir / "train.txt"
    assert len(data.sha256) == 64
    # ids are a function of the file: loading again gives the same records
    assert load_dataset(f"pathquestion:{pq_dir}", "test").questions == data.questions
    assert [q.id for q in load_dataset(f"pathquestion:{pq_dir}", "train").questions] == [
        "train-00001"]


def test_pathquestion_missing_pieces(pq_dir, tmp_path):
    with pytest.raises(DatasetError, match="split 'valid' unknown"):
        load_dataset(f"pathquestion:{pq_dir}", "valid")
    (pq_dir / "dev.txt").unlink()
    with pytest.raises(DatasetError, match="dev.txt: split file missing"):
        load_dataset(f"pathquestion:{pq_dir}", "dev")
    (pq_dir / "kb.txt").unlink()
    with pytest.raises(DatasetError, match="no kb.txt"):
        load_dataset(f"pathquestion:{pq_dir}")
    with pytest.raises(DatasetError, match="directory not found"):
        load_dataset(f"pathquestion:{tmp_path / 'nope'}")


@pytest.fixture()
def metaqa_dir(tmp_path):
    root = tmp_path / "metaqa"
    (root / "2-hop" / "vanilla").mkdir(parents=True)
    (root / "kb.txt").write_text(METAQA_KB)
    (root / "qa_test.txt").write_text(METAQA_TEST)
    (root / "2-hop" / "vanilla" / "qa_dev.txt").write_text(
        "which person directed the films acted by [Marlene Dietrich]\tWilliam Dieterle\n")
    return root


def test_metaqa_directory(metaqa_dir):
    data = load_dataset(f"metaqa:{metaqa_dir}")  # split defaults to test
    assert data.kind == "metaqa" and data.split == "test"
    assert data.kb == metaqa_dir / "kb.txt" and data.kb_format == "metaqa"
    assert data.train_file is None and data.dev_file is None  # nothing labelled to fit on
    first, second = data.questions
    assert [first.id, second.id] == ["test-00001", "test-00003"]
    assert first.question == "what movies are about Ginger Rogers"  # brackets dropped
    assert first.topic_entities == ("Ginger Rogers",)
    assert first.answers == ("Top Hat", "Kitty Foyle")  # de-duplicated, order kept
    assert first.path == () and second.answers == ("William Dieterle",)
    hop = load_dataset(f"metaqa:{metaqa_dir}", "2-hop/dev")
    assert hop.source == metaqa_dir / "2-hop" / "vanilla" / "qa_dev.txt"
    assert [(q.id, q.topic_entities) for q in hop.questions] == [
        ("2-hop-dev-00001", ("Marlene Dietrich",))]


#: Each kind's split file in its fixture directory.
SPLIT_FILES = {"pathquestion": ("pq_dir", "test.txt"), "metaqa": ("metaqa_dir", "qa_test.txt")}


@pytest.mark.parametrize("kind, line, message", [
    ("pathquestion", "only a question\n", r"test.txt:1: expected question, answer and path"),
    ("pathquestion", "q ?\tmale(male/)\tann#parents#<end>#ann\n", r"test.txt:1: path"),
    ("pathquestion", "q ?\t\tann#r#b#<end>#b\n", r"test.txt:1: empty question or answer"),
    ("metaqa", "who directed Kismet\tWilliam Dieterle\n", r"qa_test.txt:1: no \[topic entity\]"),
    ("metaqa", "who directed [Kismet]\n", r"qa_test.txt:1: expected the question and its answers"),
    ("metaqa", "who directed [Kismet]\t | \n", r"qa_test.txt:1: no answer"),
])
def test_bad_lines_name_file_and_line(request, kind, line, message):
    fixture, name = SPLIT_FILES[kind]
    root = request.getfixturevalue(fixture)
    (root / name).write_text(line)
    with pytest.raises(DatasetError, match=message):
        load_dataset(f"{kind}:{root}")


@pytest.mark.parametrize("split, message", [
    ("valid", "split 'valid' unknown for MetaQA"), ("two-hop/test", "unknown for MetaQA"),
    ("train", "qa_train.txt: split file missing"), ("3-hop/test", "qa_test.txt: split file"),
])
def test_metaqa_missing_splits(metaqa_dir, split, message):
    with pytest.raises(DatasetError, match=message):
        load_dataset(f"metaqa:{metaqa_dir}", split)


def test_synth_questions(tmp_path):
    generate(tmp_path / "kg", n_triples=2000, seed=3, n_questions=12)
    by_dir = load_dataset(f"synth:{tmp_path / 'kg'}")
    by_file = load_dataset(f"synth:{tmp_path / 'kg' / 'questions.jsonl'}")
    assert by_dir.questions == by_file.questions
    raw = [json.loads(line) for line in
           (tmp_path / "kg" / "questions.jsonl").read_text().splitlines()]
    assert len(by_dir.questions) == len(raw) > 0
    for q, r in zip(by_dir.questions, raw):
        assert q.id == r["id"] and q.question == r["question"]
        assert q.answers == tuple(r["answers"]) and q.topic_entities == tuple(r["topic_entities"])
        assert q.path == tuple(r["path"])
    assert by_dir.kb == tmp_path / "kg" and by_dir.kb_format == "synth"
    with pytest.raises(DatasetError, match="no 'split' field"):
        load_dataset(f"synth:{tmp_path / 'kg'}", "test")


def _write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                            for r in records))
    return path


def test_generic_jsonl(tmp_path):
    path = _write_jsonl(tmp_path / "q.jsonl", [
        {"question": "who wrote x ?", "answers": "Ann", "split": "test"},
        {"question": "where is y ?", "answers": ["P", "Q", "P"], "topic_entities": ["y"],
         "path": ["located_in"], "id": 7, "split": "dev"},
        {"question": "when ?", "answers": ["z"], "split": "test", "id": "q3"},
    ])
    everything = load_dataset(f"jsonl:{path}")
    assert [q.id for q in everything.questions] == ["line-1", "7", "q3"]
    assert everything.questions[0].answers == ("Ann",)
    assert everything.questions[1].answers == ("P", "Q")  # de-duplicated, order kept
    assert everything.questions[1].topic_entities == ("y",)
    assert everything.kb is None
    assert [q.id for q in load_dataset(f"jsonl:{path}", "test").questions] == ["line-1", "q3"]


@pytest.mark.parametrize("record, message", [
    ("{not json", r"q.jsonl:2: not JSON"),
    ({"answers": ["a"]}, r"q.jsonl:2: 'question' must be a non-empty string"),
    ({"question": "q", "answers": []}, r"q.jsonl:2: 'answers' is empty"),
    ({"question": "q", "answers": [1]}, r"q.jsonl:2: 'answers' must be a list of strings"),
    ({"question": "q", "answers": ["a"], "id": "a"}, r"q.jsonl:2: duplicate id 'a'"),
    ([1, 2], r"q.jsonl:2: expected a JSON object"),
])
def test_generic_jsonl_errors(tmp_path, record, message):
    path = _write_jsonl(tmp_path / "q.jsonl", [{"question": "q", "answers": ["a"], "id": "a"},
                                               record])
    with pytest.raises(DatasetError, match=message):
        load_dataset(f"jsonl:{path}")


@pytest.mark.parametrize("spec", ["nope", "csv:x", "jsonl:", "pathquestion"])
def test_bad_specs(spec):
    with pytest.raises(DatasetError, match="expected KIND:PATH"):
        load_dataset(spec)

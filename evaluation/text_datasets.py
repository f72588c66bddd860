"""Multi-hop reading sets: MuSiQue and HotpotQA questions with the corpus a
store is built from.

Why a module of its own: these questions carry no topic entity and no gold path — the runtime
links entities from the question text — and their gold is an answer plus aliases scored with
the SQuAD metrics (common.metrics), while the store comes from documents, not a KB dump.
Each file is read into the same :class:`~lokg.common.datasets.Question` every method takes
(``answers`` = the answer, then its aliases, de-duplicated) plus the **corpus**: the
documents those questions need, as :class:`Document` ``{id, title, text}`` — the ``docs``
ingest format (:func:`write_corpus` writes it as JSONL).

Shapes (a ``.jsonl`` file holds one record a line, any other file a JSON array of records):

* **MuSiQue** — ``id``, ``question``, ``answer``, ``answer_aliases`` (optional),
  ``paragraphs`` ``[{title, paragraph_text, is_supporting}]``. The corpus is the union of
  every question's paragraphs, de-duplicated by (title, text), in first-seen order.
* **HotpotQA** (distractor form) — ``_id``, ``question``, ``answer``, ``supporting_facts``,
  ``context`` ``[[title, [sentences]]]``. A document is a title with its sentences joined as
  written (HotpotQA sentences carry their own leading spaces), de-duplicated the same way.

A document's id is the store's own content hash of its title and text
(``text.chunking.content_id``): the same paragraph has the same id in every set, and it is
the ``doc_id`` a build from the corpus gives it. Bad input raises
:class:`~lokg.common.datasets.DatasetError` naming the file and the line (JSONL) or the record
(JSON array).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lokg.common.datasets import Dataset, DatasetError, Question
from lokg.runtime.contract import sha256_file
from lokg.text.chunking import content_id

SHAPES = ("musique", "hotpotqa")
#: The reading sets of ../shared/data by name: (shape, file relative to the data root).
READING_SETS = {
    "musique-openie": ("musique", "musique-openie/questions.json"),
    "hotpotqa-100": ("hotpotqa", "hotpotqa-100/questions.json"),
    "musique-200": ("musique", "multihop-dev/musique-200.jsonl"),
    "hotpotqa-200": ("hotpotqa", "multihop-dev/hotpotqa-200.jsonl"),
}


@dataclass(frozen=True)
class Document:
    """One corpus document, as the ``docs`` ingest format reads it."""

    id: str
    title: str
    text: str

    def to_dict(self) -> dict:
        return {"id": self.id, "title": self.title, "text": self.text}


@dataclass(frozen=True)
class ReadingSet:
    """A reading set's questions (``dataset``) and the corpus they are asked over."""

    dataset: Dataset
    documents: tuple[Document, ...]


def _records(source: Path) -> Iterator[tuple[str, object]]:
    """(where, record) of a JSONL file (``file:line``) or a JSON array (``file: record n``)."""
    if source.suffix == ".jsonl":
        with open(source, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        yield f"{source}:{lineno}", json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise DatasetError(f"{source}:{lineno}: not JSON ({exc.msg})") from None
        return
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{source}:{exc.lineno}: not JSON ({exc.msg})") from None
    if not isinstance(data, list):
        raise DatasetError(f"{source}: expected a JSON array of questions (or a .jsonl file)")
    for i, record in enumerate(data):
        yield f"{source}: record {i}", record


def _text(record: dict, key: str, where: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{where}: {key!r} must be a non-empty string; got {value!r}")
    return value.strip()


def _aliases(record: dict, where: str) -> tuple[str, ...]:
    value = record.get("answer_aliases") or []
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise DatasetError(f"{where}: 'answer_aliases' must be a list of strings; got {value!r}")
    return tuple(x.strip() for x in value if x.strip())


def _musique(record: dict, where: str) -> tuple[Question, list[tuple[str, str]]]:
    paragraphs = record.get("paragraphs")
    if not isinstance(paragraphs, list):
        raise DatasetError(f"{where}: 'paragraphs' must be a list")
    docs = []
    for i, p in enumerate(paragraphs):
        if not isinstance(p, dict) or not isinstance(p.get("title"), str):
            raise DatasetError(f"{where}: paragraph {i} needs a string 'title'")
        docs.append((p["title"].strip(), _text(p, "paragraph_text", f"{where}: paragraph {i}")))
    answers = (_text(record, "answer", where), *_aliases(record, where))
    return Question(_id(record, "id", where), _text(record, "question", where),
                    tuple(dict.fromkeys(answers))), docs


def _hotpotqa(record: dict, where: str) -> tuple[Question, list[tuple[str, str]]]:
    context = record.get("context")
    if not isinstance(context, list):
        raise DatasetError(f"{where}: 'context' must be a list of [title, [sentences]]")
    docs = []
    for i, entry in enumerate(context):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], list) and all(isinstance(s, str) for s in entry[1])):
            raise DatasetError(f"{where}: context entry {i} is not [title, [sentences]]")
        text = "".join(entry[1]).strip()
        if text:
            docs.append((entry[0].strip(), text))
    return Question(_id(record, "_id", where), _text(record, "question", where),
                    (_text(record, "answer", where),)), docs


def _id(record: dict, key: str, where: str) -> str:
    value = record.get(key)
    if not isinstance(value, (str, int)) or isinstance(value, bool) or str(value) == "":
        raise DatasetError(f"{where}: {key!r} must be a non-empty string or integer")
    return str(value)


PARSERS: dict[str, Callable[[dict, str], tuple[Question, list[tuple[str, str]]]]] = {
    "musique": _musique, "hotpotqa": _hotpotqa}


def load_reading_file(file: str | Path, shape: str) -> ReadingSet:
    """The questions and corpus of one MuSiQue- or HotpotQA-shaped file (module docstring)."""
    if shape not in PARSERS:
        raise DatasetError(f"reading-set shape {shape!r}: expected one of {', '.join(SHAPES)}")
    source = Path(file).resolve()
    if not source.is_file():
        raise DatasetError(f"{source}: questions file not found")
    questions, seen, corpus = [], set(), {}
    for where, record in _records(source):
        if not isinstance(record, dict):
            raise DatasetError(f"{where}: expected a JSON object")
        question, docs = PARSERS[shape](record, where)
        if question.id in seen:
            raise DatasetError(f"{where}: duplicate id {question.id!r}")
        seen.add(question.id)
        questions.append(question)
        for title, text in docs:
            corpus.setdefault((title, text), Document(content_id(title, text), title, text))
    dataset = Dataset(shape, source, None, tuple(questions), sha256_file(source), kb_format="docs")
    return ReadingSet(dataset, tuple(corpus.values()))


def load_reading_set(name: str, data_root: str | Path) -> ReadingSet:
    """A named set of :data:`READING_SETS` under ``data_root`` (../shared/data)."""
    if name not in READING_SETS:
        raise DatasetError(f"reading set {name!r} unknown; choose {', '.join(READING_SETS)}")
    shape, relative = READING_SETS[name]
    return load_reading_file(Path(data_root) / relative, shape)


def write_corpus(documents: tuple[Document, ...], path: str | Path) -> Path:
    """The corpus as ``docs`` JSONL (one ``{id, title, text}`` a line), written atomically so
    an interrupted write never leaves a truncated corpus for a build to read."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w", encoding="utf-8") as fh:
        for doc in documents:
            fh.write(json.dumps(doc.to_dict(), ensure_ascii=False) + "\n")
    partial.replace(path)
    return path

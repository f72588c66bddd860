"""Question sets for evaluation: PathQuestion and MetaQA directories, the synthetic
generator's questions, and generic JSONL — all read into one :class:`Question` record.

Why one record: every method and metric sees the same fields whatever the source, and the
``id`` is a pure function of the file (never of the run), so an interrupted run resumes by id.

Sources (``--dataset KIND:PATH``):

* ``pathquestion:DIR`` — any directory holding ``kb.txt`` and ``train.txt`` / ``dev.txt`` /
  ``test.txt`` (PathQuestion, Zhou et al. 2018). A line is ``question \\t answer \\t path``.
  ``answer`` is ``head(a1/a2/.../)``: the gold set is the parenthesised list plus the head
  (``male(male/)`` → {male}; ``england(united_kingdom/england/)`` → {united_kingdom,
  england}); a field without that shape is one answer. ``path`` is
  ``topic#r1#e1#r2#...#answer#<end>#answer``: the topic entity is its first element and the gold
  relation path its odd elements before ``<end>``. Id: ``<split>-<line number>`` (1-based).
  ``--build`` builds the store from ``DIR/kb.txt`` (format ``pathquestion``).
* ``metaqa:DIR`` — MetaQA (Zhang et al. 2018): ``DIR/kb.txt`` (``subject|relation|object``,
  format ``metaqa``) and ``DIR/qa_<split>.txt``, or with ``--split <n>-hop/<split>`` (e.g.
  ``2-hop/test``) the released layout ``DIR/<n>-hop/vanilla/qa_<split>.txt``. A line is
  ``question with the [topic entity] in brackets \\t answer1|answer2|...``: the bracketed
  names are the topic entity keys (the KB's names as written), the question is the text with
  the brackets dropped (so ``--entities link`` has to find the name), and there is no gold
  relation path (``Question.path`` is empty). Id: ``<split>-<line number>`` with ``/`` → ``-``.
  A build gets no labelled questions (no gold paths to fit relation knowledge on).
* ``synth:FILE`` — ``questions.jsonl`` of ``pipeline.synth`` (or the directory holding it):
  ``id``, ``question``, ``answers``, ``topic_entities`` (mids), ``path``. The KB is the
  directory's ``kg.nt(.gz)`` (format ``synth``). The file has no splits.
* ``jsonl:FILE`` — one object a line: ``question`` and ``answers`` (a list, or one string)
  required; ``topic_entities`` (entity keys), ``path`` (relation names), ``id`` and ``split``
  optional. Id: the ``id`` field, else ``line-<n>``.

For the JSONL kinds ``--split S`` keeps the records whose ``split`` field is ``S`` (a file
without that field refuses a split); without ``--split`` every record is used.
Bad input raises :class:`DatasetError` naming the file and line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from lokg.runtime.contract import sha256_file
from lokg.runtime.errors import LokgError

PATHQUESTION_SPLITS = ("train", "dev", "test")
METAQA_SPLITS = ("train", "dev", "test")  # qa_<split>.txt
KINDS = ("pathquestion", "metaqa", "synth", "jsonl")
END_MARK = "<end>"


class DatasetError(LokgError, ValueError):
    """A dataset spec, file or line is unusable; the message names it."""


@dataclass(frozen=True)
class Question:
    """One evaluation question. ``answers``: gold answer names as the dataset writes them;
    ``topic_entities``: entity keys (store ``entities.key``); ``path``: gold relation names."""

    id: str
    question: str
    answers: tuple[str, ...]
    topic_entities: tuple[str, ...] = ()
    path: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"id": self.id, "question": self.question, "answers": list(self.answers),
                "topic_entities": list(self.topic_entities), "path": list(self.path)}


@dataclass(frozen=True)
class Dataset:
    """A loaded question set and what a store for it is built from."""

    kind: str
    source: Path  # the questions file read
    split: str | None
    questions: tuple[Question, ...]
    sha256: str  # of ``source``: a resumed run refuses a changed file
    kb: Path | None = None  # the dump ``--build`` builds from
    kb_format: str | None = None  # its ingest.format
    train_file: Path | None = field(default=None)  # labelled training questions (never test)
    dev_file: Path | None = field(default=None)  # where a build picks its thresholds (never test)

    def describe(self) -> dict:
        return {"kind": self.kind, "source": str(self.source), "split": self.split,
                "questions": len(self.questions), "sha256": self.sha256,
                "kb": str(self.kb) if self.kb else None, "kb_format": self.kb_format}


def parse_pathquestion_answer(field_text: str) -> tuple[str, ...]:
    """The gold answers of a PathQuestion answer field, head first, de-duplicated.

    ``head(a/b/)`` → (head, a, b) minus repeats. The head may itself contain parentheses
    (``x_(band)(x_(band)/)``): the split point is the ``(`` after which the list names the
    head; failing that, the first ``(`` whose remainder is a ``/``-terminated list.
    """
    text = field_text.strip()
    if text.endswith("/)"):
        fallback = None
        for i, ch in enumerate(text):
            if ch != "(" or i == 0:
                continue
            items = [x for x in text[i + 1:-1].split("/") if x]
            if not items:
                continue
            head = text[:i]
            if head in items:
                return tuple(dict.fromkeys([head, *items]))
            if fallback is None:
                fallback = (head, items)
        if fallback is not None:
            return tuple(dict.fromkeys([fallback[0], *fallback[1]]))
    return (text,) if text else ()


def parse_pathquestion_path(path_text: str) -> tuple[str, tuple[str, ...]]:
    """(topic entity, relation names) of ``topic#r1#e1#...#answer#<end>#answer``."""
    tokens = path_text.strip().split("#")
    chain = tokens[:tokens.index(END_MARK)] if END_MARK in tokens else tokens
    if len(chain) < 3 or len(chain) % 2 == 0 or not all(chain):
        raise ValueError(f"path {path_text!r} is not topic#relation#entity#...#answer#<end>#...")
    return chain[0], tuple(chain[1::2])


def load_pathquestion(directory: str | Path, split: str = "test") -> Dataset:
    """The questions of ``DIR/<split>.txt`` (module docstring)."""
    root = Path(directory).resolve()
    if not root.is_dir():
        raise DatasetError(f"{root}: PathQuestion directory not found")
    if split not in PATHQUESTION_SPLITS:
        raise DatasetError(f"{root}: split {split!r} unknown for PathQuestion "
                           f"(choose {', '.join(PATHQUESTION_SPLITS)})")
    source = root / f"{split}.txt"
    if not source.is_file():
        raise DatasetError(f"{source}: split file missing")
    kb = root / "kb.txt"
    if not kb.is_file():
        raise DatasetError(f"{kb}: PathQuestion directory has no kb.txt")
    questions = []
    with open(source, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) != 3:
                raise DatasetError(f"{source}:{lineno}: expected question, answer and path "
                                   f"separated by tabs; got {len(parts)} field(s)")
            text, answer, path = parts
            answers = parse_pathquestion_answer(answer)
            if not text.strip() or not answers:
                raise DatasetError(f"{source}:{lineno}: empty question or answer")
            try:
                topic, relations = parse_pathquestion_path(path)
            except ValueError as exc:
                raise DatasetError(f"{source}:{lineno}: {exc}") from None
            questions.append(Question(f"{split}-{lineno:05d}", text.strip(), answers,
                                      (topic,), relations))
    train, dev = root / "train.txt", root / "dev.txt"
    return Dataset("pathquestion", source, split, tuple(questions), sha256_file(source), kb=kb,
                   kb_format="pathquestion", train_file=train if train.is_file() else None,
                   dev_file=dev if dev.is_file() else None)


_BRACKETED = re.compile(r"\[([^\[\]]+)\]")


def metaqa_file(root: Path, split: str) -> Path:
    """``DIR/qa_<split>.txt``, or ``DIR/<n>-hop/vanilla/qa_<split>.txt`` for ``<n>-hop/<split>``."""
    hop, _, name = split.rpartition("/")
    if name not in METAQA_SPLITS or (hop and not re.fullmatch(r"[1-9][0-9]*-hop", hop)):
        raise DatasetError(f"{root}: split {split!r} unknown for MetaQA (choose "
                           f"{', '.join(METAQA_SPLITS)}, or <n>-hop/<split> such as 2-hop/test)")
    return root / hop / "vanilla" / f"qa_{name}.txt" if hop else root / f"qa_{name}.txt"


def parse_metaqa_line(line: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(question without brackets, topic entities, answers) of ``question \\t a1|a2|...``."""
    parts = line.split("\t")
    if len(parts) != 2:
        raise ValueError(f"expected the question and its answers separated by a tab; got "
                         f"{len(parts)} field(s)")
    text, answer_field = parts
    topics = tuple(dict.fromkeys(m.strip() for m in _BRACKETED.findall(text)))
    if not topics or not all(topics):
        raise ValueError("no [topic entity] in brackets")
    answers = tuple(dict.fromkeys(a.strip() for a in answer_field.split("|") if a.strip()))
    if not answers:
        raise ValueError("no answer")
    question = " ".join(_BRACKETED.sub(lambda m: m.group(1).strip(), text).split())
    return question, topics, answers


def load_metaqa(directory: str | Path, split: str = "test") -> Dataset:
    """The questions of a MetaQA split file (module docstring)."""
    root = Path(directory).resolve()
    if not root.is_dir():
        raise DatasetError(f"{root}: MetaQA directory not found")
    source, kb = metaqa_file(root, split), root / "kb.txt"
    for path, what in ((source, "split file missing"), (kb, "MetaQA directory has no kb.txt")):
        if not path.is_file():
            raise DatasetError(f"{path}: {what}")
    questions, prefix = [], split.replace("/", "-")
    with open(source, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                text, topics, answers = parse_metaqa_line(line.rstrip("\r\n"))
            except ValueError as exc:
                raise DatasetError(f"{source}:{lineno}: {exc}") from None
            questions.append(Question(f"{prefix}-{lineno:05d}", text, answers, topics))
    return Dataset("metaqa", source, split, tuple(questions), sha256_file(source), kb=kb,
                   kb_format="metaqa")


def _strings(value, what: str, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise DatasetError(f"{where}: {what} must be a list of strings; got {value!r}")
    return tuple(x for x in value if x.strip())


def _json_object(line: str, where: str) -> dict:
    """One JSONL line's record, which must be a JSON object."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(record, dict):
        raise DatasetError(f"{where}: expected a JSON object")
    return record


def _question_and_answers(record: dict, where: str) -> tuple[str, tuple[str, ...]]:
    """A record's question text (non-empty) and answers (at least one)."""
    text = record.get("question")
    if not isinstance(text, str) or not text.strip():
        raise DatasetError(f"{where}: 'question' must be a non-empty string")
    answers = _strings(record.get("answers"), "'answers'", where)
    if not answers:
        raise DatasetError(f"{where}: 'answers' is empty")
    return text, answers


def _new_id(record: dict, default: str, seen: set[str], where: str) -> str:
    """A record's id (``default`` when it has none) as a string, added to ``seen``; an id
    seen before is refused."""
    qid = record.get("id", default)
    if not isinstance(qid, (str, int)) or isinstance(qid, bool):
        raise DatasetError(f"{where}: 'id' must be a string or an integer")
    qid = str(qid)
    if qid in seen:
        raise DatasetError(f"{where}: duplicate id {qid!r}")
    seen.add(qid)
    return qid


def load_jsonl(file: str | Path, split: str | None = None, *, kind: str = "jsonl") -> Dataset:
    """Questions from a JSONL file (module docstring); ``kind="synth"`` for pipeline.synth."""
    source = Path(file).resolve()
    if kind == "synth" and source.is_dir():
        source = source / "questions.jsonl"
    if not source.is_file():
        raise DatasetError(f"{source}: questions file not found")
    questions, seen = [], set()
    has_split = False
    with open(source, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{source}:{lineno}"
            record = _json_object(line, where)
            if "split" in record:
                has_split = True
                if split is not None and record["split"] != split:
                    continue
            text, answers = _question_and_answers(record, where)
            qid = _new_id(record, f"line-{lineno}", seen, where)
            questions.append(Question(
                qid, text.strip(), tuple(dict.fromkeys(answers)),
                _strings(record.get("topic_entities", []), "'topic_entities'", where),
                _strings(record.get("path", []), "'path'", where)))
    if split is not None and not has_split:
        raise DatasetError(f"{source}: --split {split} given but the records have no 'split' "
                           "field (omit --split to use every record)")
    kb = kb_format = None
    if kind == "synth":
        kb, kb_format = source.parent, "synth"
    return Dataset(kind, source, split, tuple(questions), sha256_file(source), kb=kb,
                   kb_format=kb_format)


def load_dataset(spec: str, split: str | None = None) -> Dataset:
    """``pathquestion:DIR`` / ``metaqa:DIR`` (split default ``test``), ``synth:FILE`` or
    ``jsonl:FILE``."""
    kind, sep, path = spec.partition(":")
    if not sep or kind not in KINDS or not path:
        raise DatasetError(f"dataset {spec!r}: expected KIND:PATH with KIND one of "
                           f"{', '.join(KINDS)}")
    if kind == "pathquestion":
        return load_pathquestion(path, split or "test")
    if kind == "metaqa":
        return load_metaqa(path, split or "test")
    return load_jsonl(path, split, kind=kind)

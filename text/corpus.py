"""Reading documents: the shapes a ``docs`` dump may take, each turned into ``Document`` records.

A dump is a file or a directory. In a directory, ``corpus.json`` / ``corpus.jsonl`` is the corpus
when present (benchmark folders keep questions and extractions beside it); otherwise every
``*.json``, ``*.jsonl``, ``*.txt`` and ``*.md`` file is read. Shapes:

* JSONL, one record a line: ``{id?, title, text}``; a question record with ``paragraphs``
  (``[{title, paragraph_text | text}]``, MuSiQue) or ``context`` (``[[title, [sentences]]]``,
  HotpotQA) gives one document per paragraph;
* JSON: a list of such records, ``{"docs": [...]}``, or ``{title: [sentences]}`` (HotpotQA's
  corpus);
* ``.txt`` / ``.md``: the whole file is one document titled by the file's stem.

Given sentences (HotpotQA) are kept as the document's sentence spans. A record that cannot be
read (not JSON, no text, invalid UTF-8, larger than the limit) becomes a :class:`Rejected` with
the file, the line or record number and the reason: the caller quarantines it and goes on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from lokg.common.dumps import CORPUS_FILES
from lokg.runtime.contract import TABLE_SCHEMAS, write_table

DOCUMENT_SUFFIXES = (".json", ".jsonl", ".txt", ".md")
SNIPPET = 200  # characters of a rejected record kept in the quarantine


@dataclass(frozen=True)
class Document:
    title: str
    text: str
    source: str  # file[:line or #record]
    spans: tuple[tuple[int, int], ...] = ()  # given sentence spans (character offsets)
    given_id: str | None = None


@dataclass(frozen=True)
class Rejected:
    file: str
    line: int  # 1-based line (JSONL) or record number (JSON); 0 for a whole file
    reason: str
    text: str = ""


@dataclass
class Reader:
    """Reads documents under a size limit, counting what it rejects."""

    max_chars: int
    rejected: list[Rejected] = field(default_factory=list)

    def files(self, dump: Path) -> list[Path]:
        if dump.is_file():
            return [dump]
        for name in CORPUS_FILES:
            if (dump / name).is_file():
                return [dump / name]
        return sorted(p for p in dump.rglob("*") if p.is_file() and p.suffix in DOCUMENT_SUFFIXES
                      and not any(part.startswith((".", "_")) for part in p.relative_to(dump).parts))

    def read(self, dump: Path) -> Iterator[Document]:
        for path in self.files(dump):
            yield from self._read_file(path)

    def _reject(self, path: Path, line: int, reason: str, text: str = "") -> None:
        self.rejected.append(Rejected(str(path), line, reason, text[:SNIPPET]))

    def _read_file(self, path: Path) -> Iterator[Document]:
        raw = path.read_bytes()
        if path.suffix in (".txt", ".md"):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return self._reject(path, 0, f"invalid UTF-8: at byte {exc.start}", _decoded(raw))
            yield from self._checked(path, 0, {"title": path.stem, "text": text}, str(path))
        elif path.suffix == ".jsonl":
            for number, line in enumerate(raw.split(b"\n"), 1):
                if line.strip():
                    yield from self._record_line(path, number, line)
        else:
            yield from self._json_file(path, raw)

    def _record_line(self, path: Path, number: int, line: bytes) -> Iterator[Document]:
        try:
            record = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            return self._reject(path, number, "invalid UTF-8", _decoded(line))
        except json.JSONDecodeError as exc:
            return self._reject(path, number, f"not JSON ({exc.msg})", _decoded(line))
        yield from self._record(path, number, record)

    def _json_file(self, path: Path, raw: bytes) -> Iterator[Document]:
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            return self._reject(path, 0, f"invalid UTF-8: at byte {exc.start}")
        except json.JSONDecodeError as exc:
            return self._reject(path, 0, f"not JSON ({exc.msg} at line {exc.lineno})")
        if isinstance(data, dict) and isinstance(data.get("docs"), list):
            data = data["docs"]
        if isinstance(data, dict):  # HotpotQA corpus: title -> sentences
            data = [{"title": t, "sentences": s} for t, s in data.items()]
        if not isinstance(data, list):
            return self._reject(path, 0, "JSON is neither a list of documents nor title -> text")
        for number, record in enumerate(data, 1):
            yield from self._record(path, number, record)

    def _record(self, path: Path, number: int, record) -> Iterator[Document]:
        where = f"{path}:{number}"
        if not isinstance(record, dict):
            return self._reject(path, number, "record is not a JSON object", str(record))
        if isinstance(record.get("paragraphs"), list):
            for k, par in enumerate(record["paragraphs"]):
                yield from self._record(path, number, {**par, "_where": f"{where}#{k}"})
        elif isinstance(record.get("context"), list):
            for k, item in enumerate(record["context"]):
                ok = isinstance(item, list) and len(item) == 2
                yield from self._record(path, number, {"title": item[0], "sentences": item[1],
                                                       "_where": f"{where}#{k}"} if ok else item)
        else:
            yield from self._checked(path, number, record, record.get("_where", where))

    def _checked(self, path: Path, number: int, record: dict, where: str) -> Iterator[Document]:
        text, spans = _text_of(record)
        title = record.get("title")
        if not isinstance(text, str) or not text.strip():
            return self._reject(path, number, "document has no text", json.dumps(record)[:SNIPPET])
        if len(text) > self.max_chars:
            return self._reject(path, number, f"document too large: {len(text):,} characters, "
                                f"above documents.max_document_mb ({self.max_chars:,})",
                                text[:SNIPPET])
        given = record.get("id", record.get("idx"))
        yield Document(str(title).strip() if title is not None else "", text, where, spans,
                       None if given is None else str(given))


def write_quarantine(rejected: Iterable[Rejected], path: Path) -> None:
    """What a text stage could not use, as a contract ``quarantine`` table (file, line,
    reason, text)."""
    rows = list(rejected)
    columns = {name: [getattr(r, name) for r in rows]
               for name in ("file", "line", "reason", "text")}
    write_table("quarantine", pa.table(columns, schema=TABLE_SCHEMAS["quarantine"]), path)


def _decoded(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _text_of(record: dict) -> tuple[str | None, tuple[tuple[int, int], ...]]:
    """The text of a record and its given sentence spans (HotpotQA sentences, joined as given)."""
    sentences = record.get("sentences")
    if isinstance(sentences, list) and all(isinstance(s, str) for s in sentences):
        spans, at = [], 0
        for sentence in sentences:
            spans.append((at, at + len(sentence)))
            at += len(sentence)
        return "".join(sentences), tuple(spans)
    return record.get("text", record.get("paragraph_text")), ()

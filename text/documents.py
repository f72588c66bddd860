"""Stage ``documents``: a ``docs`` dump read into the ``documents``, ``chunks`` and
``sentences`` tables, with a quarantine of the records it could not read.

Documents with the same title and text are one document (ids are content hashes, so a refresh
recognises what it has seen). For a dump of triples (any other format) the stage writes the
same tables empty — the later stages then have no documents to draw on — unless
``documents.corpus`` names documents linked to its entities (the sentences that state what
the dump lacks: query-driven feedback retrieves from their chunks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pyarrow as pa

from lokg.common.dumps import build_format
from lokg.common.stage import Laps, StageError, stage_input
from lokg.runtime.contract import TABLE_SCHEMAS, write_table
from lokg.runtime.tokens import count_tokens
from lokg.common.dumps import IngestSettings
from lokg.text.chunking import chunk_document, content_id
from lokg.text.corpus import Document, Reader, write_quarantine
from lokg.text.settings import DocumentsSettings

STAGE = "documents"
TABLES = ("documents", "chunks", "sentences")


def _rows(documents: Iterable[Document], max_tokens: int, overlap: int) -> tuple[dict, int]:
    """Column lists of the three tables, and how many duplicate documents were dropped."""
    rows = {name: {c: [] for c in TABLE_SCHEMAS[name].names} for name in TABLES}
    seen: set[str] = set()
    duplicates = 0
    for doc in documents:
        doc_id = content_id(doc.title, doc.text)
        if doc_id in seen:
            duplicates += 1
            continue
        seen.add(doc_id)
        _append(rows["documents"], doc_id=doc_id, title=doc.title, source=doc.source,
                chars=len(doc.text))
        _add_chunks(rows, doc_id, doc, max_tokens, overlap)
    return rows, duplicates


def _add_chunks(rows: dict, doc_id: str, doc: Document, max_tokens: int, overlap: int) -> None:
    sentences, chunks = chunk_document(doc.text, doc.spans, max_tokens, overlap)
    first_chunk: dict[int, str] = {}
    for ordinal, (first, stop) in enumerate(chunks):
        start, end = sentences[first][0], sentences[stop - 1][1]
        text = doc.text[start:end]
        chunk_id = content_id(doc_id, start, text)
        _append(rows["chunks"], chunk_id=chunk_id, doc_id=doc_id, ordinal=ordinal, start=start,
                end=end, tokens=count_tokens(text), text=text)
        for i in range(first, stop):
            first_chunk.setdefault(i, chunk_id)
    for i, (start, end) in enumerate(sentences):
        _append(rows["sentences"], sentence_id=content_id(doc_id, start, end), doc_id=doc_id,
                chunk_id=first_chunk[i], ordinal=i, start=start, end=end,
                text=doc.text[start:end])


def _append(columns: dict, **values) -> None:
    for key, value in values.items():
        columns[key].append(value)


def linked_corpus(cfg: DocumentsSettings, dump: Path) -> Path | None:
    """``documents.corpus``: documents linked to a triple dump's entities (a relative path is
    inside the dump's directory), read like a docs dump so their chunks can be retrieved."""
    if not cfg.corpus:
        return None
    path = Path(cfg.corpus)
    path = path if path.is_absolute() else (dump if dump.is_dir() else dump.parent) / path
    if not path.exists():
        raise StageError(f"documents.corpus={cfg.corpus}: {path} does not exist")
    return path


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    cfg = DocumentsSettings.of(config, StageError)
    dump = stage_input(inputs, STAGE, "dump")
    fmt = build_format(IngestSettings.of(config, StageError).format, dump)
    out, lap = Path(out_dir), Laps()
    reader = Reader(max_chars=cfg.max_document_mb * 1_000_000)
    source = dump if fmt == "docs" else linked_corpus(cfg, dump)
    documents = reader.read(source) if source is not None else ()
    rows, duplicates = _rows(documents, cfg.max_tokens, cfg.overlap)
    n_docs = len(rows["documents"]["doc_id"])
    lap("read_and_chunk")
    if source is not None and n_docs == 0:
        write_quarantine(reader.rejected, out / "document_quarantine.parquet")
        raise StageError(f"documents: no readable document in {dump} ({len(reader.rejected)} "
                         f"rejected; see {out / 'document_quarantine.parquet'})",
                         kept=[out / "document_quarantine.parquet"])
    paths = {name: out / f"{name}.parquet" for name in TABLES}
    for name in TABLES:
        write_table(name, pa.table(rows[name], schema=TABLE_SCHEMAS[name]), paths[name])
    paths["document_quarantine"] = out / "document_quarantine.parquet"
    write_quarantine(reader.rejected, paths["document_quarantine"])
    lap("write")
    reasons: dict[str, int] = {}
    for r in reader.rejected:
        kind = r.reason.split(":")[0].split(" (")[0]
        reasons[kind] = reasons.get(kind, 0) + 1
    report = {"format": fmt, "documents": n_docs, "duplicate_documents": duplicates,
              "chunks": len(rows["chunks"]["chunk_id"]),
              "sentences": len(rows["sentences"]["sentence_id"]),
              "rejected": len(reader.rejected), "rejected_by_reason": reasons,
              "max_tokens": cfg.max_tokens, "overlap": cfg.overlap,
              "step_seconds": lap.seconds}
    return {"outputs": {k: str(p) for k, p in paths.items()}, "report": report}

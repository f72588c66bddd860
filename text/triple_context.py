"""Stage ``triple_context``: provenance onto the canonical triples, and each triple's
source sentence restored.

1. ``triple_sources``: the key-level provenance of ``triple_extract`` mapped onto the canonical
   triples (entity keys → ids, relation phrases → their SCOS canonical relation), de-duplicated.
2. ``triple_context``: for a triple (h, r, t) the candidate sentences are those of Sources(h) ∪
   Sources(t) — the chunks h or t was extracted from (its own source sentences first), the
   chunks of the documents titled with h's or t's name or an alias (the articles *about* them:
   a KB dump's linked text, ``documents.corpus``) and the sentences of h's and t's descriptions
   (the sources of a KB dump); the template "h r t" and
   the candidates are embedded with the store's encoder, and the most similar sentence is kept
   with its cosine when that reaches ``triple_context.floor``.
3. ``chunk_vectors``: every chunk embedded once (rows in ``chunks`` order, unit norm) for dense
   passage retrieval (the chunk-RAG baseline, query-driven feedback); ``sentence_vectors``:
   every sentence of ``sentences`` embedded the same way (rows in its order), which ITTC's
   passage items match against the question to choose a passage's best sentences.

``enabled: auto`` restores context for builds from documents only (encoding every triple of a
large KB dump is the price of ``on``); ``off`` writes the provenance alone.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa

from lokg.common.stage import (Laps, StageError, stage_batch_encoder, stage_input,
                            torch_threads)
from lokg.runtime.contract import TABLE_SCHEMAS, read_table, write_table
from lokg.runtime.encoder import PrefixedEncoder, encode_by_length
from lokg.runtime.linker import folded
from lokg.text.chunking import content_id, split_sentences
from lokg.text.settings import TripleContextSettings
from lokg.text.triple_extract import SOURCE_COLUMNS

STAGE = "triple_context"


def canonical_sources(inputs: Mapping[str, str], triples: np.ndarray) -> tuple[pa.Table, pa.Table]:
    """(``triple_sources``, ``feedback_lineage``): the key-level provenance of
    ``triple_extract`` and of the feedback deltas (``feedback_delta``, with the feedback ids
    each triple answers) as rows of the canonical ``triples``' ids."""
    raw = _read(inputs, "extraction_sources")
    delta = _delta_sources(inputs)
    empty = (TABLE_SCHEMAS["triple_sources"].empty_table(),
             TABLE_SCHEMAS["feedback_lineage"].empty_table())
    if raw.num_rows == 0 and delta.num_rows == 0:
        return empty
    canonical = _Canonical(inputs, triples)
    if delta.num_rows == 0:
        return canonical.rows(raw, "triple_sources"), empty[1]
    columns = list(SOURCE_COLUMNS)
    sources = canonical.rows(pa.concat_tables([raw.select(columns).cast(delta.select(
        columns).schema), delta.select(columns)]), "triple_sources")
    lineage = canonical.rows(delta.select(["s_key", "relation", "o_key", "delta_id",
                                           "feedback_id", "chunk_id", "sentence_id"]),
                             "feedback_lineage")
    return sources, lineage


def _delta_sources(inputs: Mapping[str, str]) -> pa.Table:
    """The feedback deltas' provenance, when ``feedback_enrich`` ran (empty otherwise)."""
    if "feedback_delta" not in inputs:
        return pa.table({})
    return read_table(stage_input(inputs, STAGE, "feedback_delta") / "sources.parquet")


class _Canonical:
    """Entity keys -> ids and relation names -> canonical ids, for the triples kept."""

    def __init__(self, inputs: Mapping[str, str], triples: np.ndarray):
        entities = read_table(stage_input(inputs, STAGE, "entities"), columns=["id", "key"])
        rmap = read_table(stage_input(inputs, STAGE, "relation_map"),
                          columns=["name", "canonical_id"])
        self.ids = dict(zip(entities["key"].to_pylist(), entities["id"].to_pylist()))
        self.canon = dict(zip(rmap["name"].to_pylist(), rmap["canonical_id"].to_pylist()))
        self.kept = set(map(tuple, triples.tolist()))

    def rows(self, raw: pa.Table, table: str) -> pa.Table:
        """``raw`` (s_key, relation, o_key, then the table's other columns) with ids, rows of
        triples the graph does not hold dropped, de-duplicated."""
        schema = TABLE_SCHEMAS[table]
        rows, seen = {c: [] for c in schema.names}, set()
        for s_key, rel, o_key, *rest in zip(*(raw[c].to_pylist() for c in raw.column_names)):
            key = (self.ids.get(s_key), self.canon.get(rel), self.ids.get(o_key), *rest)
            if key in seen or key[:3] not in self.kept:
                continue
            seen.add(key)
            for column, value in zip(rows, key):
                rows[column].append(value)
        return pa.table(rows, schema=schema)


def _read(inputs: Mapping[str, str], name: str) -> pa.Table:
    path = stage_input(inputs, STAGE, name)
    return read_table(path, name if name in TABLE_SCHEMAS else None)


def _triples(inputs: Mapping[str, str]) -> np.ndarray:
    t = read_table(stage_input(inputs, STAGE, "triples"), "triples")
    return np.stack([t[c].to_numpy() for c in ("s", "r", "o")], axis=1).astype(np.int64)


class Candidates:
    """Candidate sentences (id, text) per triple: its own sources, then its entities' chunks,
    then the chunks of the documents about its entities, then its entities' description
    sentences."""

    def __init__(self, inputs: Mapping[str, str], chunks: pa.Table, sources: pa.Table,
                 descriptions: bool):
        sentences = _read(inputs, "sentences")
        self.text = dict(zip(sentences["sentence_id"].to_pylist(), sentences["text"].to_pylist()))
        self.in_chunk = _sentences_by_chunk(chunks, sentences)
        self.own: dict[tuple, list] = defaultdict(list)
        self.chunks_of: dict[int, set] = defaultdict(set)
        for s, r, o, chunk, sentence in zip(*(sources[c].to_pylist() for c in sources.column_names)):
            if sentence:
                self.own[(s, r, o)].append(sentence)
            self.chunks_of[s].add(chunk)
            self.chunks_of[o].add(chunk)
        self.about = _chunks_about(inputs, chunks)
        self.described = self._descriptions(inputs) if descriptions else {}

    def _descriptions(self, inputs: Mapping[str, str]) -> dict[int, list]:
        """Sentences of every entity description (the documents of a KB dump's entities)."""
        entities = read_table(stage_input(inputs, STAGE, "entities"),
                              columns=["id", "key", "description"])
        out: dict[int, list] = {}
        for eid, key, text in zip(*(entities[c].to_pylist() for c in entities.column_names)):
            if text:
                ids = []
                for start, end in split_sentences(text):
                    sid = content_id("description", key, start, end)
                    self.text[sid] = text[start:end]
                    ids.append(sid)
                out[eid] = ids
        return out

    def of(self, s: int, r: int, o: int, limit: int) -> list[str]:
        found = dict.fromkeys(self.own.get((s, r, o), ()))
        for entity in (s, o):
            extracted = sorted(self.chunks_of.get(entity, ()))
            for chunk in (*extracted, *self.about.get(entity, ())):
                found.update(dict.fromkeys(self.in_chunk.get(chunk, ())))
            found.update(dict.fromkeys(self.described.get(entity, ())))
        return list(found)[:limit]


def _chunks_about(inputs: Mapping[str, str], chunks: pa.Table) -> dict[int, list]:
    """Entity id -> the chunks of the documents titled with its name or an alias (case and
    spacing folded): an article about the entity is one of its sources whether or not anything
    was extracted from it. A title naming several entities is about each of them."""
    if chunks.num_rows == 0:
        return {}
    documents = _read(inputs, "documents")
    by_title: dict[str, list] = defaultdict(list)
    for doc, title in zip(documents["doc_id"].to_pylist(), documents["title"].to_pylist()):
        if folded(title):
            by_title[folded(title)].append(doc)
    chunks_of_doc: dict[str, list] = defaultdict(list)
    for chunk, doc in zip(chunks["chunk_id"].to_pylist(), chunks["doc_id"].to_pylist()):
        chunks_of_doc[doc].append(chunk)
    entities = read_table(stage_input(inputs, STAGE, "entities"), columns=["id", "name", "aliases"])
    about: dict[int, list] = {}
    for eid, name, aliases in zip(*(entities[c].to_pylist() for c in entities.column_names)):
        docs = dict.fromkeys(d for form in (name, *(aliases or ())) for d in by_title.get(
            folded(form), ()))
        if docs:
            about[eid] = [c for d in docs for c in chunks_of_doc[d]]
    return about



def _sentences_by_chunk(chunks: pa.Table, sentences: pa.Table) -> dict[str, list]:
    by_doc: dict[str, list] = defaultdict(list)
    for sid, doc, start, end in zip(*(sentences[c].to_pylist()
                                      for c in ("sentence_id", "doc_id", "start", "end"))):
        by_doc[doc].append((start, end, sid))
    return {cid: [sid for a, b, sid in by_doc[doc] if start <= a and b <= end]
            for cid, doc, start, end in zip(*(chunks[c].to_pylist()
                                             for c in ("chunk_id", "doc_id", "start", "end")))}


def head_check(sources: pa.Table, chunks: pa.Table, documents: pa.Table, entities: pa.Table,
               shown: int = 20) -> dict:
    """How many triples have a source passage (its document's title and the chunk's text)
    holding their head's name or an alias, case-insensitive, and the first exceptions."""
    titles = dict(zip(documents["doc_id"].to_pylist(), documents["title"].to_pylist()))
    text = {c: f"{titles.get(d, '')}\n{t}".lower() for c, d, t in
            zip(*(chunks[k].to_pylist() for k in ("chunk_id", "doc_id", "text")))}
    forms = [[f.lower() for f in (name, *(aliases or ()))] for name, aliases in
             zip(entities["name"].to_pylist(), entities["aliases"].to_pylist())]
    held: dict[tuple, bool] = {}
    for s, r, o, chunk in zip(*(sources[c].to_pylist() for c in ("s", "r", "o", "chunk_id"))):
        found = any(f in text.get(chunk, "") for f in forms[s])
        held[(s, r, o)] = held.get((s, r, o), False) or found
    missing = [t for t, ok in held.items() if not ok]
    return {"triples_with_sources": len(held), "head_in_a_source": len(held) - len(missing),
            "head_exceptions": [list(t) for t in missing[:shown]]}


def readable_relation(name: str) -> str:
    """``people.person.place_of_birth`` / ``/film/film/genre`` → ``place of birth`` / ``genre``."""
    return name.strip("/").replace("/", ".").split(".")[-1].replace("_", " ")


def templates(inputs: Mapping[str, str], triples: np.ndarray) -> list[str]:
    entities = read_table(stage_input(inputs, STAGE, "entities"), columns=["id", "name"])
    relations = read_table(stage_input(inputs, STAGE, "relations"), columns=["id", "name"])
    names = dict(zip(entities["id"].to_pylist(), entities["name"].to_pylist()))
    rels = {i: readable_relation(n) for i, n in zip(relations["id"].to_pylist(),
                                                    relations["name"].to_pylist())}
    return [f"{names.get(s, '')} {rels.get(r, '')} {names.get(o, '')}" for s, r, o in triples.tolist()]


def restore(triples: np.ndarray, lines: list[str], candidates: Candidates,
            encoder: PrefixedEncoder, cfg: Mapping) -> tuple[pa.Table, dict]:
    """The best candidate sentence of every triple (``lines``: its "h r t" templates) at or
    above the floor, and counts for the report."""
    limit, batch, floor = int(cfg["max_candidates"]), int(cfg["batch_size"]), float(cfg["floor"])
    per_triple = [candidates.of(s, r, o, limit) for s, r, o in triples.tolist()]
    # by length: an encoder batch pads to its longest text, so similar lengths waste less
    sentence_ids = sorted({sid for ids in per_triple for sid in ids},
                          key=lambda sid: (len(candidates.text[sid]), sid))
    row = {sid: i for i, sid in enumerate(sentence_ids)}
    sentences = encoder.encode_passages([candidates.text[s] for s in sentence_ids],
                                        batch_size=batch, progress=True)
    wanted = [i for i, ids in enumerate(per_triple) if ids]
    lines_vectors = encoder.encode_passages([lines[i] for i in wanted], batch_size=batch,
                                            progress=True)
    out = {c: [] for c in TABLE_SCHEMAS["triple_context"].names}
    for vector, i in zip(lines_vectors, wanted):
        rows = np.fromiter((row[sid] for sid in per_triple[i]), np.int64)
        scores = sentences[rows] @ vector
        best = int(np.argmax(scores))
        if scores[best] >= floor:
            sid = per_triple[i][best]
            for column, value in zip(out, (*triples[i].tolist(), sid, float(scores[best]),
                                           candidates.text[sid])):
                out[column].append(value)
    counts = {"triples": len(triples), "with_candidates": len(wanted),
              "restored": len(out["s"]), "candidate_sentences": len(sentence_ids)}
    return pa.table(out, schema=TABLE_SCHEMAS["triple_context"]), counts


def _enabled(mode: str, has_documents: bool) -> bool:
    return mode == "on" or (mode == "auto" and has_documents)


def stage_encoder(inputs: Mapping[str, str], cfg: Mapping) -> PrefixedEncoder:
    """The store's encoder for the batch (``encoder`` auto: on a CPU its int8 ONNX export, the
    model the query service embeds questions with, 1.6-2.7x the float32 torch forward here at
    cosine >= 0.98, docs/BENCHMARKS.md; else sentence-transformers, CUDA when present)."""
    spec = json.loads(stage_input(inputs, STAGE, "encoder").read_text(encoding="utf-8"))
    exported = Path(inputs["query_encoder"]) if "query_encoder" in inputs else None
    return stage_batch_encoder(STAGE, spec, cfg, exported)


def _restore_and_encode(inputs: Mapping[str, str], cfg, triples, sources, chunks,
                        restoring: bool, report: dict, lap: Laps) -> tuple:
    """(the restored triple contexts, the chunks' vectors, the sentences' vectors), each empty
    when not made; the encoder is loaded only when one of them is wanted (its backend and the
    counts go into ``report``)."""
    context = TABLE_SCHEMAS["triple_context"].empty_table()
    vectors = sentence_vectors = np.zeros((0, 0), np.float32)
    if restoring or chunks.num_rows:
        with torch_threads(cfg.threads):
            encoder = stage_encoder(inputs, cfg)
            report["encoder"] = encoder.backend
            lap("load_model")
            if restoring:  # entity descriptions as sources only when asked for (mode on)
                candidates = Candidates(inputs, chunks, sources,
                                        descriptions=cfg.enabled == "on")
                context, counts = restore(triples, templates(inputs, triples), candidates,
                                          encoder, cfg)
                report.update(counts)
                lap("restore")
            if chunks.num_rows:
                vectors = encode_by_length(encoder, chunks["text"].to_pylist(),
                                           cfg.batch_size)
                lap("chunk_vectors")
                sentence_vectors = encode_by_length(
                    encoder, _read(inputs, "sentences")["text"].to_pylist(), cfg.batch_size)
                lap("sentence_vectors")
    return context, vectors, sentence_vectors


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    cfg = TripleContextSettings.of(config, StageError)
    out, lap = Path(out_dir), Laps()
    paths = {"triple_sources": out / "triple_sources.parquet",
             "triple_context": out / "triple_context.parquet",
             "chunk_vectors": out / "chunk_vectors.npy",
             "sentence_vectors": out / "sentence_vectors.npy",
             "feedback_lineage": out / "feedback_lineage.parquet"}
    triples = _triples(inputs)
    sources, lineage = canonical_sources(inputs, triples)
    write_table("triple_sources", sources, paths["triple_sources"])
    write_table("feedback_lineage", lineage, paths["feedback_lineage"])
    chunks = _read(inputs, "chunks")
    restoring = _enabled(cfg.enabled, chunks.num_rows > 0)
    lap("sources")
    entities = read_table(stage_input(inputs, STAGE, "entities"), columns=["name", "aliases"])
    report: dict = {"enabled": restoring, "triple_sources": sources.num_rows,
                    "feedback_lineage": lineage.num_rows,
                    "chunks": chunks.num_rows,
                    **head_check(sources, chunks, _read(inputs, "documents"), entities)}
    context, vectors, sentence_vectors = _restore_and_encode(inputs, cfg, triples, sources,
                                                             chunks, restoring, report, lap)
    write_table("triple_context", context, paths["triple_context"])
    np.save(paths["chunk_vectors"], np.asarray(vectors, np.float32))
    np.save(paths["sentence_vectors"], np.asarray(sentence_vectors, np.float32))
    report.update({"floor": cfg.floor, "step_seconds": lap.seconds})
    return {"outputs": {k: str(p) for k, p in paths.items()}, "report": report}

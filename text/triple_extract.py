"""Stage ``triple_extract``: the chunks of a ``docs`` build turned into entities and
triples, every triple with the chunk and sentence it came from.

Backends by name (``triple_extract.backend``): ``offline`` and ``openai`` extract chunk by chunk
(text/extractors.py), with results cached per (backend fingerprint, chunk text hash) under
``cache_dir`` so a rerun or a refresh pays only for new chunks, ``concurrency`` chunks in flight,
and a chunk that fails quarantined with its reason; ``precomputed`` reads an OpenIE file of
HippoRAG's shape (``{"docs": [{title, text, extracted_entities, extracted_triples}]}``) whose
passages are the dump's documents.

The output is a dump ingest reads like any other (``extracted/``: ``triples.tsv`` of normalised
entity keys and relation phrases, plus each entity's most frequent extracted type as a
``type.object.type`` line, ``entities.jsonl`` with the most frequent surface form as the
name, the others as aliases, and the first description) plus ``extraction_sources`` (key-level
provenance; ``triple_context`` maps it onto the canonical triples). A triple's sentence is the
one of its chunk (or, precomputed, of its document) that best contains its head and tail.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lokg.common.dumps import build_format
from lokg.common.stage import Laps, StageError, stage_input
from lokg.runtime.contract import read_table
from lokg.common.dumps import IngestSettings
from lokg.text.chunking import content_id
from lokg.text.corpus import SNIPPET, Rejected, write_quarantine
from lokg.text.extractors import ChunkExtractionError, make_extractor
from lokg.text.settings import TripleExtractSettings

STAGE = "triple_extract"
SOURCE_COLUMNS = ("s_key", "relation", "o_key", "chunk_id", "sentence_id")
#: The relation of a type assertion line in the extracted TSV (spark_jobs.formats.TYPE_PREDICATES).
TYPE_PREDICATE = "type.object.type"
_WORD = re.compile(r"\w+")
_EDGE_PUNCTUATION = "\"'`“”‘’.,;:()[]{} "


def entity_key(name: str) -> str:
    """The key an extracted name gets: case-folded, single-spaced, without edge punctuation."""
    return " ".join(name.casefold().split()).strip(_EDGE_PUNCTUATION)


def relation_key(phrase: str) -> str:
    return " ".join(phrase.lower().split()).strip(_EDGE_PUNCTUATION)


def surface(name: str) -> str:
    return " ".join(name.split()).strip(_EDGE_PUNCTUATION)


@dataclass
class Collected:
    """Everything extracted so far, by key: the parts of the extracted dump."""

    forms: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    descriptions: dict[str, str] = field(default_factory=dict)
    types: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    sources: dict[str, list] = field(default_factory=lambda: {c: [] for c in SOURCE_COLUMNS})
    triples: set[tuple[str, str, str]] = field(default_factory=set)
    malformed_triples: int = 0

    def entity(self, name: str, description: str = "", kind: str = "") -> str | None:
        key = entity_key(name) if isinstance(name, str) else ""
        if not key:
            return None
        self.forms[key][surface(name)] += 1
        if isinstance(kind, str) and kind.strip():
            self.types[key][" ".join(kind.lower().split())] += 1
        if description and key not in self.descriptions:
            self.descriptions[key] = " ".join(str(description).split())
        return key

    def add(self, result: Mapping, chunk_id: str, sentences: list[tuple[str, str]]) -> None:
        """One chunk's (or document's) result; ``sentences``: (sentence_id, text) candidates."""
        for item in result.get("entities") or ():
            if isinstance(item, Mapping):
                self.entity(item.get("name"), item.get("description") or "",
                            item.get("type") or "")
        for triple in result.get("triples") or ():
            parts = as_triple(triple)
            keys = parts and (self.entity(parts[0]), relation_key(parts[1]), self.entity(parts[2]))
            if not keys or not all(keys) or keys[0] == keys[2]:
                self.malformed_triples += 1
                continue
            self.triples.add(keys)
            sentence_id = best_sentence(parts[0], parts[2], sentences)
            for column, value in zip(SOURCE_COLUMNS, (*keys, chunk_id, sentence_id)):
                self.sources[column].append(value)


def as_triple(triple) -> tuple[str, str, str] | None:
    """An extracted triple as three non-blank strings, or None when it is not one."""
    if (isinstance(triple, (list, tuple)) and len(triple) == 3
            and all(isinstance(x, str) and x.strip() for x in triple)):
        return triple[0], triple[1], triple[2]
    return None


def best_sentence(head: str, tail: str, sentences: list[tuple[str, str]]) -> str | None:
    """The id of the sentence that contains the head and the tail (then: the most of their
    words); the first on ties; None without candidates."""
    head_l, tail_l = head.lower(), tail.lower()
    words = set(_WORD.findall(f"{head_l} {tail_l}"))
    best, best_score = None, -1.0
    for sentence_id, text in sentences:
        lower = text.lower()
        overlap = len(words & set(_WORD.findall(lower))) / len(words) if words else 0.0
        score = 2.0 * (head_l in lower) + 2.0 * (tail_l in lower) + overlap
        if score > best_score:
            best, best_score = sentence_id, score
    return best


def write_dump(collected: Collected, out: Path) -> None:
    """``triples.tsv`` and ``entities.jsonl``: the dump ingest reads (keys sorted: deterministic)."""
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"{s}\t{r}\t{o}\n" for s, r, o in sorted(collected.triples)]
    linked = {k for s, _, o in collected.triples for k in (s, o)}
    lines += [f"{key}\t{TYPE_PREDICATE}\t{_most_frequent(collected.types[key])}\n"
              for key in sorted(linked & set(collected.types))]
    (out / "triples.tsv").write_text("".join(lines), encoding="utf-8")
    with open(out / "entities.jsonl", "w", encoding="utf-8") as f:
        for key in sorted(collected.forms):
            ranked = _by_frequency(collected.forms[key])
            record = {"key": key, "name": ranked[0], "aliases": ranked[1:],
                      "description": collected.descriptions.get(key)}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


def _by_frequency(counts: Counter) -> list[str]:
    return [item for item, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def _most_frequent(counts: Counter) -> str:
    return _by_frequency(counts)[0]


# ---- chunk-by-chunk backends, cached ---------------------------------------------------------
class ChunkCache:
    """Results per chunk text hash under one directory per backend fingerprint."""

    def __init__(self, root: Path, fingerprint: str):
        self.dir = root / content_id(fingerprint)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "fingerprint.txt").write_text(fingerprint + "\n", encoding="utf-8")

    def _path(self, text: str) -> Path:
        return self.dir / f"{content_id(text)}.json"

    def get(self, text: str) -> dict | None:
        try:
            return json.loads(self._path(text).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def put(self, text: str, result: dict) -> None:
        path = self._path(text)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(result, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)


def cache_root(cfg: Mapping, out_dir: Path) -> Path:
    """``triple_extract.cache_dir``, else ``<store>/cache/triple_extract`` (a stage works in
    ``<store>/staging/<build_id>/.<stage>.tmp-…``), shared by every build of the store."""
    if cfg.get("cache_dir"):
        return Path(cfg["cache_dir"])
    return out_dir.resolve().parents[2] / "cache" / STAGE


@dataclass
class Usage:
    cached: int = 0
    extracted: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failed: list[tuple[dict, str]] = field(default_factory=list)


def extract_one(extractor, cache: ChunkCache, chunk: dict) -> tuple[dict, bool, str]:
    """(result, from the cache, failure reason or ""); a failure's result holds its usage."""
    hit = cache.get(chunk["text"])
    if hit is not None:
        return hit, True, ""
    try:
        result = extractor.extract(chunk["text"])
    except ChunkExtractionError as exc:
        return {"usage": exc.usage}, False, str(exc)
    cache.put(chunk["text"], result)
    return result, False, ""


def extract_chunks(extractor, cache: ChunkCache, chunks: list[dict],
                   sentences: Mapping[str, list], collected: Collected) -> Usage:
    """Every chunk through the backend (cache first), ``concurrency`` at a time, in order."""
    from tqdm import tqdm

    usage = Usage()
    with ThreadPoolExecutor(max_workers=max(1, int(extractor.concurrency))) as pool, \
            tqdm(total=len(chunks), desc=STAGE, unit="chunk", disable=None) as bar:
        jobs = [pool.submit(extract_one, extractor, cache, c) for c in chunks]
        for chunk, job in zip(chunks, jobs):
            result, cached, reason = job.result()
            bar.update()
            if not cached:  # tokens are spent by failed attempts too
                spent = result.get("usage") or {}
                usage.prompt_tokens += int(spent.get("prompt_tokens", 0))
                usage.completion_tokens += int(spent.get("completion_tokens", 0))
            if reason:
                usage.failed.append((chunk, reason))
                continue
            usage.cached += cached
            usage.extracted += not cached
            collected.add(result, chunk["chunk_id"], sentences.get(chunk["chunk_id"], []))
    return usage


# ---- precomputed -----------------------------------------------------------------------------
def precomputed_file(cfg: Mapping, dump: Path) -> Path:
    if cfg.get("precomputed_file"):
        path = Path(cfg["precomputed_file"])
    else:
        found = sorted(dump.glob("openie*.json")) if dump.is_dir() else []
        if not found:
            raise StageError(f"triple_extract.backend=precomputed: no openie*.json in {dump}; "
                             "set triple_extract.precomputed_file")
        path = found[0]
    if not path.is_file():
        raise StageError(f"triple_extract.precomputed_file={path}: file not found")
    return path


def read_precomputed(path: Path, documents: Mapping[str, str], sentences_by_doc: Mapping,
                     collected: Collected) -> dict:
    """Add the triples of an OpenIE file; its passages are matched to documents by content."""
    passages = openie_passages(path, "triple_extract")
    unmatched = 0
    for doc_id, doc in passages:
        if doc_id not in documents:
            unmatched += 1
            continue
        candidates = sentences_by_doc.get(doc_id, [])
        result = {"entities": [{"name": n} for n in doc.get("extracted_entities") or ()
                               if isinstance(n, str)],
                  "triples": doc.get("extracted_triples") or ()}
        by_sentence = {sid: chunk for sid, _, chunk in candidates}
        before = len(collected.sources["sentence_id"])
        collected.add(result, "", [(sid, text) for sid, text, _ in candidates])
        _fill_chunks(collected, before, by_sentence)
    return {"file": str(path), "passages": len(passages), "unmatched_passages": unmatched}


def openie_passages(path: Path, stage: str) -> list[tuple[str | None, dict]]:
    """(document id, passage) of every passage of a HippoRAG-style OpenIE file, the id by
    content as the documents stage makes it (None for a passage that is no JSON object)."""
    try:
        docs = json.loads(path.read_text(encoding="utf-8"))["docs"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StageError(f"{stage}: cannot read the OpenIE file {path} ({exc})") from None
    return [(content_id(d.get("title", ""), d.get("text", "")), d) if isinstance(d, dict)
            else (None, {}) for d in docs]


def _fill_chunks(collected: Collected, since: int, chunk_of: Mapping[str, str]) -> None:
    """A precomputed triple's chunk is the one its chosen sentence lies in."""
    ids, chunks = collected.sources["sentence_id"], collected.sources["chunk_id"]
    for i in range(since, len(ids)):
        chunks[i] = chunk_of.get(ids[i], "")


# ---- the stage -------------------------------------------------------------------------------
def _chunk_rows(inputs: Mapping[str, str]) -> tuple[list[dict], dict, dict, dict]:
    """Chunks, the (sentence_id, text) inside each chunk, the (sentence_id, text, chunk_id) of
    each document, and the document titles."""
    chunks = read_table(stage_input(inputs, STAGE, "chunks"), "chunks").to_pylist()
    sentences = read_table(stage_input(inputs, STAGE, "sentences"), "sentences").to_pylist()
    documents = read_table(stage_input(inputs, STAGE, "documents"), "documents").to_pylist()
    by_doc: dict[str, list] = defaultdict(list)
    for row in sentences:
        by_doc[row["doc_id"]].append(row)
    by_chunk = {c["chunk_id"]: [(r["sentence_id"], r["text"]) for r in by_doc[c["doc_id"]]
                                if c["start"] <= r["start"] and r["end"] <= c["end"]]
                for c in chunks}
    doc_sentences = {d: [(r["sentence_id"], r["text"], r["chunk_id"]) for r in rows]
                     for d, rows in by_doc.items()}
    return chunks, by_chunk, doc_sentences, {d["doc_id"]: d["title"] for d in documents}


def _rejected(failed: list[tuple[dict, str]], titles: Mapping[str, str]) -> list[Rejected]:
    """Failed chunks as quarantine records: file = the chunk and its document, line = its
    ordinal + 1."""
    return [Rejected(f"chunk {c['chunk_id']} of '{titles.get(c['doc_id'], '')}'",
                     int(c["ordinal"]) + 1, reason, c["text"][:SNIPPET]) for c, reason in failed]


def _extract(cfg: Mapping, dump: Path, out: Path, inputs: Mapping,
             collected: Collected) -> tuple[dict, Usage, dict]:
    """Run the configured backend over the build's chunks; (report, usage, titles)."""
    chunks, by_chunk, by_doc, titles = _chunk_rows(inputs)
    if cfg["backend"] == "precomputed":
        report = read_precomputed(precomputed_file(cfg, dump), titles, by_doc, collected)
        return report, Usage(), titles
    extractor = make_extractor(cfg)
    cache = ChunkCache(cache_root(cfg, out), extractor.fingerprint)
    usage = extract_chunks(extractor, cache, chunks, by_chunk, collected)
    price = (usage.prompt_tokens * cfg["prompt_price"]
             + usage.completion_tokens * cfg["completion_price"]) / 1e6  # prices per 1M tokens
    report = {"fingerprint": extractor.fingerprint, "cache": str(cache.dir),
              "chunks": len(chunks), "cached_chunks": usage.cached,
              "extracted_chunks": usage.extracted, "failed_chunks": len(usage.failed),
              "prompt_tokens": usage.prompt_tokens,
              "completion_tokens": usage.completion_tokens, "cost": round(price, 6)}
    return report, usage, titles


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    cfg = TripleExtractSettings.of(config, StageError)
    dump = stage_input(inputs, STAGE, "dump")
    out, lap = Path(out_dir), Laps()
    paths = {"extracted": out / "extracted",
             "extraction_sources": out / "extraction_sources.parquet",
             "extraction_quarantine": out / "extraction_quarantine.parquet"}
    collected = Collected()
    docs = build_format(IngestSettings.of(config, StageError).format, dump) == "docs"
    report, usage, titles = (_extract(cfg, dump, out, inputs, collected) if docs
                             else ({"skipped": "the dump holds triples, not documents"},
                                   Usage(), {}))
    lap("extract")
    write_quarantine(_rejected(usage.failed, titles), paths["extraction_quarantine"])
    n_chunks = report.get("chunks", 0)
    if docs and n_chunks and len(usage.failed) > float(cfg["max_failed_share"]) * n_chunks:
        first = usage.failed[0][1]
        raise StageError(f"{STAGE}: {len(usage.failed)} of {n_chunks} chunks failed, above "
                         f"triple_extract.max_failed_share={cfg['max_failed_share']} (first: "
                         f"{first}); see {paths['extraction_quarantine']}",
                         kept=[paths["extraction_quarantine"]])
    if docs and not collected.triples:
        raise StageError(f"{STAGE}: backend {cfg['backend']} found no triple in {dump}")
    write_dump(collected, paths["extracted"])
    pa_sources = pa.table({c: pa.array(v, pa.string()) for c, v in collected.sources.items()})
    pq.write_table(pa_sources, paths["extraction_sources"])
    lap("write")
    report.update({"backend": cfg["backend"], "triples": len(collected.triples),
                   "entities": len(collected.forms), "sources": pa_sources.num_rows,
                   "malformed_triples": collected.malformed_triples,
                   "step_seconds": lap.seconds})
    return {"outputs": {k: str(p) for k, p in paths.items()}, "report": report}

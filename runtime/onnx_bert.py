"""The query encoder a store exported at build time, run by onnxruntime (no torch).

Why: embedding the question is most of a query's time. ``entity_encode`` writes the store's
BERT model as ``models/query_encoder.onnx`` (``training/onnx_export.py``; int8 weights by
default), and this encoder runs it with one intra-op thread and no spinning: about half the
float32 forward's time on these cores, vectors at cosine ≥ 0.99 of the float32 ones
(docs/BENCHMARKS.md "Question encoder: int8 ONNX"). Tokenizing, prefixes, truncation and the
``SentenceEncoder`` interface are ``NumpyBertEncoder``'s; only the forward differs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from runtime.numpy_bert import NumpyBertEncoder, NumpyEncoderError

#: The exported model beside encoder.json in a build's ``models/``.
QUERY_MODEL = "query_encoder.onnx"


def exported_model(spec: Mapping, models_dir: Path) -> Path | None:
    """The store's exported question model when encoder.json records one and it is there."""
    onnx = spec.get("onnx") or {}
    path = models_dir / str(onnx.get("file") or QUERY_MODEL)
    return path if onnx and path.is_file() else None


def available() -> bool:
    """Whether onnxruntime can be imported (the ``query-encoder`` extra)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


class OnnxBertEncoder(NumpyBertEncoder):
    """``NumpyBertEncoder`` whose forward is the exported ONNX model."""

    backend = "onnx"

    def __init__(self, model_dir: Path, spec: Mapping, model_path: Path, threads: int = 1):
        self._model_path = Path(model_path)
        self._threads = int(threads)
        super().__init__(model_dir, spec)
        self.spec["onnx"] = dict(spec.get("onnx") or {})

    def _load_model(self, found: Mapping) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        # a question is ~20 GEMM rows, too small to share: 1 thread for the query service; a
        # build stage's batches may use more (0: onnxruntime's default, every core)
        options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3  # errors only: shape-merge notices are not for users
        try:
            self._session = ort.InferenceSession(str(self._model_path), options,
                                                 providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own Exception types
            raise NumpyEncoderError(f"{self._model_path}: cannot load the exported question "
                                    f"encoder ({exc})") from None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 [n, dim], unit norm: each text its own forward. The int8 model quantizes
        activations with one scale per call, so in a batch a text's vector would depend on its
        neighbours (span cosines down to 0.976, enough to flip a near-tie between relations and
        make a query's answer depend on the questions before it); alone costs about what a
        batch does on these cores (docs/BENCHMARKS.md "int8 vectors independent of the batch")."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for row, encoding in enumerate(self._tokenizer.encode_batch(list(texts))):
            ids = np.asarray([encoding.ids], dtype=np.int64)
            (vector,) = self._session.run(None, {"input_ids": ids,
                                                 "attention_mask": np.ones_like(ids)})
            out[row] = vector[0]
        return out

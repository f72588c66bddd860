"""The query encoder a store exported at build time, run by onnxruntime (no torch).

Why: embedding the question is most of a query's time. ``entity_encode`` writes the store's
BERT model as ``models/query_encoder.onnx`` (``training/onnx_export.py``; int8 weights by
default), and this encoder runs it with one intra-op thread and no spinning: about half the
float32 forward's time on these cores, vectors at cosine ≥ 0.99 of the float32 ones
(docs/BENCHMARKS.md "Question encoder: int8 ONNX"). Tokenizing, prefixes, truncation and the
``SentenceEncoder`` interface are ``NumpyBertEncoder``'s; only the forward differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from lokg.runtime.numpy_bert import NumpyBertEncoder, NumpyEncoderError

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

    def __init__(self, model_dir: Path, spec: Mapping, model_path: Path, threads: int = 1,
                 per_text: bool = False):
        self._model_path = Path(model_path)
        self.threads = int(threads)
        self.per_text = bool(per_text)
        super().__init__(model_dir, spec)
        self.spec["onnx"] = dict(spec.get("onnx") or {})

    def _load_model(self, found: Mapping) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        # a question is ~20 GEMM rows, too small to share: 1 thread for the query service; a
        # build stage's batches may use more (0: onnxruntime's default, every core)
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3  # errors only: shape-merge notices are not for users
        try:
            self._session = ort.InferenceSession(str(self._model_path), options,
                                                 providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own Exception types
            raise NumpyEncoderError(f"{self._model_path}: cannot load the exported question "
                                    f"encoder ({exc})") from None

    @property
    def model_path(self) -> Path:
        """The exported model this encoder runs (a worker process loads its own session)."""
        return self._model_path

    def _embed_encodings(self, encodings: list) -> np.ndarray:
        """float32 [n, dim], unit norm: one padded forward of the texts, or with ``per_text``
        one forward each. The int8 model quantizes a call's activations with one scale, so in
        a batch a text's vector depends on its neighbours (enough to flip a near-tie between
        relations, so an answer hung on the questions before it); the query service embeds each
        text alone (docs/BENCHMARKS.md "int8 vectors independent of the batch"), a build's
        batches keep theirs."""
        groups = [[e] for e in encodings] if self.per_text else [list(encodings)]
        out = [self._forward(group) for group in groups if group]
        return np.concatenate(out) if out else np.empty((0, self.dim), dtype=np.float32)

    def _forward(self, encodings: list) -> np.ndarray:
        ids = np.zeros((len(encodings), max(len(e.ids) for e in encodings)), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, e in enumerate(encodings):
            ids[row, :len(e.ids)] = e.ids
            mask[row, :len(e.ids)] = 1
        (vectors,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask})
        return np.asarray(vectors, dtype=np.float32)

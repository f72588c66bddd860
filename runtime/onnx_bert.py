"""The query encoder a store exported at build time, run by onnxruntime (no torch).

Why: embedding the question is most of a query's time, and the query service should not need
torch for it. ``entity_encode`` writes the store's BERT model as ``models/query_encoder.onnx``
(``training/onnx_export.py``; int8 weights by default), and this encoder runs it with one
intra-op thread and no spinning, its vectors within the cosine of the float32 ones that
docs/BENCHMARKS.md states. Tokenizing, prefixes and truncation
are sentence-transformers' (runtime/bert_checkpoint.py reads them from the model directory);
the ``SentenceEncoder`` interface is ``PrefixedEncoder``'s.

onnxruntime and tokenizers are the ``query-encoder`` extra (``pip install 'lokg[query-encoder]'``);
they are imported only when an encoder is made.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from lokg.runtime.bert_checkpoint import CheckpointError, layout
from lokg.runtime.encoder import PrefixedEncoder

#: The exported model beside encoder.json in a build's ``models/``.
QUERY_MODEL = "query_encoder.onnx"
#: The float32 export question spans are embedded with, beside an int8 ``QUERY_MODEL``.
SPANS_MODEL = "span_encoder.onnx"
#: What to install for it.
EXTRA = "lokg[query-encoder]"


def exported_model(spec: Mapping, models_dir: Path) -> Path | None:
    """The store's exported question model when encoder.json records one and it is there."""
    onnx = spec.get("onnx") or {}
    path = models_dir / str(onnx.get("file") or QUERY_MODEL)
    return path if onnx and path.is_file() else None


def spans_model(spec: Mapping, models_dir: Path) -> Path | None:
    """The store's float32 export for question spans (encoder.json's ``onnx.spans_file``: its
    own file beside an int8 question encoder, the question encoder itself when that is fp32)
    when it is recorded and there; None on builds made before it was exported."""
    name = (spec.get("onnx") or {}).get("spans_file")
    path = models_dir / str(name) if name else None
    return path if path is not None and path.is_file() else None


def available() -> bool:
    """Whether onnxruntime can be imported (the ``query-encoder`` extra)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


class OnnxBertEncoder(PrefixedEncoder):
    """A BERT sentence-transformers model whose forward is the build's exported ONNX model: the
    ``SentenceEncoder`` interface (``spec``, ``dim``, ``encode_queries``, ``encode_passages``)
    without torch."""

    backend = "onnx"

    def __init__(self, model_dir: Path, spec: Mapping, model_path: Path, threads: int = 1,
                 per_text: bool = False, pad_step: int = 0):
        self._model_path = Path(model_path)
        self.threads = int(threads)
        self.per_text, self.pad_step = bool(per_text), int(pad_step)
        spec = dict(spec or {})
        found = layout(model_dir)
        self._load_session()
        self._lower = found["do_lower_case"]
        self._tokenizer = _tokenizer(found["transformer"] / "tokenizer.json",
                                     found["max_seq_length"])
        dim = int(found["config"]["hidden_size"])
        if spec.get("dim") is not None and int(spec["dim"]) != dim:
            raise CheckpointError(f"{model_dir}: model gives {dim}-d vectors but the encoder "
                                  f"spec records dim={spec['dim']} (a different model?)")
        self.spec = {"model": str(spec.get("model") or model_dir), "path": str(model_dir),
                     "dim": dim, "query_prefix": str(spec.get("query_prefix") or ""),
                     "passage_prefix": str(spec.get("passage_prefix") or ""),
                     "normalize": True, "max_seq_length": found["max_seq_length"],
                     "device": "cpu", "onnx": dict(spec.get("onnx") or {})}

    def _load_session(self) -> None:
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
            raise CheckpointError(f"{self._model_path}: cannot load the exported question "
                                  f"encoder ({exc})") from None

    @property
    def model_path(self) -> Path:
        """The exported model this encoder runs (a worker process loads its own session)."""
        return self._model_path

    def _encode(self, texts: Sequence[str], prefix: str, batch_size: int,
                progress: bool = False) -> np.ndarray:
        """Batches of texts with the same or close token counts (tokenized once, shortest
        first, stable), so a padded forward spends little on padding; each batch is one
        forward. ``progress``: a bar on stderr (batch encodings at build time; tqdm is
        imported only then)."""
        if isinstance(texts, str):
            raise CheckpointError("encode_* takes a list of texts, got a single string")
        encodings = self._tokenize([prefix + str(t) for t in texts])
        out = np.empty((len(encodings), self.dim), dtype=np.float32)
        order = np.argsort([len(e.ids) for e in encodings], kind="stable")
        step = max(1, int(batch_size))
        starts = range(0, len(encodings), step)
        if progress:
            from tqdm import tqdm

            starts = tqdm(starts, file=sys.stderr, unit="batch", desc="encode")
        for start in starts:
            rows = order[start:start + step]
            out[rows] = self._embed_encodings([encodings[i] for i in rows])
        return out

    def passage_lengths(self, texts: Sequence[str]) -> np.ndarray:
        """Each passage's token count (prefix included, truncated as encoded): what a padded
        batch costs, where characters mislead (a 15-character name is 3 to 9 word pieces)."""
        encodings = self._tokenize([self.spec["passage_prefix"] + str(t) for t in texts])
        return np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))

    def _tokenize(self, texts: list[str]) -> list:
        return self._tokenizer.encode_batch([t.lower() for t in texts] if self._lower else texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One forward of a batch of texts as given (no prefix): float32 [n, dim], unit norm."""
        return self._embed_encodings(self._tokenizer.encode_batch(list(texts)))

    def _embed_encodings(self, encodings: list) -> np.ndarray:
        """float32 [n, dim], unit norm: one forward of the texts padded to the longest, with
        ``per_text`` one forward each, with ``pad_step`` one forward per padded length, each
        text padded to the next multiple of ``pad_step`` tokens. The int8 model quantizes a
        call's activations with one scale, so in a batch a text's vector depends on its
        neighbours (enough to flip a near-tie between relations, so an answer hung on the
        questions before it); the query service embeds each text alone, a build's batches keep
        theirs. The float32 model has no such scale: padded to a length its own token count
        gives, a text's vector is the same in any order and, whatever texts share its forward,
        within float noise of it alone (a forward of more rows rounds its sums otherwise: up to
        3e-8 here, as unpadded forwards of 6 tokens and more did); the question spans take a
        forward or two a question instead of one a token count, each reading every weight."""
        rows: dict[int, list[int]] = {}
        for i, e in enumerate(encodings):
            group = i if self.per_text else self._padded_length(len(e.ids)) if self.pad_step \
                else 0
            rows.setdefault(group, []).append(i)
        out = np.empty((len(encodings), self.dim), dtype=np.float32)
        for group, index in rows.items():
            out[index] = self._forward([encodings[i] for i in index],
                                       group if self.pad_step and not self.per_text else 0)
        return out

    def _padded_length(self, tokens: int) -> int:
        """The next multiple of ``pad_step`` (at most the model's longest input)."""
        return min(-(-tokens // self.pad_step) * self.pad_step,
                   max(int(self.spec["max_seq_length"]), tokens))

    def _forward(self, encodings: list, length: int = 0) -> np.ndarray:
        """One forward of the encodings padded to ``length`` tokens, or to the longest."""
        ids = np.zeros((len(encodings), max(length, *(len(e.ids) for e in encodings))),
                       dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, e in enumerate(encodings):
            ids[row, :len(e.ids)] = e.ids
            mask[row, :len(e.ids)] = 1
        (vectors,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask})
        return np.asarray(vectors, dtype=np.float32)


def _tokenizer(path: Path, max_length: int):
    """The model's tokenizer, truncating at ``max_length`` and never padding (a batch is padded
    by :meth:`OnnxBertEncoder._forward`)."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises its own Exception types
        raise CheckpointError(f"{path}: cannot load the tokenizer ({exc})") from None
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.no_padding()  # tokenizer.json may pad to a fixed length
    return tokenizer

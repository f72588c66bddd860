"""The query encoder without torch: a BERT sentence-transformers model run in numpy.

Why: the query service embeds one or two short questions per request. Through
sentence-transformers that needs torch: a process of ~560 MiB that takes 8 s to load and 27 ms
(p50) a question on the busy 2-core host. The same forward in numpy (+ the ``tokenizers``
package) runs in ~130 MiB, loads in 0.2 s and takes 15 ms (docs/BENCHMARKS.md, "Query encoder
without torch"; the rest is float32 GEMM work, ~0.4 GFLOP for a 20-token question). The vectors
are the sentence-transformers vectors up to float noise (max |diff| ~1e-7,
tests/test_query_encoder.py), so a store built with torch (``training/encode.py``) is queried
without it.

What is supported — ``unsupported_reason`` says what is not, and ``runtime.question_encoder.query_encoder``
then falls back to sentence-transformers:

* modules.json: Transformer → Pooling (mean or CLS) → optional Normalize (vectors are always
  L2-normalised, as ``SentenceEncoder`` asks sentence-transformers to);
* config.json: ``model_type`` ``bert``, absolute position embeddings, ``hidden_act`` ``gelu``
  (BERT's exact erf form; numpy has no erf, so ``gelu`` uses Abramowitz & Stegun 7.1.26:
  max |GELU error| 4.6e-7 on [-12, 12], float noise for float32 activations);
* weights in ``model.safetensors`` (F32, F16 or BF16), read by ``read_safetensors`` with
  ``np.memmap``: no safetensors/torch dependency. ``pytorch_model.bin`` only: torch is needed;
* tokenizer.json read by ``tokenizers`` (HuggingFace's Rust tokenizer), truncated at
  sentence_bert_config.json's ``max_seq_length`` as sentence-transformers does. A batch is not
  padded: its tokens are packed end to end (``Packed``), so the masked and the plain form of a
  question cost their own lengths; attention masks per text, and the vectors are those of a
  padded batch up to float noise.

Threads: importing this module changes nothing. A question is a GEMM of ~20 rows, too small to
share out: with OpenBLAS's default (a thread per core) a question on the busy 2-core host took
131 ms p50 / 1.1 s p99 instead of 15 / 31 ms with one thread (docs/BENCHMARKS.md). ``runtime.question_encoder.query_encoder(threads=…)``
therefore sets numpy's BLAS threads for the process (``runtime.environment.limit_blas_threads``,
which ``Runtime.open`` applies with ``query.threads`` whatever the encoder), as it sets torch's
for the torch encoder; without threadpoolctl, start the service with ``OPENBLAS_NUM_THREADS=1``.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from lokg.runtime.encoder import EncoderError, PrefixedEncoder, spec_model_dir

WEIGHTS = "model.safetensors"
TORCH_WEIGHTS = "pytorch_model.bin"
_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
           "F64": np.dtype("<f8"), "I64": np.dtype("<i8"), "I32": np.dtype("<i4")}
_MAX_HEADER = 100 * 2**20  # the format's own limit on the JSON header


class NumpyEncoderError(EncoderError):
    """A model directory the numpy encoder cannot load; the message names the file."""


# ---------------------------------------------------------------- safetensors


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Tensors of a ``.safetensors`` file as read-only memory-mapped arrays (BF16: as uint16).

    Format: an 8-byte little-endian header length N, N bytes of JSON (name → dtype, shape,
    data_offsets relative to the end of the header), then the raw little-endian buffers."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            prefix = fh.read(8)
            n = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
            if n < 2 or n > min(_MAX_HEADER, size - 8):
                raise NumpyEncoderError(f"{path}: not a safetensors file (header length "
                                        f"{n} in a {size}-byte file)")
            header = json.loads(fh.read(n).decode("utf-8"))
    except OSError as exc:
        raise NumpyEncoderError(f"{path}: cannot read the model weights ({exc.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NumpyEncoderError(f"{path}: not a safetensors file (bad JSON header: "
                                f"{exc})") from None
    if not isinstance(header, dict):
        raise NumpyEncoderError(f"{path}: not a safetensors file (header is not a JSON object)")
    header.pop("__metadata__", None)
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n) if size > 8 + n else None
    return {name: _tensor(path, name, info, data) for name, info in header.items()}


def _tensor(path: Path, name: str, info, data: np.ndarray | None) -> np.ndarray:
    """One header entry checked against the buffer and viewed as an array (no copy)."""
    try:
        dtype = _DTYPES[info["dtype"]]
        shape = [int(s) for s in info["shape"]]
        start, end = (int(o) for o in info["data_offsets"])
    except (KeyError, TypeError, ValueError):
        kind = info.get("dtype") if isinstance(info, dict) else info
        raise NumpyEncoderError(f"{path}: tensor {name!r} has an unsupported or malformed "
                                f"header entry (dtype {kind!r}; supported: "
                                f"{', '.join(_DTYPES)})") from None
    length = 0 if data is None else len(data)
    if not 0 <= start <= end <= length or end - start != math.prod(shape) * dtype.itemsize:
        raise NumpyEncoderError(f"{path}: tensor {name!r} {info['dtype']}{shape} does not fit "
                                f"its data offsets [{start}, {end}) of a {length}-byte buffer "
                                f"(truncated or corrupt file?)")
    if data is None or end == start:
        return np.zeros(shape, dtype=dtype)
    return data[start:end].view(dtype).reshape(shape)


def to_float32(array: np.ndarray) -> np.ndarray:
    """A weight as float32: F32 stays memory-mapped, BF16 (read as uint16: its bits are the top
    half of a float32) is widened, other types are cast."""
    if array.dtype == np.uint16:
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array if array.dtype == np.float32 else array.astype(np.float32)


def _matrix(weight: np.ndarray) -> np.ndarray:
    """A torch Linear weight [out, in] as a C-contiguous [in, out] copy: ``x @ w`` on it is
    ~15 % faster than on the transposed memory-mapped view (OpenBLAS, 12-24 tokens)."""
    return np.ascontiguousarray(weight.T)


# ---------------------------------------------------------------- what the model directory says


class UnsupportedModelError(NumpyEncoderError):
    """The model is not one the numpy encoder runs (the torch path can): not a file error."""


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise NumpyEncoderError(f"{path}: cannot read ({exc.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NumpyEncoderError(f"{path}: invalid JSON ({exc})") from None


def _pooling(pool_dir: Path) -> str:
    """``mean`` or ``cls`` from a Pooling module's config.json; anything else is unsupported."""
    cfg = _read_json(pool_dir / "config.json")
    modes = ([cfg["pooling_mode"]] if isinstance(cfg.get("pooling_mode"), str) else
             [k[len("pooling_mode_"):] for k, v in cfg.items()
              if k.startswith("pooling_mode_") and v is True])
    modes = ["mean" if m == "mean_tokens" else "cls" if m == "cls_token" else m for m in modes]
    if modes not in (["mean"], ["cls"]):
        raise UnsupportedModelError(f"{pool_dir / 'config.json'}: pooling {modes or 'none'} "
                                    f"(the numpy encoder does mean or cls pooling)")
    return modes[0]


def layout(model_dir: Path) -> dict:
    """The sentence-transformers pipeline of a model directory, checked against what the numpy
    encoder runs: {transformer dir, pooling, max_seq_length, do_lower_case, config}.

    Raises UnsupportedModelError (the torch path may still load it) or NumpyEncoderError."""
    model_dir = Path(model_dir)
    if not (model_dir / "modules.json").is_file():
        raise UnsupportedModelError(f"{model_dir}: no modules.json (a plain transformers "
                                    f"directory; the numpy encoder needs a sentence-transformers "
                                    f"one)")
    modules = _read_json(model_dir / "modules.json")
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise NumpyEncoderError(f"{model_dir / 'modules.json'}: not a list of modules")
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise UnsupportedModelError(f"{model_dir / 'modules.json'}: modules {kinds} (the numpy "
                                    f"encoder runs Transformer, Pooling[, Normalize])")
    tdir = model_dir / modules[0].get("path", "")
    config = _read_json(tdir / "config.json")
    _check_config(tdir / "config.json", config)
    st_path = tdir / "sentence_bert_config.json"
    st_cfg = _read_json(st_path) if st_path.is_file() else {}
    limit = int(config.get("max_position_embeddings") or 512)
    return {"transformer": tdir, "pooling": _pooling(model_dir / modules[1].get("path", "")),
            "max_seq_length": min(int(st_cfg.get("max_seq_length") or limit), limit),
            "do_lower_case": bool(st_cfg.get("do_lower_case")), "config": config}


def _check_config(path: Path, config: Mapping) -> None:
    """A BERT config.json the numpy forward reproduces, else UnsupportedModelError saying what."""
    problems = []
    if config.get("model_type") != "bert":
        problems.append(f"model_type {config.get('model_type')!r} (not 'bert')")
    archs = set(config.get("architectures") or ["BertModel"])
    if not archs <= {"BertModel", "BertForMaskedLM", "BertForPreTraining"}:
        problems.append(f"architectures {sorted(archs)}")
    if config.get("hidden_act", "gelu") != "gelu":
        problems.append(f"hidden_act {config.get('hidden_act')!r} (only BERT's exact 'gelu')")
    if config.get("position_embedding_type", "absolute") != "absolute":
        problems.append(f"position_embedding_type {config.get('position_embedding_type')!r}")
    if problems:
        raise UnsupportedModelError(f"{path}: {'; '.join(problems)} — the numpy encoder runs "
                                    f"BERT models only (use the torch encoder)")


def unsupported_reason(model_dir: Path) -> str | None:
    """Why the numpy encoder cannot run a model directory (None: it can). File errors raise."""
    try:
        found = layout(model_dir)
    except UnsupportedModelError as exc:
        return str(exc)
    return _torch_weights_only(found["transformer"])


def _torch_weights_only(tdir: Path) -> str | None:
    if not (tdir / WEIGHTS).is_file() and (tdir / TORCH_WEIGHTS).is_file():
        return (f"{tdir}: weights only as {TORCH_WEIGHTS}, which needs torch to read "
                f"(convert them to {WEIGHTS} or use the torch encoder)")
    return None


# ---------------------------------------------------------------- weights


def load_weights(tdir: Path, config: Mapping) -> tuple[dict, list[dict]]:
    """(embedding weights, one dict per layer) from ``tdir/model.safetensors``, float32, shapes
    checked against config.json. Layer matrices are copied as [in, out] for ``x @ w``, a layer's
    query, key and value matrices joined into one (one GEMM); the embedding tables stay
    memory-mapped (only the rows of the tokens seen become resident)."""
    path = tdir / WEIGHTS
    if not path.is_file():
        reason = _torch_weights_only(tdir)
        if reason:
            raise UnsupportedModelError(reason)
        raise NumpyEncoderError(f"{path}: model weights not found")
    get = _getter(path, read_safetensors(path))
    h, inner = int(config["hidden_size"]), int(config["intermediate_size"])
    emb = {k: get(f"embeddings.{n}.weight", *s) for k, n, s in (
        ("word", "word_embeddings", (int(config["vocab_size"]), h)),
        ("position", "position_embeddings", (int(config["max_position_embeddings"]), h)),
        ("type", "token_type_embeddings", (int(config.get("type_vocab_size", 2)), h)))}
    emb["ln"] = _norm(get, "embeddings.LayerNorm", h)
    layers = [_layer(get, f"encoder.layer.{i}.", h, inner)
              for i in range(int(config["num_hidden_layers"]))]
    return emb, layers


def _getter(path: Path, tensors: Mapping[str, np.ndarray]):
    """``get(name, *shape)``: a float32 tensor of the checkpoint, its shape checked; names with
    or without the ``bert.`` prefix of BertFor* checkpoints."""
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in tensors else ""

    def get(name: str, *shape: int) -> np.ndarray:
        if prefix + name not in tensors:
            raise NumpyEncoderError(f"{path}: no tensor {prefix + name!r} (not a BERT checkpoint "
                                    f"matching config.json?)")
        arr = tensors[prefix + name]
        if tuple(arr.shape) != shape:
            raise NumpyEncoderError(f"{path}: tensor {prefix + name!r} has shape "
                                    f"{list(arr.shape)}, config.json implies {list(shape)}")
        return to_float32(arr)

    return get


def _linear(get, name: str, n_out: int, n_in: int) -> tuple[np.ndarray, np.ndarray]:
    return _matrix(get(f"{name}.weight", n_out, n_in)), get(f"{name}.bias", n_out)


def _norm(get, name: str, h: int) -> tuple[np.ndarray, np.ndarray]:
    return get(f"{name}.weight", h), get(f"{name}.bias", h)


def _layer(get, p: str, h: int, inner: int) -> dict:
    att = [_linear(get, f"{p}attention.self.{n}", h, h) for n in ("query", "key", "value")]
    return {"qkv": (np.concatenate([w for w, _ in att], axis=1),
                    np.concatenate([b for _, b in att])),
            "out": _linear(get, f"{p}attention.output.dense", h, h),
            "ln1": _norm(get, f"{p}attention.output.LayerNorm", h),
            "up": _linear(get, f"{p}intermediate.dense", inner, h),
            "down": _linear(get, f"{p}output.dense", h, inner),
            "ln2": _norm(get, f"{p}output.LayerNorm", h)}


# ---------------------------------------------------------------- the forward pass


def gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, x·Φ(x) = x/2·(1 + erf(x/√2)), on float32 activations; erf by
    Abramowitz & Stegun 7.1.26 (max |GELU error| 4.6e-7 on [-12, 12] against math.erf in
    float64; in float64 it would cost 3-4x the time for 3.3e-7)."""
    one = np.float32(1.0)
    z = np.abs(x) * np.float32(1.0 / math.sqrt(2.0))
    t = one / (one + np.float32(0.3275911) * z)
    poly = t * (np.float32(0.254829592) + t * (np.float32(-0.284496736) + t * (
        np.float32(1.421413741) + t * (np.float32(-1.453152027) + t * np.float32(1.061405429)))))
    z *= z
    np.exp(np.negative(z, out=z), out=z)
    erf = np.copysign(one - poly * z, x)
    erf += one
    erf *= x
    erf *= np.float32(0.5)
    return erf


def layer_norm(x: np.ndarray, weight: tuple[np.ndarray, np.ndarray], eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = np.mean(centred * centred, axis=-1, keepdims=True)
    return centred / np.sqrt(var + eps) * weight[0] + weight[1]


class Packed(NamedTuple):
    """A batch's tokens end to end, without padding, so that the GEMMs (nearly all the time)
    see only real tokens — the masked and the plain question differ in length. Attention alone
    needs them per text: it scatters them into [b, t_max] with a mask."""

    lengths: np.ndarray  # [b] tokens of each text
    slots: np.ndarray | None  # [n] each token's row in the padded [b·t_max] layout; None: b = 1
    bias: np.ndarray  # [b, 1, 1, t_max]: 0 for tokens, float32 min for padding (as transformers)

    @classmethod
    def of(cls, lengths: np.ndarray) -> Packed:
        b, t = len(lengths), int(lengths.max())
        real = np.arange(t)[None, :] < lengths[:, None]
        bias = np.where(real, np.float32(0), np.finfo(np.float32).min).astype(np.float32)
        return cls(lengths, np.flatnonzero(real) if b > 1 else None, bias[:, None, None, :])


def _attention(x: np.ndarray, layer: dict, packed: Packed, heads: int) -> np.ndarray:
    """Multi-head self-attention of packed activations [n, h] → [n, h]."""
    h = x.shape[1]
    b, t = packed.bias.shape[0], packed.bias.shape[-1]
    dh = h // heads
    qkv = x @ layer["qkv"][0] + layer["qkv"][1]
    if packed.slots is not None:
        padded = np.zeros((b * t, 3 * h), dtype=qkv.dtype)
        padded[packed.slots] = qkv
        qkv = padded
    q, k, v = qkv.reshape(b, t, 3, heads, dh).transpose(2, 0, 3, 1, 4)  # [b, heads, t, dh]
    scores = (q @ k.transpose(0, 1, 3, 2)) * np.float32(1.0 / math.sqrt(dh)) + packed.bias
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    context = (scores @ v).transpose(0, 2, 1, 3).reshape(b * t, h)
    if packed.slots is not None:
        context = context[packed.slots]
    return context @ layer["out"][0] + layer["out"][1]


class NumpyBertEncoder(PrefixedEncoder):
    """A BERT sentence-transformers model run in numpy: the ``SentenceEncoder`` interface
    (``spec``, ``dim``, ``encode_queries``, ``encode_passages``) without torch."""

    backend = "numpy"

    def __init__(self, model_dir: Path, spec: Mapping | None = None):
        from tokenizers import Tokenizer

        spec = dict(spec or {})
        found = layout(model_dir)
        tdir, config = found["transformer"], found["config"]
        self._load_model(found)
        self._lower = found["do_lower_case"]
        tok_path = tdir / "tokenizer.json"
        try:
            self._tokenizer = Tokenizer.from_file(str(tok_path))
        except Exception as exc:  # tokenizers raises its own Exception types
            raise NumpyEncoderError(f"{tok_path}: cannot load the tokenizer ({exc})") from None
        self._tokenizer.enable_truncation(max_length=found["max_seq_length"])
        self._tokenizer.no_padding()  # tokenizer.json may pad to a fixed length; Packed does not
        dim = int(config["hidden_size"])
        if spec.get("dim") is not None and int(spec["dim"]) != dim:
            raise NumpyEncoderError(f"{model_dir}: model gives {dim}-d vectors but the encoder "
                                    f"spec records dim={spec['dim']} (a different model?)")
        self.spec = {"model": str(spec.get("model") or model_dir), "path": str(model_dir),
                     "dim": dim, "query_prefix": str(spec.get("query_prefix") or ""),
                     "passage_prefix": str(spec.get("passage_prefix") or ""),
                     "normalize": True, "max_seq_length": found["max_seq_length"],
                     "device": "cpu"}

    def _load_model(self, found: Mapping) -> None:
        """The forward's weights and shape (``layout``'s result); subclasses run the model
        another way."""
        config = found["config"]
        self._emb, self._layers = load_weights(found["transformer"], config)
        self._heads = int(config["num_attention_heads"])
        self._eps = float(config.get("layer_norm_eps", 1e-12))
        self._pooling = found["pooling"]

    @classmethod
    def from_spec(cls, spec: Mapping) -> NumpyBertEncoder:
        """The encoder an ``encoder.json`` dict describes (see ``SentenceEncoder.from_spec``)."""
        return cls(spec_model_dir(spec), spec)

    def _encode(self, texts: Sequence[str], prefix: str, batch_size: int,
                progress: bool = False) -> np.ndarray:
        """Batches of texts with the same or close token counts (tokenized once, shortest
        first, stable), so a padded forward spends little on padding; each batch is one
        forward. ``progress``: a bar on stderr (batch encodings at build time; tqdm is
        imported only then)."""
        if isinstance(texts, str):
            raise NumpyEncoderError("encode_* takes a list of texts, got a single string")
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
        """One forward of tokenized texts: float32 [n, dim], unit norm."""
        if not encodings:
            return np.empty((0, self.dim), dtype=np.float32)
        packed = Packed.of(np.array([len(e.ids) for e in encodings]))
        hidden = self._hidden(
            np.concatenate([e.ids for e in encodings]).astype(np.int64),
            np.concatenate([e.type_ids for e in encodings]).astype(np.int64),
            np.concatenate([np.arange(n) for n in packed.lengths]), packed)
        starts = np.concatenate([[0], np.cumsum(packed.lengths)[:-1]])
        if self._pooling == "cls":
            pooled = hidden[starts]
        else:  # the mean over each text's tokens
            pooled = np.add.reduceat(hidden, starts, axis=0) / packed.lengths[:, None]
        norm = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norm, 1e-12)).astype(np.float32)

    def _hidden(self, ids: np.ndarray, types: np.ndarray, positions: np.ndarray,
                packed: Packed) -> np.ndarray:
        """BERT's last hidden state of the packed tokens [n, h]: embeddings + LayerNorm, then
        the layers (post-LN: attention → add & norm → GELU feed-forward → add & norm)."""
        emb = self._emb
        x = emb["word"][ids] + emb["position"][positions] + emb["type"][types]
        x = layer_norm(x, emb["ln"], self._eps)
        for layer in self._layers:
            x = layer_norm(_attention(x, layer, packed, self._heads) + x, layer["ln1"], self._eps)
            up = gelu(x @ layer["up"][0] + layer["up"][1])
            x = layer_norm(up @ layer["down"][0] + layer["down"][1] + x, layer["ln2"], self._eps)
        return x

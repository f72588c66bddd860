"""A sentence-transformers BERT checkpoint read without torch: what its directory says (the
modules, the pooling, the tokenizer's limits, the config) and its weights from
``model.safetensors``.

Why: the build exports the question encoder as an ONNX graph written from these weights
(``training/onnx_export.py``), and the query service runs it through onnxruntime
(runtime/onnx_bert.py) with the tokenizer and limits read here; neither needs torch.

What is covered — ``unsupported_reason`` says what is not, and the torch path
(sentence-transformers) is then the one that can load the model:

* modules.json: Transformer → Pooling (mean or CLS) → optional Normalize (vectors are always
  L2-normalised, as ``SentenceEncoder`` asks sentence-transformers to);
* config.json: ``model_type`` ``bert``, absolute position embeddings, ``hidden_act`` ``gelu``;
* weights in ``model.safetensors`` (F32, F16 or BF16), read by ``read_safetensors`` with
  ``np.memmap``: no safetensors/torch dependency. ``pytorch_model.bin`` only: torch is needed;
* tokenizer.json read by ``tokenizers`` (HuggingFace's Rust tokenizer), truncated at
  sentence_bert_config.json's ``max_seq_length`` as sentence-transformers does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from lokg.runtime.encoder import EncoderError

WEIGHTS = "model.safetensors"
TORCH_WEIGHTS = "pytorch_model.bin"
_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
           "F64": np.dtype("<f8"), "I64": np.dtype("<i8"), "I32": np.dtype("<i4")}
_MAX_HEADER = 100 * 2**20  # the format's own limit on the JSON header


class CheckpointError(EncoderError):
    """A model directory that cannot be read; the message names the file."""


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
                raise CheckpointError(f"{path}: not a safetensors file (header length "
                                        f"{n} in a {size}-byte file)")
            header = json.loads(fh.read(n).decode("utf-8"))
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the model weights ({exc.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: not a safetensors file (bad JSON header: "
                                f"{exc})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: not a safetensors file (header is not a JSON object)")
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
        raise CheckpointError(f"{path}: tensor {name!r} has an unsupported or malformed "
                                f"header entry (dtype {kind!r}; supported: "
                                f"{', '.join(_DTYPES)})") from None
    length = 0 if data is None else len(data)
    if not 0 <= start <= end <= length or end - start != math.prod(shape) * dtype.itemsize:
        raise CheckpointError(f"{path}: tensor {name!r} {info['dtype']}{shape} does not fit "
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
    """A torch Linear weight [out, in] as a C-contiguous [in, out] copy."""
    return np.ascontiguousarray(weight.T)


# ---------------------------------------------------------------- what the model directory says


class UnsupportedModelError(CheckpointError):
    """The model is not one the torch-free encoder runs (the torch path can): not a file
    error."""


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({exc.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: invalid JSON ({exc})") from None


def _pooling(pool_dir: Path) -> str:
    """``mean`` or ``cls`` from a Pooling module's config.json; anything else is unsupported."""
    cfg = _read_json(pool_dir / "config.json")
    modes = ([cfg["pooling_mode"]] if isinstance(cfg.get("pooling_mode"), str) else
             [k[len("pooling_mode_"):] for k, v in cfg.items()
              if k.startswith("pooling_mode_") and v is True])
    modes = ["mean" if m == "mean_tokens" else "cls" if m == "cls_token" else m for m in modes]
    if modes not in (["mean"], ["cls"]):
        raise UnsupportedModelError(f"{pool_dir / 'config.json'}: pooling {modes or 'none'} "
                                    f"(the torch-free encoder does mean or cls pooling)")
    return modes[0]


def layout(model_dir: Path) -> dict:
    """The sentence-transformers pipeline of a model directory, checked against what the
    torch-free encoder runs: {transformer dir, pooling, max_seq_length, do_lower_case, config}.

    Raises UnsupportedModelError (the torch path may still load it) or CheckpointError."""
    model_dir = Path(model_dir)
    if not (model_dir / "modules.json").is_file():
        raise UnsupportedModelError(f"{model_dir}: no modules.json (a plain transformers "
                                    f"directory; the torch-free encoder needs a "
                                    f"sentence-transformers one)")
    modules = _read_json(model_dir / "modules.json")
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise CheckpointError(f"{model_dir / 'modules.json'}: not a list of modules")
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise UnsupportedModelError(f"{model_dir / 'modules.json'}: modules {kinds} (the "
                                    f"torch-free encoder runs Transformer, Pooling[, Normalize])")
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
    """A BERT config.json the exported forward reproduces, else UnsupportedModelError saying
    what."""
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
        raise UnsupportedModelError(f"{path}: {'; '.join(problems)} — the torch-free encoder "
                                    f"runs BERT models only (use the torch encoder)")


def unsupported_reason(model_dir: Path) -> str | None:
    """Why the torch-free encoder cannot run a model directory (None: it can). File errors
    raise."""
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
    query, key and value matrices joined into one; the embedding tables stay memory-mapped."""
    path = tdir / WEIGHTS
    if not path.is_file():
        reason = _torch_weights_only(tdir)
        if reason:
            raise UnsupportedModelError(reason)
        raise CheckpointError(f"{path}: model weights not found")
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
            raise CheckpointError(f"{path}: no tensor {prefix + name!r} (not a BERT checkpoint "
                                    f"matching config.json?)")
        arr = tensors[prefix + name]
        if tuple(arr.shape) != shape:
            raise CheckpointError(f"{path}: tensor {prefix + name!r} has shape "
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

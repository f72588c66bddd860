"""Stage ``entity_encode``: entity texts → unit vectors → FAISS index + id map.

Input: ``entities`` (id, key, name, aliases, description, types). Text per ``entity_encode.text``:

* ``name`` — the entity's name (its key when the name is missing);
* ``name_type_description`` — ``"<name> (<type>): <description>"``: the first type made readable
  (last segment of ``people.person`` / ``/film/film``, ``~`` of an incoming-relation type proxy
  dropped, ``_`` → space) and the description's first sentence cut to ``DESCRIPTION_WORDS``
  words. Missing parts are left out. Short on purpose: MiniLM truncates at 256 word pieces and
  the name is what questions mention; type and description disambiguate namesakes.

Outputs in ``out_dir``:

* ``entity_vectors.npy`` — float32 ``[n, dim]``, unit L2 norm; row i is ``entity_ids`` row i;
  written block by block through a memory map (``training/entity_blocks.py``); a reader that
  maps it (``np.load(..., mmap_mode="r")``, as the runtime does) holds none of it;
* ``entity_ids.parquet`` — contract table ``entity_ids(row, id)``, rows in entity-id order;
* ``entity.faiss`` — inner product on unit vectors (= cosine), built from the vectors' file in
  blocks: ``IndexFlatIP`` (exact) up to ``flat_max`` entities, ``IndexHNSWFlat`` with
  ``METRIC_INNER_PRODUCT`` above (M = ``hnsw_m``), and where either would not fit half of
  ``build.memory_gb``, an IVF index of 8-bit codes (``ivf_sq8_ip``; ``ivf_nprobe`` lists
  searched) or of PQ codes (``ivf_pq_ip``) that does (``entity_blocks.index_kind``); the
  runtime ranks entities by an exact scan of the mapped vectors, the index serves other readers;
* ``encoder.json`` — everything the runtime needs to embed a question the same way: the model
  spec as given and its resolved directory, dim, prefixes, ``normalize: true``, index type and
  metric (and its search settings: ``hnsw_m``/``ef_search``, ``lists``/``nprobe``), read back by
  ``runtime.encoder.SentenceEncoder.from_spec``; ``onnx`` names the next
  files when they were written;
* ``query_encoder.onnx`` — the same model for the query service, int8 by default
  (``query_onnx``; ``training/onnx_export.py``), for BERT models (others: none, reported);
* ``span_encoder.onnx`` — beside an int8 ``query_encoder.onnx``, the same model in float32, which
  the runtime embeds question spans with (an fp32 ``query_encoder.onnx`` serves both);

Memory: ``build.memory_gb`` (lokg/common/resources.py) bounds the stage whatever the number of
entities: vectors are encoded and written in blocks of 1/16 of it and the index holds at most
half of it (``training/entity_blocks.py``, which says how; the vectors do not depend on it).
What grows with the entities besides is their texts (one Python string each, ~0.2 kB).

The export is written first, because on a CPU it is also what encodes the entities
(``encoder``, as ``triple_context.encoder``: ``auto`` takes the int8 export on a CPU and
sentence-transformers on CUDA when ``device=auto`` finds one; ``onnx`` refuses to run without
the export; ``torch`` is sentence-transformers everywhere). Each distinct text is encoded once,
shortest first — by token count on the ONNX path, characters on torch — in batches of
``batch_size`` (torch) or ``onnx_batch_size`` (a batch pads to its longest text; int8
activations are scaled per batch, so smaller ONNX batches stay closer to float32), with
``threads`` onnxruntime/torch CPU threads (one by default: the hosts are shared). The
ONNX batches can be shared out among ``workers`` processes (1 by default; 2 for a host whose two
cores are free: a second intra-op thread gains little on these tiny GEMMs, docs/BENCHMARKS.md
"Entity encoding: token batches and workers"), with the vectors of one process. The index is
then built on ``workers`` × ``threads`` FAISS threads, the cores the encode held. The int8
vectors are at cosine >= 0.98 of the float32 ones (docs/BENCHMARKS.md, "Build scale").

In a refresh (``previous:`` inputs, pipeline/refresh.py: same code and settings, changed
entities) the previous build's vector of every entity whose key and text are unchanged is
reused and only new or changed texts are encoded; the outputs are written in the new id order
and the index is rebuilt. The export is reused too. With the float32 encoders a reused vector
equals a full build's; with the int8 export it may differ by the per-batch scaling (a text's
batch companions change), within the int8 tolerance above.
"""

from __future__ import annotations

import json
import multiprocessing
import re
import shutil
import sys
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa

from lokg.common.stage import (PREVIOUS, Laps, StageError, previous_inputs,
                            stage_batch_encoder, torch_threads)
from lokg.runtime.contract import read_table, write_table
from lokg.runtime.encoder import (EncoderError, PrefixedEncoder, distinct_codes, length_order,
                                  spec_model_dir)
from lokg.runtime.onnx_bert import QUERY_MODEL, SPANS_MODEL
from lokg.common.resources import BuildSettings
from lokg.training import entity_blocks
from lokg.training.settings import EntityEncodeSettings

STAGE = "entity_encode"
DESCRIPTION_WORDS = 32
#: Fewer texts per worker than this are encoded in the stage's own process: starting a worker
#: (spawn, imports, session) costs about what 1,000-2,000 short texts' forwards do.
MIN_TEXTS_PER_WORKER = 2000
VECTORS = "entity_vectors.npy"
#: Entities whose columns are turned into Python lists at a time to make their texts.
TEXT_CHUNK = 65536


def settings(config: Mapping) -> EntityEncodeSettings:
    """The ``entity_encode`` section, checked (unknown keys and bad values name themselves)."""
    return EntityEncodeSettings.of(config, StageError)


def readable_type(type_name: str) -> str:
    """``people.person`` → ``person``, ``/film/film`` → ``film``, ``~place_of_birth`` → ``place of birth``."""
    last = re.split(r"[./]", type_name.lstrip("~").strip("/"))[-1]
    return last.replace("_", " ").strip()


def short_description(text: str | None, words: int = DESCRIPTION_WORDS) -> str:
    """The first sentence of a description, at most ``words`` words."""
    if not text:
        return ""
    first = re.split(r"(?<=[.!?])\s+", text.strip(), maxsplit=1)[0]
    return " ".join(first.split()[:words])


def entity_text(name: str, types: list[str] | None, description: str | None, rule: str) -> str:
    if rule == "name":
        return name
    type_text = readable_type(types[0]) if types else ""
    text = f"{name} ({type_text})" if type_text else name
    desc = short_description(description)
    return f"{text}: {desc}" if desc else text


def entity_texts(entities: pa.Table, rule: str) -> tuple[np.ndarray, list[str], int]:
    """(entity ids ascending, their texts, how many had no name and used the key)."""
    ids, _, texts, unnamed = keyed_texts(entities, rule)
    return ids, texts, unnamed


def keyed_texts(entities: pa.Table, rule: str) -> tuple[np.ndarray, list[str], list[str], int]:
    """(entity ids ascending, their keys, their texts, how many had no name and used the key)."""
    ids = entities.column("id").to_numpy()
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    if len(ids) and (ids[0] < 0 or np.any(ids[1:] == ids[:-1])):
        raise StageError(f"{STAGE}: entity ids must be distinct and >= 0")
    keys, texts, unnamed = [], [], 0
    for start in range(0, len(order), TEXT_CHUNK):  # Python lists of a chunk's columns at a time
        part = entities.take(order[start:start + TEXT_CHUNK])
        cols = [part.column(c).to_pylist() for c in ("key", "name", "types", "description")]
        for key, name, types, description in zip(*cols):
            if not name:
                name, unnamed = key, unnamed + 1
            keys.append(key)
            texts.append(entity_text(name, types, description, rule))
    return ids.astype(np.int64), keys, texts, unnamed


def reusable_vectors(inputs: Mapping[str, str], keys: list[str], texts: list[str],
                     rule: str) -> tuple[np.ndarray, np.ndarray, Path] | None:
    """In a refresh: (mask of the entities whose key and text the previous build had, their
    rows in the previous build's vectors in order, that ``entity_vectors.npy``), else None."""
    previous = previous_inputs(inputs, "entities", "entity_vectors", "entity_ids")
    if previous is None:
        return None
    table = read_table(previous["entities"], "entities",
                       columns=["id", "key", "name", "types", "description"])
    old_ids, old_keys, old_texts, _ = keyed_texts(table, rule)
    rows = read_table(previous["entity_ids"], "entity_ids")
    row_of = dict(zip(rows.column("id").to_pylist(), rows.column("row").to_pylist()))
    known = {key: (text, row_of[i]) for i, key, text in zip(old_ids.tolist(), old_keys, old_texts)}
    found = [known.get(key, (None, -1)) for key in keys]
    mask = np.array([old == text for (old, _), text in zip(found, texts)], bool)
    source = np.array([row for (_, row), same in zip(found, mask) if same], np.int64)
    return mask, source, Path(previous["entity_vectors"])


build_index = entity_blocks.build_index


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    """Stage entry point: encode ``inputs['entities']``; write vectors, index, id map, encoder.json."""
    cfg = settings(config)
    if "entities" not in inputs:
        raise StageError(f"{STAGE} needs input 'entities' (run ingest first; have {sorted(inputs)})")
    out = Path(out_dir)
    lap = Laps()
    entities = read_table(Path(inputs["entities"]), "entities",
                          columns=["id", "key", "name", "types", "description"])
    if entities.num_rows == 0:
        raise StageError(f"{inputs['entities']}: the entities table is empty")
    ids, keys, texts, unnamed = keyed_texts(entities, cfg.text)
    del entities  # the texts are all the stage needs of it (and the keys, once compared)
    reusable, keys = reusable_vectors(inputs, keys, texts, cfg.text), None
    lap("read_and_texts")

    memory_gb = BuildSettings.of(config, StageError).memory_gb
    encoder, exported, index, kind = _encode_and_index(cfg, texts, out, lap, reusable, inputs,
                                                       memory_gb)
    paths = _write(out, ids, index, _encoder_spec(encoder, cfg, index, kind, len(ids), exported))
    lap("write")
    if unnamed:
        print(f"WARNING {STAGE}: {unnamed} entities have no name; their key was encoded",
              file=sys.stderr)
    seconds = lap.seconds
    reused = int(reusable[0].sum()) if reusable is not None else 0
    return {
        "outputs": {k: str(p) for k, p in paths.items()},
        "report": {
            "entities": len(ids), "unnamed": unnamed, "model": cfg.model,
            "path": encoder.spec["path"], "dim": encoder.dim, "device": encoder.spec["device"],
            "encoder": encoder.backend,
            "text": cfg.text, "index": kind, "query_onnx": exported, "memory_gb": memory_gb,
            "block_rows": _block_rows(cfg, encoder, memory_gb),
            "step_seconds": seconds, "encoded": len(ids) - reused,
            "reused_vectors": reused if reusable is not None else None,
            "entities_per_second": (round((len(ids) - reused) / seconds["encode"], 1)
                                    if seconds["encode"] else None),
        },
    }


def _encode_and_index(cfg: Mapping, texts: list[str], out: Path, lap: Laps, reusable,
                      inputs: Mapping[str, str], memory_gb: float):
    """Encode with ``threads`` torch threads in each of ``workers`` processes into
    ``entity_vectors.npy``, then build the index from that file on ``index_threads`` FAISS
    threads (FAISS's setting is process-global, so it is restored after)."""
    import faiss

    faiss_threads_before = faiss.omp_get_max_threads()
    try:
        with torch_threads(cfg.get("threads")):
            encoder, vectors, exported = encode_entities(cfg, texts, out, lap, reusable,
                                                         inputs.get(PREVIOUS + "encoder"),
                                                         memory_gb)
        if threads := index_threads(cfg):
            faiss.omp_set_num_threads(threads)
        index, kind = build_index(vectors, cfg, memory_gb,
                                  _block_rows(cfg, encoder, memory_gb))
        lap("index")
    finally:
        faiss.omp_set_num_threads(faiss_threads_before)
    return encoder, exported, index, kind


def _block_rows(cfg: Mapping, encoder: PrefixedEncoder, memory_gb: float) -> int:
    batch = cfg["onnx_batch_size"] if encoder.backend == "onnx" else cfg["batch_size"]
    return entity_blocks.block_rows(memory_gb, encoder.dim, int(batch))


def index_threads(cfg: Mapping) -> int | None:
    """The index is built after the encode, on the cores its workers held: ``workers`` ×
    ``threads`` (null ``threads``: FAISS's default). On one thread an HNSW build of 1.7 M
    entities took 46 min while the second core idled (docs/BENCHMARKS.md, the 10⁷ build)."""
    return int(cfg["threads"]) * int(cfg["workers"]) if cfg.get("threads") else None


def _encoder_spec(encoder, cfg: Mapping, index, kind: str, rows: int, exported: dict) -> dict:
    """encoder.json: how the runtime encodes questions the way the entities were encoded,
    and the index it searches."""
    spec = {**encoder.spec, "text": cfg["text"],
            "index": entity_blocks.index_spec(kind, index, rows, cfg)}
    spec.pop("onnx", None)  # the ONNX encoder's copy; the export's entry is set just below
    if "file" in exported:
        spec["onnx"] = exported
    return spec


def _write(out: Path, ids: np.ndarray, index, spec: dict) -> dict:
    """The index, the id map and encoder.json beside the vectors already written."""
    import faiss

    paths = {"entity_vectors": out / VECTORS, "entity_index": out / "entity.faiss",
             "entity_ids": out / "entity_ids.parquet", "encoder": out / "encoder.json"}
    faiss.write_index(index, str(paths["entity_index"]))
    write_table("entity_ids", pa.table({"row": np.arange(len(ids), dtype=np.int64), "id": ids}),
                paths["entity_ids"])
    if "onnx" in spec:
        paths["query_encoder"] = out / spec["onnx"]["file"]
        if spec["onnx"].get("spans_file", spec["onnx"]["file"]) != spec["onnx"]["file"]:
            paths["span_encoder"] = out / spec["onnx"]["spans_file"]
    paths["encoder"].write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return paths


def encode_entities(cfg: Mapping, texts: list[str], out: Path, lap: Laps,
                    reusable: tuple[np.ndarray, np.ndarray, Path] | None = None,
                    previous_spec: str | None = None,
                    memory_gb: float = 12.0) -> tuple[PrefixedEncoder, Path, dict]:
    """(the store's encoder, ``entity_vectors.npy`` written in ``out``, the export's
    encoder.json entry). The question encoder is exported first so that on a CPU the batch
    runs on it (``encoder`` auto or onnx: int8 ONNX, 4.5x torch's float32 on one thread for
    FB15k-237's entities, docs/BENCHMARKS.md), shortest texts first, in blocks sized by
    ``memory_gb`` (``training/entity_blocks.py``). ``reusable`` (a refresh): the mask of the
    texts whose previous vectors are given (their rows in the previous file), which are not
    encoded again; ``previous_spec``: the previous encoder.json, whose export is reused."""
    try:
        model_dir = spec_model_dir({"model": cfg["model"]})
    except EncoderError as exc:
        raise StageError(f"{STAGE}: {exc}") from None
    exported = (_previous_export(Path(previous_spec), out) if previous_spec else None) \
        or _export_query_encoder(model_dir, out, cfg["query_onnx"])
    lap("export")
    spec = {"model": cfg["model"], "query_prefix": cfg["query_prefix"],
            "passage_prefix": cfg["passage_prefix"]}
    encoder = stage_batch_encoder(STAGE, spec, cfg,
                                  out / exported["file"] if "file" in exported else None)
    lap("load_model")
    mask, kept, previous = reusable or (np.zeros(len(texts), bool), None, None)
    _encode_into(encoder, cfg, [texts[i] for i in np.flatnonzero(~mask)], mask,
                 (kept, previous), out, _block_rows(cfg, encoder, memory_gb))
    lap("encode")
    return encoder, out / VECTORS, exported


def _encode_into(encoder: PrefixedEncoder, cfg: Mapping, fresh: list[str], mask: np.ndarray,
                 kept: tuple, out: Path, rows: int) -> None:
    """``entity_vectors.npy`` of every entity: the ``fresh`` texts (the rows not in ``mask``)
    encoded each distinct text once, shortest first, ``rows`` a block into a scratch file, then
    gathered in row order with the ``kept`` (previous rows, previous file) vectors."""
    batch = int(cfg["onnx_batch_size"] if encoder.backend == "onnx" else cfg["batch_size"])
    distinct, codes = distinct_codes(fresh)
    order = length_order(encoder.passage_lengths, distinct)
    encode = in_workers(encoder, int(cfg["workers"])) or (
        lambda part, size: encoder.encode_passages(part, batch_size=size, progress=True))
    scratch = out / ".sorted_vectors.f32"
    entity_blocks.encode_sorted_blocks(encode, [distinct[i] for i in order], batch, rows, scratch)
    del distinct
    place = np.empty(len(order), np.int64)
    place[order] = np.arange(len(order))
    source = place[codes]  # each fresh row's place in the scratch file
    fresh_before = np.concatenate([[0], np.cumsum(~mask)])
    kept_before = np.concatenate([[0], np.cumsum(mask)])

    def rows_of(start: int, stop: int) -> np.ndarray:
        block = np.empty((stop - start, encoder.dim), np.float32)
        here = mask[start:stop]
        block[~here] = entity_blocks.gather(scratch, source[fresh_before[start]:fresh_before[stop]],
                                            encoder.dim)
        if here.any():
            block[here] = entity_blocks.gather(kept[1], kept[0][kept_before[start]:kept_before[stop]])
        return block

    entity_blocks.fill_vectors(out / VECTORS, (len(mask), encoder.dim), rows, rows_of)
    scratch.unlink()


def in_workers(encoder: PrefixedEncoder, workers: int):
    """The encode of length-sorted texts (a block of ``entity_blocks.encode_sorted_blocks``,
    or ``encode_by_length``'s ``encode_sorted``) over ``workers`` processes of the ONNX export
    (None — in this process — for one worker, another backend, or too few texts to pay for
    starting them). Batch i goes to worker i mod ``workers``: the batches, and so the int8
    vectors, are those of one process, and every worker gets long and short texts alike."""
    if workers < 2 or encoder.backend != "onnx":
        return None

    def encode(texts: list[str], batch: int) -> np.ndarray:
        if len(texts) < workers * MIN_TEXTS_PER_WORKER:
            return encoder.encode_passages(texts, batch_size=batch, progress=True)
        rows = np.arange(len(texts))
        parts = [np.concatenate([rows[i:i + batch] for i in range(k * batch, len(texts),
                                                                   workers * batch)])
                 for k in range(workers)]
        load = (Path(encoder.spec["path"]), encoder.spec, encoder.model_path,
                int(encoder.threads))
        context = multiprocessing.get_context("spawn")  # no fork of a threaded driver
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            done = pool.map(_encode_part, [load] * workers,
                            [[texts[i] for i in part] for part in parts], [batch] * workers)
            vectors = np.empty((len(texts), encoder.dim), np.float32)
            for part, part_vectors in zip(parts, done):
                vectors[part] = part_vectors
        return vectors

    return encode


def _encode_part(load: tuple, texts: list[str], batch: int) -> np.ndarray:
    """A worker process's share: its own session of the export, one forward per batch."""
    from lokg.runtime.onnx_bert import OnnxBertEncoder

    model_dir, spec, model_path, threads = load
    return OnnxBertEncoder(model_dir, spec, model_path, threads=threads).encode_passages(
        texts, batch_size=batch)


def _previous_export(previous_spec: Path, out: Path) -> dict | None:
    """The previous build's question-encoder export (a refresh, same settings) copied into
    ``out`` with its float32 model for spans, its encoder.json entry; None when it wrote none,
    or none for spans (a build made before those were exported: the refresh exports both)."""
    entry = json.loads(previous_spec.read_text(encoding="utf-8")).get("onnx")
    files = {entry["file"], entry["spans_file"]} if entry and "spans_file" in entry else set()
    sources = [previous_spec.parent / name for name in sorted(files)]
    if not sources or not all(source.is_file() for source in sources):
        return None
    for source in sources:
        shutil.copy2(source, out / source.name)
    return entry


def _export_query_encoder(model_dir: Path, out: Path, quantization: str) -> dict:
    """The question encoder for the query service (``training/onnx_export.py``): its
    encoder.json entry, or why there is none (off, or a model the export does not cover)."""
    if quantization == "off":
        return {"skipped": "entity_encode.query_onnx is off"}
    from lokg.runtime.bert_checkpoint import unsupported_reason
    from lokg.training.onnx_export import export

    reason = unsupported_reason(model_dir) or _missing_onnx_packages()
    if reason is not None:
        print(f"WARNING {STAGE}: no ONNX question encoder: {reason}", file=sys.stderr)
        return {"skipped": reason}
    return export(model_dir, out / QUERY_MODEL, quantization, out / SPANS_MODEL)


def _missing_onnx_packages() -> str | None:
    """Why the export cannot run here (None: it can): onnx writes the graph, onnxruntime
    quantizes it; without them the build goes on and the runtime uses sentence-transformers."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install onnx onnxruntime: the train extra)"
    return None

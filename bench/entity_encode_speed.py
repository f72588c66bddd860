"""entity_encode's encoding step, old and new in one run.

    python -m bench.entity_encode_speed --entities ENTITIES.parquet [--reference-sample 5000]
        [--threads 1,2] [--workers 2] [--batch-size 32] [--questions pq-2h/test.txt]

Reads an ``entities`` table (a build's or an ingest's), makes the stage's texts
(``name_type_description``), exports the store's int8 ONNX model as the stage does, and times:

* ``torch`` — the reference: sentence-transformers float32 in the order of the entity ids, 128
  texts a call, one torch thread (the stage before ``entity_encode.encoder``);
* ``onnx-chars`` — the stage before the token-length batches: the int8 export, every text,
  sorted by characters, ``--batch-size`` texts a call, one thread;
* ``onnx-T`` — the stage's ``encoder: auto`` on a CPU in one process (``workers: 1``): the int8
  export, each distinct text once, sorted by token count (``encode_by_length``),
  ``--batch-size`` texts a call (``entity_encode.onnx_batch_size``), on T onnxruntime threads
  (``entity_encode.threads``);
* ``onnx-workers-W`` — the same batches shared out among W worker processes of one thread
  (``entity_encode.workers``; the stage's ``in_workers``), CPU seconds of the workers included;
* ``static`` (``--static``) — a candidate, not a stage path: a Model2Vec-style table distilled
  from the same int8 export (each word piece's vector is the model's output for ``[CLS] piece
  [SEP]``), a text's vector the normalized mean of its pieces' rows; its distillation is timed
  apart (``static_distil_s``), and its name linking is given twice: with the int8 question
  vectors (what today's runtime would ask with) and with static question vectors
  (``static_queries``: what a runtime embedding questions the same way would get).

Every path runs on a random sample of ``--reference-sample`` entities (0: all), the ONNX ones
on all of them as well. Times are wall seconds and the process's CPU seconds (on a shared host
the CPU seconds of a one-thread path are what it costs; the wall seconds include waiting).
Agreement with the reference, on the sample: cosine per entity (min, 1st percentile, mean) and
name linking — each entity's name embedded as a question (the query service's int8 encoder) and
searched in the reference's and in the variant's exact index: the share whose top-1 is the same
entity in both (or an entity of the same name), and the share whose top-1 is the entity itself.
``--questions`` (PathQuestion, with a store's entities): the same for each whole question against
its gold topic entity — dense linking alone, without the linker's name forms.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lokg.common.stage import torch_threads
from lokg.pipeline.config import DEFAULTS
from lokg.runtime.contract import read_table
from lokg.runtime.encoder import SentenceEncoder, encode_by_length, spec_model_dir
from lokg.runtime.question_encoder import batch_encoder
from lokg.training import entity_encode
from lokg.training.onnx_export import export

SPEC = {"model": "minilm", "query_prefix": "", "passage_prefix": ""}
REFERENCE_BATCH = 128  # texts per call of the stage before entity_encode.encoder


def cpu_seconds() -> float:
    """CPU seconds of this process and of its ended children (the worker processes)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed(encode, texts: list[str]) -> tuple[np.ndarray, float, float]:
    """(vectors, wall seconds, CPU seconds: every thread's and worker's, not waiting time)."""
    started, cpu = time.perf_counter(), cpu_seconds()
    vectors = encode(texts)
    return vectors, time.perf_counter() - started, cpu_seconds() - cpu


def by_characters(encoder, texts: list[str], batch: int) -> np.ndarray:
    """The stage's ONNX path before token-length batches: every text, by characters."""
    order = np.argsort([len(t) for t in texts], kind="stable")
    vectors = np.empty((len(texts), encoder.dim), np.float32)
    for start in range(0, len(texts), batch):
        rows = order[start:start + batch]
        vectors[rows] = encoder.embed([texts[i] for i in rows])
    return vectors


class StaticTable:
    """A static token-embedding table distilled from the int8 export (Model2Vec-style, plain
    mean: a log-rank weighting of the pieces gave the same FB15k-237 name linking in a trial;
    PCA not tried)."""

    def __init__(self, onnx, batch: int = 256):
        self._tokenizer = onnx._tokenizer  # the export's own word pieces and session
        size = self._tokenizer.get_vocab_size()
        cls, sep = (self._tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]"))
        self.rows = np.empty((size, onnx.dim), np.float32)
        for start in range(0, size, batch):
            pieces = np.arange(start, min(size, start + batch))
            ids = np.stack([np.full_like(pieces, cls), pieces, np.full_like(pieces, sep)], 1)
            self.rows[pieces] = onnx._session.run(
                None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]

    def encode(self, texts: list[str]) -> np.ndarray:
        """Each text's mean piece row ([CLS] and [SEP] left out), unit norm."""
        encodings = self._tokenizer.encode_batch(list(texts))
        pieces = [e.ids[1:-1] or e.ids for e in encodings]
        lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))
        sums = np.add.reduceat(self.rows[np.concatenate(pieces)],
                               np.r_[0, np.cumsum(lengths)[:-1]], axis=0)
        return sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)


def variants(exported: Path, threads: list[int], workers: list[int], batch: int,
             static: StaticTable | None = None) -> dict:
    """name → (threads, encode(texts)) for every path compared; the reference first."""
    torch_encoder = SentenceEncoder.from_spec(SPEC, device="cpu")
    one = batch_encoder(SPEC, "onnx", "cpu", exported, threads=1)
    out = {"torch": (1, lambda t: torch_encoder.encode_passages(t, batch_size=REFERENCE_BATCH)),
           "onnx-chars": (1, lambda t: by_characters(one, t, batch))}
    for n in threads:
        onnx = one if n == 1 else batch_encoder(SPEC, "onnx", "cpu", exported, threads=n)
        out[f"onnx-{n}"] = (n, lambda t, e=onnx: encode_by_length(e, t, batch))
    for n in workers:
        out[f"onnx-workers-{n}"] = (n, lambda t, n=n: encode_by_length(
            one, t, batch, entity_encode.in_workers(one, n)))
    if static is not None:
        out["static"] = (1, static.encode)
    return out


def linking(names: list[str], reference: np.ndarray, vectors: np.ndarray,
            queries: np.ndarray) -> dict:
    """Top-1 of each name in both exact indexes: the same entity; the same or a namesake (an
    entity of the very same name, which no name query can tell apart); the entity itself."""
    import faiss

    tops = []
    for table in (reference, vectors):
        index = faiss.IndexFlatIP(table.shape[1])
        index.add(table)
        tops.append(index.search(queries, 1)[1][:, 0])
    own = np.arange(len(names))
    same_name = [names[a] == names[b] for a, b in zip(*tops)]
    return {"top1_same": round(float(np.mean(tops[0] == tops[1])), 4),
            "top1_same_name": round(float(np.mean(same_name)), 4),
            "top1_self_reference": round(float(np.mean(tops[0] == own)), 4),
            "top1_self": round(float(np.mean(tops[1] == own)), 4)}


def question_topics(path: Path, encoder, rows: dict) -> tuple[np.ndarray, np.ndarray]:
    """(question vectors, the row of each one's gold topic entity): PathQuestion lines, the
    topic the gold path's first element, ``_`` read as a space as in the store's names."""
    questions, topics = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2].split("#")[0] in rows:
            questions.append(parts[0].replace("_", " "))
            topics.append(rows[parts[2].split("#")[0]])
    return encoder.encode_queries(questions, batch_size=64), np.asarray(topics)


def question_linking(queries: np.ndarray, topics: np.ndarray, reference: np.ndarray,
                     vectors: np.ndarray) -> dict:
    """Each whole question's top-1 entity (dense linking, no name forms) in both indexes."""
    tops = [np.argmax(queries @ table.T, axis=1) for table in (reference, vectors)]
    return {"questions": len(topics), "top1_same": round(float(np.mean(tops[0] == tops[1])), 4),
            "top1_gold_reference": round(float(np.mean(tops[0] == topics)), 4),
            "top1_gold": round(float(np.mean(tops[1] == topics)), 4)}


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entities", required=True, type=Path)
    ap.add_argument("--reference-sample", type=int, default=0,
                    help="entities the torch reference encodes (a random sample; 0: all)")
    ap.add_argument("--threads", default="1,2", help="onnxruntime threads to time, comma-separated")
    ap.add_argument("--workers", default="2",
                    help="worker processes (one thread each) to time, comma-separated; '' none")
    ap.add_argument("--batch-size", type=int, default=DEFAULTS["entity_encode"]["onnx_batch_size"],
                    help="texts per call of the sorted paths (the reference: 128)")
    ap.add_argument("--static", action="store_true",
                    help="also the static token-table candidate (distilled in this run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--questions", type=Path,
                    help="PathQuestion questions (question \\t answers \\t path) whose topic "
                         "entities are keys of the table: dense linking of each whole question")
    return ap.parse_args()


def counts(text: str) -> list[int]:
    return [int(n) for n in text.split(",") if n.strip()]


def work(encoder, texts: list[str], batch: int) -> dict:
    """Where a padded forward's work goes: word pieces per text, and the tokens the batches
    run (each padded to its longest text) sorted by characters over every text, as before,
    and by token count over the distinct texts, as the stage now does."""
    counts = encoder.passage_lengths(texts)
    distinct = encoder.passage_lengths(list(dict.fromkeys(texts)))

    def padded(lengths: np.ndarray) -> int:
        return int(sum(chunk.max() * len(chunk) for chunk in
                       (lengths[i:i + batch] for i in range(0, len(lengths), batch))))

    by_chars = counts[np.argsort([len(t) for t in texts], kind="stable")]
    return {"texts": len(texts), "distinct": len(distinct),
            "pieces_mean": round(float(counts.mean()), 2),
            "pieces_p50_p90_max": np.percentile(counts, [50, 90, 100]).tolist(),
            "real_tokens": int(counts.sum()), "padded_by_chars": padded(by_chars),
            "padded_by_tokens_distinct": padded(np.sort(distinct))}


def entity_rows(path: Path) -> dict[str, list[str]]:
    """The stage's texts, the names and the keys of an entities table, in entity-id order."""
    table = read_table(path, "entities", columns=["id", "key", "name", "types", "description"])
    order = np.argsort(table.column("id").to_numpy(), kind="stable")
    keys = table.column("key").to_pylist()
    return {"texts": entity_encode.entity_texts(table, "name_type_description")[1],
            "names": entity_encode.entity_texts(table, "name")[1],
            "keys": [keys[i] for i in order]}


def main() -> None:
    args = arguments()
    entities = entity_rows(args.entities)
    n = len(entities["texts"])
    sample = np.arange(n)
    if 0 < args.reference_sample < n:
        sample = np.sort(np.random.default_rng(args.seed).choice(n, args.reference_sample,
                                                                 replace=False))
    names = [entities["names"][i] for i in sample]
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        exported = Path(tmp) / "query_encoder.onnx"
        export(spec_model_dir(SPEC), exported, "int8")
        export_s = time.perf_counter() - started
        queries = batch_encoder(SPEC, "onnx", "cpu", exported, threads=1)
        tokens = work(queries, entities["texts"], args.batch_size)
        started = time.perf_counter()
        static = StaticTable(queries) if args.static else None
        static_s = time.perf_counter() - started
        paths = variants(exported, counts(args.threads), counts(args.workers), args.batch_size,
                         static)
        rows = run_all(paths, entities["texts"], sample)
        name_vectors = queries.encode_queries(names, batch_size=64)
        asked = args.questions and question_topics(
            args.questions, queries, {entities["keys"][i]: row for row, i in enumerate(sample)})
    reference = rows.pop("torch")
    report = {"entities": n, "reference_sample": len(sample), "export_s": round(export_s, 1),
              "tokens": tokens, "torch": summary(reference), "variants": {}}
    for name, row in rows.items():
        report["variants"][name] = summary(row, reference, names, name_vectors)
        if asked:
            report["variants"][name]["questions"] = question_linking(
                *asked, reference["sample_vectors"], row["sample_vectors"])
    if static is not None:
        report["static_distil_s"] = round(static_s, 1)
        report["variants"]["static"]["static_queries"] = linking(
            names, reference["sample_vectors"], rows["static"]["sample_vectors"],
            static.encode(names))
    print(json.dumps({"entities_file": str(args.entities), **report}, indent=1))


def run_all(paths: dict, texts: list[str], sample: np.ndarray) -> dict:
    """Each path on the sample and, the ONNX ones, on all the entities when that is more."""
    rows = {}
    sampled = [texts[i] for i in sample]
    for name, (threads, encode) in paths.items():
        with torch_threads(threads):
            vectors, seconds, cpu = timed(encode, sampled)
            row = {"threads": threads, "sample_vectors": vectors, "sample_s": seconds,
                   "cpu_s": cpu}
            if name.startswith("onnx") and len(sample) < len(texts):
                _, row["all_s"], _ = timed(encode, texts)
                row["all_rate"] = len(texts) / row["all_s"]
        row["rate"] = len(sample) / seconds
        rows[name] = row
        print(json.dumps({name: round(row["rate"], 1)}), file=sys.stderr, flush=True)
    return rows


def summary(row: dict, reference: dict | None = None, names: list[str] | None = None,
            name_vectors: np.ndarray | None = None) -> dict:
    """Rates, the ratio to the reference's rate, and agreement with its vectors."""
    out = {"threads": row["threads"], "sample_s": round(row["sample_s"], 1),
           "cpu_s": round(row["cpu_s"], 1), "entities_per_s": round(row["rate"], 1)}
    if "all_s" in row:
        out.update(all_s=round(row["all_s"], 1), all_entities_per_s=round(row["all_rate"], 1))
    if reference is None:
        return out
    cos = (row["sample_vectors"] * reference["sample_vectors"]).sum(axis=1)
    out.update(ratio=round(row["rate"] / reference["rate"], 2),
               cpu_ratio=round(reference["cpu_s"] / row["cpu_s"], 2),
               cosine_min=round(float(cos.min()), 4),
               cosine_p1=round(float(np.percentile(cos, 1)), 4),
               cosine_mean=round(float(cos.mean()), 4),
               **linking(names, reference["sample_vectors"], row["sample_vectors"], name_vectors))
    return out


if __name__ == "__main__":
    main()

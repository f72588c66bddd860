"""entity_encode's encoding step, old and new in one run (issue 17 item 5).

    python bench/entity_encode_speed.py --entities ENTITIES.parquet [--reference-sample 5000]
        [--threads 1,2] [--batch-size 128]

Reads an ``entities`` table (a build's or an ingest's), makes the stage's texts
(``name_type_description``), exports the store's int8 ONNX model as the stage does, and times:

* ``torch`` — the reference: sentence-transformers float32 in the order of the entity ids, 128
  texts a call, one torch thread (the stage before ``entity_encode.encoder``);
* ``torch-sorted`` — the same model, shortest texts first (``encode_by_length``): what the
  sorting alone gains;
* ``onnx-T`` — the stage's ``encoder: auto`` on a CPU: the int8 export, shortest texts first, on
  T onnxruntime threads (``entity_encode.threads``).

Every path runs on a random sample of ``--reference-sample`` entities (0: all), the ONNX ones
on all of them as well. Times are wall seconds and the process's CPU seconds (on a shared host
the CPU seconds of a one-thread path are what it costs; the wall seconds include waiting). Agreement with the reference, on the sample: cosine per entity
(min, 1st percentile, mean) and name linking — each entity's name embedded as a question (the
query service's int8 encoder) and searched in the reference's and in the variant's exact index:
the share whose top-1 is the same entity in both, and the share whose top-1 is the entity itself.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.stage import torch_threads  # noqa: E402
from runtime.contract import read_table  # noqa: E402
from runtime.encoder import SentenceEncoder, encode_by_length, spec_model_dir  # noqa: E402
from runtime.question_encoder import batch_encoder  # noqa: E402
from training import entity_encode  # noqa: E402
from training.onnx_export import export  # noqa: E402

SPEC = {"model": "minilm", "query_prefix": "", "passage_prefix": ""}


def timed(encode, texts: list[str]) -> tuple[np.ndarray, float, float]:
    """(vectors, wall seconds, CPU seconds of the process: every thread's, not waiting time)."""
    started, cpu = time.perf_counter(), time.process_time()
    vectors = encode(texts)
    return vectors, time.perf_counter() - started, time.process_time() - cpu


def variants(exported: Path, threads: list[int], batch: int) -> dict:
    """name → (threads, encode(texts)) for every path compared; the reference first."""
    torch_encoder = SentenceEncoder.from_spec(SPEC, device="cpu")
    out = {"torch": (1, lambda t: torch_encoder.encode_passages(t, batch_size=batch)),
           "torch-sorted": (1, lambda t: encode_by_length(torch_encoder, t, batch))}
    for n in threads:
        onnx = batch_encoder(SPEC, "onnx", "cpu", exported, threads=n)
        out[f"onnx-{n}"] = (n, lambda t, e=onnx: encode_by_length(e, t, batch))
    return out


def linking(names: list[str], reference: np.ndarray, vectors: np.ndarray,
            queries: np.ndarray) -> dict:
    """Top-1 of each name in both exact indexes: same entity, and the entity itself."""
    import faiss

    tops = []
    for table in (reference, vectors):
        index = faiss.IndexFlatIP(table.shape[1])
        index.add(table)
        tops.append(index.search(queries, 1)[1][:, 0])
    own = np.arange(len(names))
    return {"top1_same": round(float(np.mean(tops[0] == tops[1])), 4),
            "top1_self_reference": round(float(np.mean(tops[0] == own)), 4),
            "top1_self": round(float(np.mean(tops[1] == own)), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entities", required=True, type=Path)
    ap.add_argument("--reference-sample", type=int, default=0,
                    help="entities the torch reference encodes (a random sample; 0: all)")
    ap.add_argument("--threads", default="1,2", help="onnxruntime threads to time, comma-separated")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    table = read_table(args.entities, "entities", columns=["id", "key", "name", "types",
                                                           "description"])
    _, texts, _ = entity_encode.entity_texts(table, "name_type_description")
    _, names, _ = entity_encode.entity_texts(table, "name")
    n = len(texts)
    sample = np.arange(n)
    if 0 < args.reference_sample < n:
        sample = np.sort(np.random.default_rng(args.seed).choice(n, args.reference_sample,
                                                                 replace=False))
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        exported = Path(tmp) / "query_encoder.onnx"
        export(spec_model_dir(SPEC), exported, "int8")
        export_s = time.perf_counter() - started
        paths = variants(exported, [int(t) for t in args.threads.split(",")], args.batch_size)
        queries = batch_encoder(SPEC, "onnx", "cpu", exported, threads=1)
        rows = run_all(paths, texts, sample, args.batch_size)
        name_vectors = queries.encode_queries([names[i] for i in sample], batch_size=64)
    reference = rows.pop("torch")
    report = {"entities": n, "reference_sample": len(sample), "export_s": round(export_s, 1),
              "torch": summary(reference), "variants": {}}
    for name, row in rows.items():
        report["variants"][name] = summary(row, reference, [names[i] for i in sample],
                                           name_vectors)
    print(json.dumps({"entities_file": str(args.entities), **report}, indent=1))


def run_all(paths: dict, texts: list[str], sample: np.ndarray, batch: int) -> dict:
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

"""The question encoder with and without torch: latency, memory and vector deviation.

    python -m bench.query_encoder --questions ../shared/data/pathquestion --limit 200

The encoders of ``runtime.question_encoder.query_encoder`` — ``onnx`` (runtime/onnx_bert.py, on
the model ``training/onnx_export.py`` exports: ``--onnx`` int8 and fp32) and ``torch``
(sentence-transformers) — each in a fresh subprocess (the onnx ones with torch, transformers and
sentence-transformers blocked from import), on the same questions: PathQuestion
test questions (``--questions``: a PathQuestion directory or test.txt; else generated strings)
and their topic-masked form (``question_text.mask_topic``), as ``Runtime`` embeds them. Per call:
``encode_queries([plain])`` and ``encode_queries([masked, plain])`` (one batch), p50 / p99 over
all questions after ``--warmup`` untimed ones. Memory: resident set (VmRSS) of the fresh process
after loading the encoder and one encode, and its peak (VmHWM) after the run. Deviation: max
|onnx − torch| and min cosine over every vector. torch runs with 1 thread (the runtime's
``query.threads``), onnx with OpenBLAS at one thread. Prints a markdown table, the ratios and the
command.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lokg.runtime.encoder import spec_model_dir
from lokg.testing.cli import blocking
from lokg.training.onnx_export import export

BLOCK_TORCH = blocking("torch", "transformers", "sentence_transformers")


def load_questions(source: str | None, limit: int) -> list[tuple[str, str]]:
    """(plain, masked) pairs: PathQuestion test questions (topic = the path's first entity)
    spread over the file(s), else generated PathQuestion-like strings."""
    from lokg.runtime.question_text import mask_topic

    files = []
    if source:
        path = Path(source)
        files = [path] if path.is_file() else sorted(path.glob("*/test.txt")) or \
            sorted(path.glob("test.txt"))
        if not files:
            raise SystemExit(f"{path}: no PathQuestion test.txt there")
    rows = []
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            parts = line.split("\t")
            if len(parts) >= 3:
                rows.append((parts[0], parts[2].split("#")[0]))
    if not rows:  # no data: generated questions of the same shape
        rels = ["nationality", "spouse", "place of birth", "children", "profession", "gender"]
        rows = [(f"what is the {rels[i % 6]} of person_{i}_of_house-{i * 7 % 13} 's "
                 f"{rels[(i // 6) % 6]} ?", f"person_{i}_of_house-{i * 7 % 13}")
                for i in range(limit)]
    picked = [rows[int(i)] for i in np.linspace(0, len(rows) - 1, min(limit, len(rows)))]
    return [(q, mask_topic(q, [topic, topic.replace("_", " ")])) for q, topic in picked]


def memory_mib() -> dict:
    out = {}
    with open(f"/proc/{os.getpid()}/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out


def worker(backend: str, spec: dict, pairs: list[tuple[str, str]], warmup: int,
           out: Path, exported: Path | None = None) -> None:
    """One fresh process: load, one encode, memory, then the timed calls; vectors to ``out``."""
    if backend == "onnx":  # the query service's case: torch not even importable
        exec(BLOCK_TORCH, {})
    else:
        import torch

        torch.set_num_threads(1)
    from lokg.runtime.question_encoder import query_encoder

    started = time.perf_counter()
    enc = query_encoder(spec, backend, exported=exported)
    enc.encode_queries([pairs[0][0]])
    load_ms = (time.perf_counter() - started) * 1000
    rss_loaded = memory_mib()["VmRSS"]
    for plain, masked in pairs[:warmup]:
        enc.encode_queries([plain]), enc.encode_queries([masked, plain])
    one, two, cpu, vectors = [], [], [], []
    for plain, masked in pairs:
        t0, c0 = time.perf_counter(), time.process_time()
        v1 = enc.encode_queries([plain])
        t1, c1 = time.perf_counter(), time.process_time()
        v2 = enc.encode_queries([masked, plain])
        t2 = time.perf_counter()
        one.append((t1 - t0) * 1000)
        two.append((t2 - t1) * 1000)
        cpu.append((c1 - c0) * 1000)
        vectors += [v1[0], v2[0], v2[1]]
    heavy = sorted(m for m in ("torch", "transformers", "sentence_transformers")
                   if m in sys.modules)
    np.save(out.with_suffix(".npy"), np.stack(vectors))
    out.write_text(json.dumps({
        "backend": enc.backend, "load_ms": load_ms, "rss_loaded": rss_loaded,
        "rss_peak": memory_mib()["VmHWM"], "one": one, "two": two, "cpu": cpu,
        "heavy_modules": heavy}))


def run_worker(backend: str, blas: str, args, pairs_file: Path, tmp: Path) -> dict:
    """The worker in a fresh interpreter (for ``onnx``, ``blas`` names the quantization of the
    model exported into ``tmp``, run with OpenBLAS at one thread)."""
    out = tmp / f"{backend}-{blas}.json"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if backend == "onnx":
        env["OPENBLAS_NUM_THREADS"] = "1"
    exported = ["--exported", str(tmp / f"{blas}.onnx")] if backend == "onnx" else []
    subprocess.run([sys.executable, __file__, "--worker", backend, "--pairs-file",
                    str(pairs_file), "--spec", args.spec or "", "--warmup", str(args.warmup),
                    "--out", str(out), *exported], env=env, check=True)
    result = json.loads(out.read_text())
    result["vectors"] = np.load(out.with_suffix(".npy"))
    result["blas"] = blas
    return result


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def table(results: list[dict], reference: np.ndarray) -> list[str]:
    rows = ["| encoder | OPENBLAS threads | load (ms) | RSS loaded / peak (MiB) "
            "| 1 text p50 / p99 (ms) | 2 texts p50 / p99 (ms) | 1 text CPU p50 (ms) "
            "| max abs dev | min cosine |",
            "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    for r in results:
        v = r["vectors"]
        dev = float(np.abs(v - reference).max())
        cos = float((v * reference).sum(axis=1).min())
        label = (f"ONNX {r['blas']} (runtime/onnx_bert.py)" if r["backend"] == "onnx"
                 else "sentence-transformers (torch, 1 thread)")
        rows.append(f"| {label} | {r['blas']} | {r['load_ms']:.0f} "
                    f"| {r['rss_loaded']:.0f} / {r['rss_peak']:.0f} "
                    f"| {pct(r['one'], 50):.2f} / {pct(r['one'], 99):.2f} "
                    f"| {pct(r['two'], 50):.2f} / {pct(r['two'], 99):.2f} "
                    f"| {pct(r['cpu'], 50):.2f} | {dev:.1e} | {cos:.7f} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", help="a PathQuestion directory (its */test.txt) or file")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2,
                        help="every configuration runs once per round, in turn (load drifts)")
    parser.add_argument("--spec", help="an encoder.json (default: minilm, no prefixes)")
    parser.add_argument("--onnx", default="int8,fp32",
                        help="ONNX exports to run (training/onnx_export.py); '' for none")
    parser.add_argument("--worker", choices=("torch", "onnx"), help=argparse.SUPPRESS)
    parser.add_argument("--exported", help=argparse.SUPPRESS)
    parser.add_argument("--pairs-file", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text()) if args.spec else {"model": "minilm"}
    if args.worker:
        pairs = [tuple(p) for p in json.loads(Path(args.pairs_file).read_text())]
        worker(args.worker, spec, pairs, args.warmup, Path(args.out),
               Path(args.exported) if args.exported else None)
        return 0
    pairs = load_questions(args.questions, args.limit)
    with tempfile.TemporaryDirectory() as tmp:
        pairs_file = Path(tmp) / "pairs.json"
        pairs_file.write_text(json.dumps(pairs))
        load_before = os.getloadavg()[0]
        runs = [("torch", "default")]
        for quantization in filter(None, args.onnx.split(",")):
            export(spec_model_dir(spec), Path(tmp) / f"{quantization}.onnx", quantization)
            runs.append(("onnx", quantization))
        rounds = [[run_worker(b, t, args, pairs_file, Path(tmp)) for b, t in runs]
                  for _ in range(args.rounds)]
    report([merge(same) for same in zip(*rounds)], pairs, spec, load_before)
    return 0


def merge(runs: list[dict]) -> dict:
    """One configuration over several rounds: timings pooled, the worst load and memory."""
    out = dict(runs[0])
    for key in ("one", "two", "cpu"):
        out[key] = [v for r in runs for v in r[key]]
    for key in ("load_ms", "rss_loaded", "rss_peak"):
        out[key] = max(r[key] for r in runs)
    out["heavy_modules"] = sorted({m for r in runs for m in r["heavy_modules"]})
    return out


def report(results: list[dict], pairs, spec: dict, load_before: float) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(spec_model_dir(spec) / "tokenizer.json"))
    tok.no_padding()
    tokens = [len(tok.encode(q).ids) for q, _ in pairs]
    torch_run, onnx_runs = results[0], results[1:]
    print(f"{len(pairs)} questions (+ masked form), {np.mean(tokens):.1f} tokens mean, "
          f"max {max(tokens)}; {os.cpu_count()} CPUs, load average {load_before:.1f} → "
          f"{os.getloadavg()[0]:.1f}; heavy modules in the ONNX processes: "
          f"{sorted({m for r in onnx_runs for m in r['heavy_modules']}) or 'none'}\n")
    print("\n".join(table(results, torch_run["vectors"])))
    for r in onnx_runs:
        print(f"\ntorch / ONNX {r['blas']}: 1 text p50 "
              f"{pct(torch_run['one'], 50) / pct(r['one'], 50):.1f}x, 2 texts p50 "
              f"{pct(torch_run['two'], 50) / pct(r['two'], 50):.1f}x, RSS loaded "
              f"{torch_run['rss_loaded'] / r['rss_loaded']:.1f}x, 1 text CPU p50 "
              f"{pct(torch_run['cpu'], 50) / pct(r['cpu'], 50):.1f}x")
    print("\ncommand: python -m bench.query_encoder " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    raise SystemExit(main())

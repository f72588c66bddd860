"""Benchmark the synthetic KG generator: triples/s, output bytes and peak RSS per size.

    python -m bench.synth_throughput                              # 10^5, 10^6, 10^7 triples
    python -m bench.synth_throughput --triples 100000 1000000 --gzip --json synth.json

Each size runs ``pipeline.synth.generate`` once in a fresh process (so ``ru_maxrss`` is that
size's own peak) into a temporary directory that is deleted afterwards. The time covers the
whole call: N-Triples, TSV, questions, families and manifest. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import resource
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def run_one(n_triples: int, seed: int, gzip: bool, n_questions: int, tmp: str | None) -> dict:
    """Generate one KG and measure it (runs in its own process)."""
    from lokg.pipeline.synth import generate

    with tempfile.TemporaryDirectory(dir=tmp, prefix="lokg-synth-bench-") as out:
        started = time.perf_counter()
        manifest = generate(out, n_triples=n_triples, seed=seed, gzip=gzip,
                            n_questions=n_questions)
        seconds = time.perf_counter() - started
        size = sum(p.stat().st_size for p in Path(out).iterdir())
    return {
        "triples": n_triples,
        "entities": manifest["counts"]["entities"],
        "seconds": round(seconds, 3),
        "triples_per_s": round(n_triples / seconds),
        "bytes": size,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def table(rows: list[dict]) -> str:
    lines = ["| triples | entities | seconds | triples/s | output | peak RSS |",
             "|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        lines.append(f"| {r['triples']:,} | {r['entities']:,} | {r['seconds']:.1f} | "
                     f"{r['triples_per_s']:,} | {r['bytes'] / 2**20:,.1f} MiB | "
                     f"{r['peak_rss_mib']:,.0f} MiB |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triples", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000],
                        help="sizes to generate (default: 100000 1000000 10000000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gzip", action="store_true", help="write kg.nt.gz")
    parser.add_argument("--questions", type=int, default=1000, help="questions per KG")
    parser.add_argument("--tmp", help="directory for the temporary output (default: system tmp)")
    parser.add_argument("--json", dest="json_path", help="also write the results to this file")
    args = parser.parse_args(argv)
    if min(args.triples) < 100:
        parser.error("--triples sizes must be at least 100")

    rows = []
    for n in args.triples:
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
            rows.append(pool.submit(run_one, n, args.seed, args.gzip, args.questions,
                                    args.tmp).result())
        print(f"{n:,} triples: {rows[-1]['seconds']:.1f} s", file=sys.stderr, flush=True)
    print(table(rows))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({
            "benchmark": "synth_throughput",
            "params": {"seed": args.seed, "gzip": args.gzip, "questions": args.questions},
            "machine": {"python": platform.python_version(), "cpu": platform.processor() or
                        platform.machine()},
            "results": rows,
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One small float32 product (60×384 by 384×225: question spans against relation names) timed
2,000 times, as the query path makes it: run it with and without OPENBLAS_NUM_THREADS=1 to
see what OpenBLAS's thread per core costs on a busy host (docs/BENCHMARKS.md, "BLAS threads
on the query path").

    python -m bench.blas_threads; OPENBLAS_NUM_THREADS=1 python -m bench.blas_threads
"""

import time

import numpy as np


def main() -> None:
    rng = np.random.default_rng(0)
    spans = rng.random((60, 384), dtype=np.float32)
    relations = rng.random((225, 384), dtype=np.float32)
    times = []
    for _ in range(2000):
        started = time.perf_counter()
        spans @ relations.T
        times.append((time.perf_counter() - started) * 1e3)
    p50, p90, p99, top = np.percentile(times, [50, 90, 99, 100])
    print(f"ms p50 {p50:.3f} p90 {p90:.3f} p99 {p99:.3f} max {top:.3f}")


if __name__ == "__main__":
    main()

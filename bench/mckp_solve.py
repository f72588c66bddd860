"""Benchmark the exact MCKP DP of ITTC (its step 3): N triples × K=3 granularities, budget B.

    python -m bench.mckp_solve                      # N=20, B=2048, realistic costs
    python -m bench.mckp_solve --worst              # compact cost 0: the DP spans all B+1 cells
    python -m bench.mckp_solve --solver greedy --budget 8192

Each repeat draws a fresh random instance (seeded) and times one ``solve_mckp`` call with
``time.perf_counter_ns`` (``--clock cpu``: process CPU time, which ignores preemption),
GC disabled. Prints p50 / p99 / mean / max in milliseconds.
Target: ≤ 1 ms for N = 20, B = 2048 (no percentile named).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time

import numpy as np

from lokg.runtime.ittc import BETA, LAMBDA_BOOST, solve_greedy, solve_mckp


def instance(rng: np.random.Generator, n: int, worst: bool) -> tuple[np.ndarray, np.ndarray]:
    """Token costs like real renderings (compact < balanced < verbose) and ITTC values."""
    compact = np.zeros(n, dtype=np.int64) if worst else rng.integers(20, 61, n)
    balanced = compact + rng.integers(20, 81, n)
    verbose = balanced + rng.integers(40, 161, n)
    costs = np.stack([compact, balanced, verbose], axis=1)
    entropy = rng.uniform(0.0, 6.0, n)
    alpha = np.where(rng.random(n) < 0.3, LAMBDA_BOOST, 1.0)
    values = np.asarray(BETA)[None, :] * (alpha * entropy)[:, None]
    return costs, values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="triples per instance (default 20)")
    parser.add_argument("--budget", type=int, default=2048, help="token budget B (default 2048)")
    parser.add_argument("--repeats", type=int, default=2000, help="timed solves (default 2000)")
    parser.add_argument("--warmup", type=int, default=50, help="untimed solves first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worst", action="store_true",
                        help="compact cost 0, so the DP spans the whole budget axis")
    parser.add_argument("--solver", choices=("dp", "greedy"), default="dp")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall: perf_counter; cpu: process CPU time (ignores preemption on "
                             "a shared machine)")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)
    if args.n < 1 or args.budget < 1 or args.repeats < 1:
        parser.error("--n, --budget and --repeats must be positive")

    solve = solve_mckp if args.solver == "dp" else solve_greedy
    rng = np.random.default_rng(args.seed)
    problems = [instance(rng, args.n, args.worst) for _ in range(args.warmup + args.repeats)]
    clock = time.perf_counter_ns if args.clock == "wall" else time.process_time_ns
    times_ms = []
    gc.disable()
    try:
        for i, (costs, values) in enumerate(problems):
            start = clock()
            solve(costs, values, args.budget)
            elapsed = (clock() - start) / 1e6
            if i >= args.warmup:
                times_ms.append(elapsed)
    finally:
        gc.enable()
    t = np.array(times_ms)
    result = {
        "solver": args.solver, "n": args.n, "k": 3, "budget": args.budget,
        "worst": args.worst, "repeats": args.repeats, "clock": args.clock,
        "p50_ms": float(np.percentile(t, 50)), "p99_ms": float(np.percentile(t, 99)),
        "mean_ms": float(t.mean()), "max_ms": float(t.max()),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"MCKP {args.solver}: N={args.n} K=3 B={args.budget}"
              f"{' (worst case: full budget axis)' if args.worst else ''}, {args.repeats} solves, "
              f"{args.clock} clock")
        print(f"  p50 {result['p50_ms']:.3f} ms   p99 {result['p99_ms']:.3f} ms   "
              f"mean {result['mean_ms']:.3f} ms   max {result['max_ms']:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Two scos_merge ``merge_log`` tables: the same merges, and how far their floats differ.

    python -m bench.merge_log_diff BEFORE/merge_log.parquet AFTER/merge_log.parquet

For a change that recomputes the signals by other arithmetic (the same rules): whether both
tables merge the same pairs into the same members in the same order, and per step that differs
the absolute difference of each float column (sim, nmi, jaccard, cos, theta, loss) beside the
step's margin sim − θ (a difference far below the margin cannot change a decision). Exit code
1 when the merges differ.
"""

from __future__ import annotations

import argparse
import sys

FLOATS = ("sim", "nmi", "jaccard", "cos", "theta", "loss")
MERGE = ("step", "left", "right", "members")


def compare(before: list[dict], after: list[dict]) -> dict:
    """Same merges (``MERGE`` columns, row by row) and the float differences per step."""
    same = len(before) == len(after) and all(
        [a[k] for k in MERGE] == [b[k] for k in MERGE] for a, b in zip(before, after))
    steps = []
    for a, b in zip(before, after):
        diff = {k: abs(a[k] - b[k]) for k in FLOATS if a[k] != b[k]}
        if diff:
            steps.append({"step": a["step"], "margin": a["sim"] - a["theta"], **diff})
    worst = max((v for s in steps for k, v in s.items() if k in FLOATS), default=0.0)
    return {"rows": [len(before), len(after)], "same_merges": same, "steps": steps,
            "max_abs_diff": worst}


def main(argv: list[str] | None = None) -> int:
    import pyarrow.parquet as pq

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    args = parser.parse_args(argv)
    result = compare(*(pq.read_table(p).to_pylist() for p in (args.before, args.after)))
    print(f"rows {result['rows']}, same merges: {result['same_merges']}, "
          f"max |diff| {result['max_abs_diff']:.2e}")
    for step in result["steps"]:
        floats = ", ".join(f"{k} {step[k]:.1e}" for k in FLOATS if k in step)
        print(f"  step {step['step']}: {floats} (margin sim - theta {step['margin']:.4f})")
    return 0 if result["same_merges"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Two tables of the same rows up to the last bits of their floats: which differ, and by how much.

    python -m bench.table_diff BEFORE AFTER --key r_i,r_j      # relation_pairs
    python -m bench.table_diff BEFORE/merge_log.parquet AFTER/merge_log.parquet --key step

For a change that computes the same rules by other arithmetic (another engine's ``ln``, another
order of a sum): each argument is a Parquet file or a directory of part files; rows are matched
by ``--key``. Prints whether both have the same keys, then per column the rows that differ and,
for a float column, the largest absolute difference; for a ``merge_log`` (columns ``sim`` and
``theta``) also the smallest margin sim − θ of a differing step, which a difference far below
cannot have changed. Exit code 1 when the keys or a column that is not a float differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def read_rows(path: Path, key: list[str]) -> dict[tuple, dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lokg.pipeline.refresh import parquet_parts

    rows = pa.concat_tables([pq.read_table(f) for f in parquet_parts(path)]).to_pylist()
    return {tuple(row[k] for k in key): row for row in rows}


def compare(before: dict[tuple, dict], after: dict[tuple, dict]) -> dict:
    """Same keys, and per column the differing rows (count, largest float difference)."""
    columns: dict[str, dict] = {}
    margins = []
    for k in sorted(set(before) & set(after)):
        a, b = before[k], after[k]
        changed = [c for c in a if a[c] != b.get(c)]
        for c in changed:
            col = columns.setdefault(c, {"rows": 0, "float": isinstance(a[c], float),
                                         "max_abs_diff": 0.0})
            col["rows"] += 1
            if col["float"] and isinstance(b.get(c), float):
                col["max_abs_diff"] = max(col["max_abs_diff"], abs(a[c] - b[c]))
            else:
                col["float"] = False
        if changed and {"sim", "theta"} <= set(a):
            margins.append(a["sim"] - a["theta"])
    return {"rows": [len(before), len(after)], "same_keys": set(before) == set(after),
            "columns": columns, "min_margin": min(margins, default=None)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--key", required=True, help="comma-separated key columns")
    args = parser.parse_args(argv)
    key = args.key.split(",")
    result = compare(read_rows(args.before, key), read_rows(args.after, key))
    print(f"rows {result['rows']}, same keys: {result['same_keys']}")
    for name, col in result["columns"].items():
        extra = f", max |diff| {col['max_abs_diff']:.2e}" if col["float"] else " (not a float)"
        print(f"  {name}: {col['rows']} rows differ{extra}")
    if result["min_margin"] is not None:
        print(f"  smallest margin sim - theta of a differing step: {result['min_margin']:.4f}")
    exact = all(col["float"] for col in result["columns"].values())
    return 0 if result["same_keys"] and exact else 1


if __name__ == "__main__":
    sys.exit(main())

"""What a refresh's ingest cannot skip: reading every dump file once to find which
lines changed — the floor under any incremental ingest of a dump whose every file changed.

    python -m bench.ingest_floor --dump /work/shared/data/fb15k237 --edited W/edited \\
        --repetitions 3

Per dump file (both versions, the same file names: ``edited`` is the next version of ``dump``):
read the bytes (gzip decompressed), split them into lines, hash each line to 64 bits (pandas'
``hash_array``), and diff the two versions' lines as multisets (``common.stage.changed_rows``):
the lines added and removed — all a refresh needs to look at, were the previous build's
parsed rows kept by line hash. Wall and CPU seconds (this process: no Spark, no JVM) of the
edited dump's read and hash (what a refresh does; the previous hashes would be stored by the
previous build) and of the diff, the best of ``--repetitions``; the files' bytes and lines, and
the changed lines. Compare with the ingest row of bench/refresh_scale.py's table for the same
dumps (the Spark ingest reads, parses, numbers and writes every line).
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import numpy as np


def line_hashes(path: Path) -> tuple[np.ndarray, int]:
    """64-bit hash of each line of a file (gzip read through), and the bytes read."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pandas.util import hash_array

    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    lines = pc.split_pattern(pa.array([data.decode("utf-8", "replace")], pa.large_string()),
                             "\n")[0].values
    if len(lines) and not lines[-1].as_py():  # the text after the last newline: none
        lines = lines[:-1]
    return hash_array(lines.to_numpy(zero_copy_only=False)).view(np.int64), len(data)


def dump_files(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_file() and not p.name.startswith("."))


def timed(fn, repetitions: int):
    """(result, best wall s, best CPU s) of ``fn()`` over the repetitions."""
    best_wall = best_cpu = float("inf")
    for _ in range(repetitions):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return result, round(best_wall, 3), round(best_cpu, 3)


def measure(dump: Path, edited: Path, repetitions: int) -> dict:
    from lokg.common.stage import changed_rows

    names = [p.name for p in dump_files(edited)]
    previous = {n: line_hashes(dump / n)[0] for n in names}
    hashed, read_wall, read_cpu = timed(lambda: {n: line_hashes(edited / n) for n in names},
                                        repetitions)

    def diff():
        return {n: changed_rows(hashed[n][0][:, None], previous[n][:, None]) for n in names}

    changed, diff_wall, diff_cpu = timed(diff, repetitions)
    files = {n: {"bytes": hashed[n][1], "lines": len(hashed[n][0]),
                 "changed_distinct_lines": len(changed[n]), "unchanged": not len(changed[n])}
             for n in names}
    return {"dump": str(dump), "edited": str(edited), "files": files,
            "bytes": sum(f["bytes"] for f in files.values()),
            "lines": sum(f["lines"] for f in files.values()),
            "changed_distinct_lines": sum(f["changed_distinct_lines"] for f in files.values()),
            "read_and_hash": {"wall_s": read_wall, "cpu_s": read_cpu},
            "diff": {"wall_s": diff_wall, "cpu_s": diff_cpu}, "repetitions": repetitions}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", type=Path, required=True, help="the previous version")
    ap.add_argument("--edited", type=Path, required=True, help="the next version")
    ap.add_argument("--repetitions", type=int, default=3)
    args = ap.parse_args()
    print(json.dumps(measure(args.dump, args.edited, args.repetitions), indent=2))


if __name__ == "__main__":
    main()

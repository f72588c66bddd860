"""What ingest counts and refuses: the parsed lines by kind and reason, their exact line
numbers, the malformed ceiling and the dump files Spark cannot read."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lokg.common.stage import StageError
from lokg.spark_jobs import formats as fm

TEXT_LIMIT = 500  # characters of a malformed line kept in the quarantine


class IngestError(StageError):
    """The dump cannot be ingested (missing, unreadable format, too many malformed lines)."""


class LineCounts:
    """The parsed lines counted by kind, the malformed ones by reason, and whether some
    literal needs the Python unescape (``\\U`` escapes)."""

    def __init__(self, counts: dict):
        self.kinds: dict[str, int] = {}
        self.reasons: dict[str, int] = {}
        self.python = False
        for (kind, reason, esc), n in counts.items():
            self.python = self.python or esc == fm.ESC_PYTHON
            self.kinds[kind] = self.kinds.get(kind, 0) + n
            if kind == fm.MALFORMED:
                self.reasons[reason] = self.reasons.get(reason, 0) + n
        self.lines = sum(n for k, n in self.kinds.items() if k != fm.SKIP)
        self.malformed = self.kinds.get(fm.MALFORMED, 0)
        self.share = self.malformed / self.lines if self.lines else 0.0


def refuse(counted: LineCounts, dump, plan: fm.Plan, ceiling: float, path: Path) -> None:
    """Refuse a dump over the malformed ceiling (its quarantine written at ``path``) or with
    no statement at all."""
    if counted.share > ceiling:
        raise IngestError(
            f"ingest of {dump}: {counted.malformed} of {counted.lines} lines are malformed "
            f"(share {counted.share:.4%}), above the ceiling {ceiling:.4%} set by "
            f"ingest.max_malformed_share; see the quarantine at {path} "
            f"(reasons: {dict(sorted(counted.reasons.items(), key=lambda kv: -kv[1]))})",
            kept=[path],
        )
    if counted.lines == 0:
        raise IngestError(f"ingest of {dump}: no statements in {[str(f) for f in plan.files]}")


def local_path(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("file", "") else uri


_FAILED_READ = re.compile(r"\[FAILED_READ_FILE\.\w+\] Encountered error while reading file "
                          r"(\S+?)\.?\s")
_CAUSE = re.compile(r"Caused by: ([\w.$]+(?:: [^\n]*)?)")


def unreadable_file(exc: Exception) -> str | None:
    """The dump file Spark failed to read and why, as ``<file>: <first cause>`` (a truncated
    or corrupt .gz, an I/O error), else None. Spark reports it as a Java exception whose text
    holds a 100-line stack; the user needs the file and the first cause only."""
    text = str(exc)
    found = _FAILED_READ.search(text)
    if found is None:
        return None
    cause = _CAUSE.search(text)
    why = cause.group(1).strip() if cause else "read error"
    return f"{local_path(found.group(1))}: {why} (truncated or corrupt file?)"


def number_lines(spark: SparkSession, parsed: DataFrame, plan: fm.Plan
                  ) -> tuple[DataFrame, dict[tuple[str, str | None, int], int]]:
    """Exact (file_idx, file, line) for every parsed row; row counts by (kind, reason, escaped)."""
    stats = parsed.groupBy("fp", "bs", "kind", "reason", "escaped").agg(
        F.count("*").alias("n"), F.min("mid").alias("m0")
    ).collect()
    index = {str(f): i for i, f in enumerate(plan.files)}
    blocks: dict[tuple[str, int], list[int]] = {}  # (fp, bs) -> [rows, min mid]
    counts: dict[tuple[str, str | None, int], int] = {}
    for row in stats:
        block = blocks.setdefault((row["fp"], row["bs"]), [0, row["m0"]])
        block[0] += row["n"]
        block[1] = min(block[1], row["m0"])
        group = (row["kind"], row["reason"], row["escaped"])
        counts[group] = counts.get(group, 0) + row["n"]
    by_file: dict[str, list[tuple[int, int, int]]] = {}
    for (fp, bs), (n, m0) in blocks.items():
        by_file.setdefault(fp, []).append((bs, n, m0))
    rows = []
    for fp, parts in by_file.items():
        local = local_path(fp)
        if local not in index:
            raise IngestError(f"internal: Spark read {fp}, which is not one of {list(index)}")
        before = 0
        for bs, n, m0 in sorted(parts):
            rows.append((fp, bs, index[local], local, before - m0 + 1))
            before += n
    table = spark.createDataFrame(rows, "fp string, bs long, file_idx int, file string, base long")
    numbered = parsed.join(F.broadcast(table), ["fp", "bs"]).withColumn(
        "line", F.col("mid") + F.col("base")
    )
    return numbered, counts

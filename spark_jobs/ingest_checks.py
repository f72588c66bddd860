"""What ingest counts and refuses: the parsed lines by kind and reason, and the malformed
ceiling."""

from __future__ import annotations

from pathlib import Path

from lokg.common.stage import StageError
from lokg.spark_jobs import formats as fm

TEXT_LIMIT = 500  # characters of a malformed line kept in the quarantine


class IngestError(StageError):
    """The dump cannot be ingested (missing, unreadable format, too many malformed lines)."""


class LineCounts:
    """The parsed lines counted by kind, the malformed ones by reason (``counts``: rows by
    (kind, reason))."""

    def __init__(self, counts: dict[tuple[str, str | None], int]):
        self.kinds: dict[str, int] = {}
        self.reasons: dict[str, int] = {}
        for (kind, reason), n in counts.items():
            self.kinds[kind] = self.kinds.get(kind, 0) + n
            if kind == fm.MALFORMED:
                self.reasons[reason] = self.reasons.get(reason, 0) + n
        self.all_lines = sum(self.kinds.values())
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

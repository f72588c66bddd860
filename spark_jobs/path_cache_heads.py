"""The heads stage ``path_cache`` searches (spark_jobs/path_cache.py), chosen in the build's SQL
engine: every entity with an out-edge, or a hot set (module doc of ``spark_jobs.path_cache``).

The rules are SQL over the registered tables ``edges``, ``node_gain`` and ``entities``; the two
inputs that are files a person writes — a hot-set file of keys and a query log — are read here,
on the driver, into small Arrow tables the engine joins (one reading for both engines). A query
log is read as lines split at \\n, \\r or \\r\\n; a line that is not a JSON object, or a
``linked`` / ``details.linked`` that is not a list, links nothing; an entry of such a list that
is an object contributes its ``key`` when that is a string (else a null key, which makes the
line an answer but counts no head); a directory is read recursively, skipping names that start
with ``.`` or ``_``, as Hadoop's listing does.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa

from lokg.common.stage import StageError
from lokg.spark_jobs.engine import Engine
from lokg.spark_jobs.settings import HEAD_SELECTORS

#: Out-degree (inverse edges included: the first hops a search can take) of each head.
DEGREES = "SELECT s AS head, count(*) AS degree FROM edges GROUP BY s"


def hot_size(cfg: Mapping, heads_all: int) -> int:
    """Heads in the hot set: ``hot_share`` of ``heads_all`` rounded up, or ``hot_count``, at
    most ``heads_all``."""
    if cfg["hot_count"] is not None:
        return min(int(cfg["hot_count"]), heads_all)
    return min(math.ceil(float(cfg["hot_share"]) * heads_all - 1e-9), heads_all)


def hot_keys(heads_file: str) -> list[tuple[int, str]]:
    """(line number, key) of each key a hot-set file lists; StageError when it lists none."""
    path = Path(heads_file)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise StageError(f"path_cache.heads: cannot read {path} ({exc.strerror})") from None
    keys = [(i, line.strip()) for i, line in enumerate(lines, 1) if line.strip()]
    if not keys:
        raise StageError(f"path_cache.heads: {path} lists no entity key")
    return keys


def select_heads(engine: Engine, cfg: Mapping) -> tuple[dict, int]:
    """Table ``heads`` (column ``head``, materialised) of the heads to cache; returns what the
    report says about them and the number of all heads (entities with an out-edge)."""
    engine.view("degrees", DEGREES, materialise=True)
    heads_all = int(engine.fetch("SELECT count(*) AS n FROM degrees").column("n")[0].as_py())
    by = cfg["heads"]
    if by == "all":
        engine.view("heads", "SELECT head FROM degrees", materialise=True)
        return {"head_source": "all entities with out-edges", "hot_set": None}, heads_all
    if by not in HEAD_SELECTORS:
        _listed_heads(engine, str(by))
        return {"head_source": str(by), "hot_set": {"file": str(by)}}, heads_all
    n = hot_size(cfg, heads_all)
    info: dict = {"selector": by, "share": cfg["hot_share"], "count": cfg["hot_count"],
                  "requested": n}
    ranked, what = _ranked(engine, cfg, info)
    engine.view("heads", f"SELECT head FROM ({ranked}) ORDER BY score DESC, head LIMIT {n}",
                materialise=True)
    size = (f"{cfg['hot_share']:g} of {heads_all:,}" if cfg["hot_share"] is not None
            else f"{cfg['hot_count']:,}")
    return {"head_source": f"top {size} heads by {what}", "hot_set": info}, heads_all


def _ranked(engine: Engine, cfg: Mapping, info: dict) -> tuple[str, str]:
    """SQL of (head, score) for a hot-set selector, and the score in words."""
    by = cfg["heads"]
    if by == "degree":
        return "SELECT head, CAST(degree AS DOUBLE) AS score FROM degrees", "out-degree in edges"
    if by == "mu":  # no μ (or NaN): last
        return ("SELECT d.head, CASE WHEN g.mu IS NULL OR isnan(g.mu) THEN CAST('-inf' AS DOUBLE) "
                "ELSE CAST(g.mu AS DOUBLE) END AS score "
                "FROM degrees d LEFT JOIN node_gain g ON g.id = d.head"), "node gain mu"
    counts, facts = log_counts(str(cfg["query_log"]))
    engine.register_arrow("log_counts", counts)
    unknown = engine.fetch("SELECT count(*) AS n FROM log_counts c LEFT JOIN entities e "
                           "ON e.key = c.key WHERE e.id IS NULL").column("n")[0].as_py()
    info.update(facts, log_unknown_keys=int(unknown), query_log=str(cfg["query_log"]))
    return ("SELECT e.id AS head, CAST(c.score AS DOUBLE) AS score FROM log_counts c "
            "JOIN entities e ON e.key = c.key JOIN degrees d ON d.head = e.id"), \
        f"answers linking them in {cfg['query_log']}"


def _listed_heads(engine: Engine, heads_file: str) -> None:
    """Table ``heads``: the entity ids of the keys a hot-set file lists; StageError naming the
    first unknown keys by line."""
    keys = hot_keys(heads_file)
    engine.register_arrow("listed", pa.table({"line": [line for line, _ in keys],
                                              "key": [key for _, key in keys]}))
    unknown = engine.fetch("SELECT l.line, l.key FROM listed l LEFT JOIN entities e "
                           "ON e.key = l.key WHERE e.id IS NULL ORDER BY l.line LIMIT 5")
    if unknown.num_rows:
        rows = zip(unknown.column("line").to_pylist(), unknown.column("key").to_pylist())
        listed = ", ".join(f"line {line}: {key!r}" for line, key in rows)
        raise StageError(f"path_cache.heads: {heads_file}: unknown entity keys ({listed})")
    engine.view("heads", "SELECT DISTINCT e.id AS head FROM listed l JOIN entities e "
                "ON e.key = l.key", materialise=True)


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _log_lines(path: Path) -> list[str]:
    files = [path] if path.is_file() else sorted(
        f for f in path.rglob("*") if f.is_file()
        and not any(part.startswith((".", "_")) for part in f.relative_to(path).parts))
    lines: list[str] = []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        parts = _LINE_BREAK.split(text)
        lines += parts[:-1] if parts and parts[-1] == "" else parts
    return lines


def _linked_keys(line: str) -> set:
    """The distinct keys an answer line links (None for an entry without a string key)."""
    try:
        record = json.loads(line)
    except ValueError:
        return set()
    if not isinstance(record, dict):
        return set()
    details = record.get("details")
    lists = [record.get("linked"), details.get("linked") if isinstance(details, dict) else None]
    return {entry.get("key") if isinstance(entry.get("key"), str) else None
            for linked in lists if isinstance(linked, list)
            for entry in linked if isinstance(entry, dict)}


def log_counts(log_path: str) -> tuple[pa.Table, dict]:
    """(key, score = answers linking it) of a query log, and the log's facts (lines, answers
    with a linked entity); StageError for a missing log or one without such an answer."""
    path = Path(log_path)
    if not path.exists():
        raise StageError(f"path_cache.query_log: {path} does not exist")
    lines = _log_lines(path)
    linked = [keys for keys in map(_linked_keys, lines) if keys]
    if not linked:  # e.g. `lokg query --json` output: indented, not one a line
        raise StageError(f"path_cache.query_log: {path}: no line of its {len(lines):,} is an "
                         "answer with linked entities (expected JSON lines with linked[].key or "
                         "details.linked[].key)")
    counted = Counter(key for keys in linked for key in keys if key is not None)
    keys = sorted(counted)
    table = pa.table({"key": pa.array(keys, pa.string()),
                      "score": pa.array([counted[k] for k in keys], pa.int64())})
    return table, {"log_lines": len(lines), "log_answers": len(linked)}

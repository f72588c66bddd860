"""Stage ``path_cache`` on the driver, for graphs up to
``path_cache.driver_max_edges`` edges: the head selection with numpy and Arrow, and the same
search (``runtime.taimr.top_paths_table``) over the heads in this process — a small refresh then
starts no Spark session for it. The Spark path (``spark_jobs.path_cache``) runs the search in
its Python workers; both write the same bucket files, row for row (tests/test_path_cache.py).

The head selection follows the Spark path's rules (module doc of ``spark_jobs.path_cache``):
the top n by score, highest first, ties to the smaller id. A query log is read as Spark's text
reader and ``from_json`` read it: a line is split at \\n, \\r or \\r\\n; a line that is not a
JSON object, or a ``linked`` / ``details.linked`` that is not a list, links nothing; an entry
of such a list that is an object contributes its ``key`` when that is a string (else a null
key, which makes the line an answer but counts no head); a directory is read recursively,
skipping names that start with ``.`` or ``_``, as Hadoop's listing does.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lokg.common.stage import StageError
from lokg.spark_jobs.settings import HEAD_SELECTORS
from lokg.runtime.contract import read_table, to_numpy, write_table

BUCKET_FILE = "bucket-{:05d}.parquet"


def bucket_path(cache_dir: Path, bucket: int) -> Path:
    return cache_dir / BUCKET_FILE.format(bucket)


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


def unknown_keys(heads_file: str, unknown: list[tuple[int, str]]) -> StageError:
    """The error naming the first unknown keys of a hot-set file, by line."""
    listed = ", ".join(f"line {line}: {key!r}" for line, key in unknown)
    return StageError(f"path_cache.heads: {heads_file}: unknown entity keys ({listed})")


def sorted_rows(rows: pa.Table) -> pa.Table:
    """Rows in a bucket's order: by head, first relation, first direction, rank."""
    keys = rows.append_column("r0", pc.list_element(rows["relations"], 0)).append_column(
        "i0", pc.list_element(rows["inverses"], 0))
    return rows.take(pc.sort_indices(keys, [(c, "ascending") for c in ("head", "r0", "i0", "rank")]))


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def select_heads(cfg: Mapping, edges_path: Path, gain_path: Path, ent_path: Path
                 ) -> tuple[np.ndarray, dict, int]:
    """The heads to cache (sorted ids), what the report says about them, and all heads
    (entities with an out-edge)."""
    heads_all, degree = np.unique(to_numpy(read_table(edges_path, columns=["s"])["s"]),
                                  return_counts=True)
    by = cfg["heads"]
    if by == "all":
        return heads_all, {"head_source": "all entities with out-edges", "hot_set": None}, \
            len(heads_all)
    if by not in HEAD_SELECTORS:
        return _hot_heads(str(by), ent_path), {"head_source": str(by),
                                               "hot_set": {"file": str(by)}}, len(heads_all)
    n = hot_size(cfg, len(heads_all))
    info: dict = {"selector": by, "share": cfg["hot_share"], "count": cfg["hot_count"],
                  "requested": n}
    if by == "degree":
        ranked, score, what = heads_all, degree.astype(np.float64), "out-degree in edges"
    elif by == "mu":
        ranked, score, what = heads_all, _mu(gain_path, heads_all), "node gain mu"
    else:
        ranked, score, facts = _log_counts(str(cfg["query_log"]), ent_path)
        keep = np.isin(ranked, heads_all)
        ranked, score = ranked[keep], score[keep]
        info.update(facts, query_log=str(cfg["query_log"]))
        what = f"answers linking them in {cfg['query_log']}"
    size = (f"{cfg['hot_share']:g} of {len(heads_all):,}" if cfg["hot_share"] is not None
            else f"{cfg['hot_count']:,}")
    top = ranked[np.lexsort((ranked, -score))[:n]]
    return np.sort(top), {"head_source": f"top {size} heads by {what}", "hot_set": info}, \
        len(heads_all)


def _mu(gain_path: Path, heads: np.ndarray) -> np.ndarray:
    """μ of each head from ``node_gain``; −∞ where it has none (or NaN): last."""
    gain = read_table(gain_path, columns=["id", "mu"])
    ids = to_numpy(gain["id"])
    by_id = np.full(int(max(ids.max(initial=-1), heads.max(initial=-1))) + 1, -math.inf)
    by_id[ids] = to_numpy(pc.fill_null(gain["mu"].cast(pa.float64()), math.nan))
    return np.nan_to_num(by_id[heads], nan=-math.inf)


def _key_ids(ent_path: Path) -> dict[str, int]:
    entities = read_table(ent_path, columns=["key", "id"])
    return dict(zip(entities["key"].to_pylist(), entities["id"].to_pylist()))


def _hot_heads(heads_file: str, ent_path: Path) -> np.ndarray:
    """Entity ids of the keys listed in the hot-set file; StageError naming unknown keys."""
    keys = hot_keys(heads_file)
    ids = _key_ids(ent_path)
    unknown = [(line, key) for line, key in keys if key not in ids][:5]
    if unknown:
        raise unknown_keys(heads_file, unknown)
    return np.unique(np.array([ids[key] for _, key in keys], np.int64))


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


def _log_counts(log_path: str, ent_path: Path) -> tuple[np.ndarray, np.ndarray, dict]:
    """(heads, score = answers linking each) from a query log, and the log's facts."""
    path = Path(log_path)
    if not path.exists():
        raise StageError(f"path_cache.query_log: {path} does not exist")
    lines = _log_lines(path)
    linked = [keys for keys in map(_linked_keys, lines) if keys]
    if not linked:
        raise StageError(f"path_cache.query_log: {path}: no line of its {len(lines):,} is an "
                         "answer with linked entities (expected JSON lines with linked[].key or "
                         "details.linked[].key)")
    counted = Counter(key for keys in linked for key in keys if key is not None)
    ids = _key_ids(ent_path)
    known = {ids[key]: n for key, n in counted.items() if key in ids}
    heads = np.array(sorted(known), np.int64)
    return heads, np.array([known[h] for h in heads.tolist()], np.float64), {
        "log_lines": len(lines), "log_answers": len(linked),
        "log_unknown_keys": sum(key not in ids for key in counted)}


def search_buckets(heads: np.ndarray, paths: tuple[Path, Path], search: Mapping, buckets: int,
                   cache_dir: Path) -> None:
    """Search each head's paths in this process and write bucket ``b`` (the heads with
    ``head % buckets == b``) in the Spark path's row order; a bucket with no head is left
    for the caller (``spark_jobs.path_cache._complete_buckets``)."""
    from lokg.runtime.taimr import EdgeGraph, top_paths_table
    graph = EdgeGraph.from_paths(*paths)
    cache_dir.mkdir(parents=True, exist_ok=True)
    heads = np.sort(np.asarray(heads, np.int64))
    for b in np.unique(heads % buckets).tolist():
        table = top_paths_table(graph, heads[heads % buckets == b], **search)
        if table.num_rows:
            write_table("path_cache", sorted_rows(table), bucket_path(cache_dir, b))

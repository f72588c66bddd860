"""Stage ``path_cache`` (Spark): the top TAIMR paths of every head, precomputed.

Inputs: ``edges`` (gat: canonical triples plus inverses with their attention),
``node_gain`` and ``entities``. Nothing else — the paths are built from the graph alone, never
from questions or answers (the stage does not look at the ``dump``). A query log
(``heads: query_log``) only chooses which heads are searched now rather than at query time, and
only its linked entity keys are read: a cold head gets the same paths, so the choice changes
latency, never an answer.

Heads are every entity with an out-edge (``path_cache.heads: all``) or a hot set:

* ``degree`` | ``mu`` | ``query_log``: the top heads — entities with an out-edge — by out-degree
  in ``edges`` (inverses included: the first hops the search can take), by μ (``node_gain``), or
  by the number of logged answers that linked them (``path_cache.query_log``: JSON lines with
  ``linked[].key``, the Answer JSON, or ``details.linked[].key``, ``lokg eval``'s
  predictions.jsonl; a key counts once per answer; keys of other builds' entities are dropped
  and counted; a log without one such line is a StageError); ties go to the smaller entity id, so the set is deterministic. Its size is
  ``hot_share`` of all heads (rounded up) or ``hot_count`` (at most all heads). The selection
  is a Spark ordered limit (``orderBy(...).limit(n)``: per-partition top-n, then one merge
  task), so nothing but counts reaches the driver.
* a file of entity keys, one a line (blank lines skipped; an unknown key is a StageError naming
  the file and line).

Heads outside the hot set are cold: the runtime computes their paths at query time with the same
search (runtime/query.py ``Runtime.paths``), keeping the last few in an LRU.

Spark spreads the heads over tasks by bucket = head % ``buckets``; each task's Python worker
loads the CSR graph from the ``edges``/``node_gain`` files (once per worker process — workers
are reused — keyed by the files' paths, sizes and mtimes) and runs
``runtime.taimr.top_paths_table`` for its heads — the search the runtime runs for a cold head,
with the same settings (max_hops, k_top, beam_width, lambda_topo). ``mapInArrow`` rather than
``mapInPandas``: the rows carry three list columns, which Arrow passes as flat buffers while
pandas would build one Python object per cell.

Up to ``driver_max_edges`` edges the stage starts no Spark session: ``path_cache_driver``
chooses the heads with numpy and Arrow (the same rules) and runs the same search over them in
this process (``report["path"]``: driver | spark); both paths write the same bucket files.

Output ``path_cache/bucket-00000.parquet`` … ``bucket-<buckets-1>.parquet``: the rows of the
heads with ``head % buckets == b``, sorted by (head, relations[0], inverses[0], rank), exactly
the contract columns. Every bucket file exists, empty or not, so a reader can trust the count
(``report["buckets"]``). Spark writes the buckets with ``partitionBy`` (one file each, since a
bucket lives in one task); the driver then renames them.

Refresh (``previous:`` inputs: same code and settings, changed inputs; pipeline/refresh.py).
A head's rows are a function of the out-edges (their α, and μ of their targets) of the nodes
within ``max_hops`` − 1 hops of it — the search extends no path further — and of the order of
the node ids (ties). Entity ids are ranks in key order, so when entities come or go every id
above them shifts, but the order of the kept ones stays: the stage moves the previous build's
ids to this build's by key (``common.stage.id_translation``; a translation that reorders
ids: full) and, when every entity with an out-edge is a head (``heads: all``), compares the two
builds' weighted edges on the driver in this build's ids: a node is **changed** when one of its
out-edges was added, removed (a node gone removes its edges, and the inverse edges of its
neighbours), or got another α or another μ at its target. Relation ids are compared as they
are: a renumbered relation shows as changed edges, searched anew. The heads within
``max_hops`` − 1 hops of a changed node (walked back along the new graph's edges, which hold
their inverses: a walk that reaches a changed node does so over unchanged edges, so the new
graph suffices) are searched anew, and every other head's rows are copied from the previous
build's cache with their head and nodes in this build's ids, into the bucket of the new head
id — the cache then equals a full run's, bucket for bucket, row for row. A warm-started or
retrained GAT moves α on nearly every edge, so after one the whole cache is usually
recomputed; the copy pays off when α moves only near the change (``gat.uniform``: α =
1/out-degree changes only at the changed triples' ends). More than
``common.stage.PARTIAL_MAX_SHARE`` of the heads touched, or a hot set: full. The report's
``refresh`` says which (partial: heads searched, copied, and how many entity ids moved).

Report: heads, heads_all (entities with an out-edge), heads_share (heads / heads_all),
head_source (in words: how the heads were chosen), hot_set (selector, share, count, requested,
and for a query log its answers and unknown keys), heads_with_paths, paths, mean_paths_per_head,
paths_by_hops, buckets, refresh (full and why, or partial: heads searched and copied), bytes (of
the bucket files), the search settings, step seconds.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lokg.common.stage import (PARTIAL_MAX_SHARE, Laps, StageError, changed_rows, id_translation,
                            keeps_order, previous_inputs, stage_input)
from lokg.runtime.contract import TABLE_SCHEMAS, check_schema, read_table, table_files, write_table
from lokg.spark_jobs import path_cache_driver
from lokg.spark_jobs.path_cache_driver import (BUCKET_FILE, bucket_path, hot_keys, hot_size, sorted_rows,
                                          unknown_keys)
from lokg.spark_jobs.settings import HEAD_SELECTORS, PathCacheSettings

SEARCH_KEYS = ("max_hops", "k_top", "beam_width")

_GRAPH: dict = {}  # the last graph a worker process loaded: {"key": ..., "graph": EdgeGraph}



def settings(config: Mapping) -> dict:
    cfg = PathCacheSettings.of(config, StageError)
    return {**cfg, "lambda_topo": float(cfg.lambda_topo)}  # the report records a float



def _file_key(*paths: Path) -> tuple:
    """Identifies the contents of tables by their files' paths, sizes and mtimes."""
    return tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns)
                 for p in paths for f in table_files(p))


def _graph(edges_path: Path, gain_path: Path):
    from lokg.runtime.taimr import EdgeGraph

    key = _file_key(edges_path, gain_path)
    if _GRAPH.get("key") != key:
        _GRAPH.clear()  # one graph per worker: drop the old one before loading the new
        _GRAPH.update(key=key, graph=EdgeGraph.from_paths(edges_path, gain_path))
    return _GRAPH["graph"]


def _searcher(edges_path: Path, gain_path: Path, search: dict, buckets: int):
    """The mapInArrow function: heads in, their path_cache rows (plus ``bucket``) out."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from lokg.runtime.taimr import top_paths_table

        heads = [b.column(0).to_numpy() for b in batches]
        if not heads:
            return
        graph = _graph(edges_path, gain_path)
        heads = np.unique(np.concatenate(heads))
        order = np.lexsort((heads, heads % buckets))
        for chunk in np.array_split(heads[order], max(1, len(heads) // 256)):
            table = top_paths_table(graph, chunk, **search)
            bucket = (table.column("head").to_numpy() % buckets).astype(np.int32)
            table = table.append_column("bucket", pa.array(bucket))
            yield from table.to_batches()

    return run



def _hot_heads(spark, heads_file: str, entities: Path):
    """Entity ids of the keys listed in the hot-set file; StageError naming unknown keys."""
    from pyspark.sql import functions as F

    wanted = spark.createDataFrame(hot_keys(heads_file), "line long, key string")
    found = wanted.join(spark.read.parquet(str(entities)).select("key", "id"), "key", "left")
    unknown = found.filter(F.col("id").isNull()).orderBy("line").limit(5).collect()
    if unknown:
        raise unknown_keys(heads_file, [(r["line"], r["key"]) for r in unknown])
    return found.select(F.col("id").alias("head")).distinct()


#: What a query-log line may carry: the Answer JSON's linked entities, or an eval record's.
_LOG_SCHEMA = ("linked array<struct<key: string>>, "
               "details struct<linked: array<struct<key: string>>>")


def _log_counts(spark, log_path: str, entities: Path):
    """(head, score = answers linking it) from a query log, and the log's facts (answers read,
    answers with a linked key, distinct keys unknown to this build)."""
    from pyspark.sql import functions as F

    path = Path(log_path)
    if not path.exists():
        raise StageError(f"path_cache.query_log: {path} does not exist")
    lines = spark.read.option("recursiveFileLookup", "true").text(str(path))
    parsed = lines.select(F.from_json("value", _LOG_SCHEMA).alias("j"))
    keys = parsed.select(F.array_distinct(F.concat(
        F.coalesce(F.col("j.linked.key"), F.array().cast("array<string>")),
        F.coalesce(F.col("j.details.linked.key"), F.array().cast("array<string>")))).alias("keys"))
    counted = (keys.filter(F.size("keys") > 0)
               .select(F.explode("keys").alias("key")).filter(F.col("key").isNotNull())
               .groupBy("key").agg(F.count(F.lit(1)).alias("score")))
    ids = spark.read.parquet(str(entities)).select("key", F.col("id").alias("head"))
    joined = counted.join(ids, "key", "left")
    facts = keys.agg(F.count(F.lit(1)).alias("lines"),
                     F.sum((F.size("keys") > 0).cast("long")).alias("answers")).first()
    if not facts["answers"]:  # e.g. `lokg query --json` output: indented, not one a line
        raise StageError(f"path_cache.query_log: {path}: no line of its {facts['lines']:,} is an "
                         "answer with linked entities (expected JSON lines with linked[].key or "
                         "details.linked[].key)")
    unknown = joined.filter(F.col("head").isNull()).count()
    known = joined.filter(F.col("head").isNotNull()).select("head", F.col("score").cast("double"))
    return known, {"log_lines": int(facts["lines"]), "log_answers": int(facts["answers"]),
                   "log_unknown_keys": unknown}


def select_heads(spark, cfg: Mapping, edges_path: Path, gain_path: Path, ent_path: Path):
    """The heads to cache (a DataFrame of ``head``) and what the report says about them."""
    from pyspark.sql import functions as F

    by = cfg["heads"]
    degrees = (spark.read.parquet(str(edges_path)).groupBy(F.col("s").alias("head"))
               .agg(F.count(F.lit(1)).alias("degree")))
    if by == "all":
        return degrees.select("head"), {"head_source": "all entities with out-edges",
                                        "hot_set": None}, None
    if by not in HEAD_SELECTORS:
        return _hot_heads(spark, str(by), ent_path), {"head_source": str(by),
                                                      "hot_set": {"file": str(by)}}, None
    heads_all = degrees.count()
    n = hot_size(cfg, heads_all)
    info: dict = {"selector": by, "share": cfg["hot_share"], "count": cfg["hot_count"],
                  "requested": n}
    if by == "degree":
        ranked, what = degrees.select("head", F.col("degree").cast("double").alias("score")), \
            "out-degree in edges"
    elif by == "mu":
        mu = F.col("mu").cast("double")
        gain = spark.read.parquet(str(gain_path)).select(F.col("id").alias("head"), mu.alias("mu"))
        ranked = degrees.select("head").join(gain, "head", "left").select(  # no μ: last
            "head", F.when(F.col("mu").isNull() | F.isnan("mu"), F.lit(-math.inf))
            .otherwise(F.col("mu")).alias("score"))
        what = "node gain mu"
    else:
        logged, facts = _log_counts(spark, str(cfg["query_log"]), ent_path)
        info.update(facts, query_log=str(cfg["query_log"]))
        ranked, what = logged.join(degrees.select("head"), "head"), \
            f"answers linking them in {cfg['query_log']}"
    size = (f"{cfg['hot_share']:g} of {heads_all:,}" if cfg["hot_share"] is not None
            else f"{cfg['hot_count']:,}")
    heads = ranked.orderBy(F.desc("score"), F.asc("head")).limit(n).select("head")
    return heads, {"head_source": f"top {size} heads by {what}", "hot_set": info}, heads_all


def _weighted_edges(edges_path: Path, gain_path: Path) -> np.ndarray:
    """Rows (s, r, inverse, o, bits of α, bits of μ(o)) of every edge: what a search sees."""
    edges = read_table(edges_path, "edges")
    gain = read_table(gain_path, "node_gain")
    mu = np.zeros(gain.num_rows, np.float64)
    mu[gain["id"].to_numpy()] = gain["mu"].to_numpy()
    o = edges["o"].to_numpy()
    return np.column_stack([edges["s"].to_numpy(), edges["r"].to_numpy(),
                            edges["inverse"].to_numpy().astype(np.int64), o,
                            edges["attention"].to_numpy().astype(np.float64).view(np.int64),
                            mu[o].view(np.int64)])


def touched_heads(now: np.ndarray, then: np.ndarray, hops: int) -> np.ndarray:
    """Sorted ids of the nodes within ``hops`` hops (walked back along ``now``'s edges) of a
    node whose weighted out-edges differ between the two ``_weighted_edges`` tables (``then``
    in this build's ids: an edge of a node gone has -1 there, and its other end's inverse edge
    marks the change)."""
    changed = changed_rows(now, then)[:, 0]
    changed = changed[changed >= 0]
    n_nodes = int(max(now[:, [0, 3]].max(initial=-1), then[:, [0, 3]].max(initial=-1))) + 1
    reached = np.zeros(n_nodes, bool)
    reached[changed] = True
    source, target = now[:, 0], now[:, 3]
    for _ in range(hops):
        reached[source[reached[target]]] = True
    return np.flatnonzero(reached)


class Partial(NamedTuple):
    """What a partial refresh copies: the previous cache, the heads it searches anew, and the
    previous build's entity ids → this build's (``common.stage.id_translation``)."""

    previous_dir: Path
    searched: np.ndarray
    entities: np.ndarray


def partial_heads(cfg: Mapping, edges_path: Path, gain_path: Path, ent_path: Path,
                  previous: dict) -> tuple[Partial | None, dict]:
    """What a refresh copies (None: nothing, it runs in full) and the report's ``refresh``."""
    if cfg["heads"] != "all":
        return None, {"mode": "full", "reason": "a hot set (heads: all only)"}
    entities = id_translation(*(read_table(p, columns=["id", "key"])
                                for p in (ent_path, previous["entities"])))
    if not keeps_order(entities):
        return None, {"mode": "full", "reason": "entity ids in another order"}
    now = _weighted_edges(edges_path, gain_path)
    then = _weighted_edges(previous["edges"], previous["node_gain"])
    then[:, [0, 3]] = entities[then[:, [0, 3]]]
    touched = touched_heads(now, then, int(cfg["max_hops"]) - 1)
    heads = np.unique(now[:, 0])
    touched = touched[np.isin(touched, heads)]
    if len(touched) > PARTIAL_MAX_SHARE * len(heads):
        return None, {"mode": "full", "reason": f"{len(touched):,} of {len(heads):,} heads "
                      f"touched (more than {PARTIAL_MAX_SHARE:.0%})"}
    moved = entities[entities >= 0] != np.flatnonzero(entities >= 0)
    return Partial(previous["path_cache"], touched, entities), {
        "mode": "partial", "searched": len(touched), "copied": len(heads) - len(touched),
        "ids_moved": int(np.count_nonzero(moved))}


def _translated(lists: pa.Array, ids: np.ndarray) -> pa.ListArray:
    """A list column of entity ids with every id replaced by ``ids[id]``."""
    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    values = pa.array(ids[lists.values.to_numpy()], pa.int64())
    return pa.ListArray.from_arrays(lists.offsets, values)


def spill_copied_rows(partial: Partial, buckets: int, spill: Path) -> None:
    """The previous cache's rows of every head not searched anew, in this build's ids, written
    to ``spill/<this build's bucket>/<previous bucket>.parquet`` (a head's bucket moves with its
    id): one previous bucket in memory at a time, not the whole cache."""
    for b in range(buckets):
        old = pq.read_table(bucket_path(partial.previous_dir, b))
        head = partial.entities[old["head"].to_numpy()]
        keep = (head >= 0) & ~np.isin(head, partial.searched)  # gone or searched: dropped
        rows = old.filter(pa.array(keep))
        rows = rows.set_column(rows.schema.get_field_index("head"), "head",
                               pa.array(head[keep], pa.int64()))
        rows = rows.set_column(rows.schema.get_field_index("nodes"), "nodes",
                               _translated(rows["nodes"], partial.entities))
        bucket = head[keep] % buckets
        for target in np.unique(bucket):
            (spill / str(target)).mkdir(parents=True, exist_ok=True)
            pq.write_table(rows.filter(pa.array(bucket == target)),
                           spill / str(target) / f"{b:05d}.parquet")


def _with_previous(cache_dir: Path, spill: Path, b: int) -> None:
    """Bucket ``b`` of ``cache_dir`` (the searched heads' rows, or none) completed with the
    previous build's rows of every other head (spilled for ``b``), in the order a full run
    writes."""
    path = bucket_path(cache_dir, b)
    schema = TABLE_SCHEMAS["path_cache"]
    files = sorted((spill / str(b)).glob("*.parquet")) + ([path] if path.exists() else [])
    parts = [pq.read_table(f).cast(schema) for f in files]
    write_table("path_cache", sorted_rows(pa.concat_tables(parts) if parts
                                          else schema.empty_table()), path)



def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    lap = Laps()
    cfg = settings(config)
    paths = tuple(stage_input(inputs, "path_cache", n) for n in ("edges", "node_gain", "entities"))
    for table, path in (("edges", paths[0]), ("node_gain", paths[1])):
        first = table_files(path)[0]
        check_schema(table, pq.read_schema(first), first)
    cache_dir = Path(out_dir) / "path_cache"
    n_edges = sum(pq.ParquetFile(f).metadata.num_rows for f in table_files(paths[0]))
    where = "driver" if n_edges <= int(cfg["driver_max_edges"]) else "spark"
    previous = previous_inputs(inputs, "edges", "node_gain", "entities", "path_cache")
    on_path = _on_driver if where == "driver" else functools.partial(_on_spark, config)
    n_heads, chosen, heads_all, partial, refresh = on_path(cfg, paths, previous, cache_dir, lap)
    _complete_buckets(cache_dir, cfg["buckets"], partial)
    lap("buckets")
    written = _written(cache_dir, cfg["buckets"], n_heads)
    lap("report")
    report = {
        "path": where,
        "heads": n_heads,
        "heads_all": heads_all,
        "heads_share": round(n_heads / heads_all, 6) if heads_all else 0.0,
        **chosen,
        **written,
        "buckets": cfg["buckets"],
        "bucket_file": BUCKET_FILE,
        "refresh": refresh,
        **_search_settings(cfg),
        "step_seconds": lap.seconds,
        "seconds": round(sum(lap.seconds.values()), 3),
    }
    return {"outputs": {"path_cache": str(cache_dir)}, "report": report}


def _search_settings(cfg: Mapping) -> dict:
    return {k: cfg[k] for k in (*SEARCH_KEYS, "lambda_topo")}


def _refresh_plan(cfg: Mapping, paths: tuple, previous: dict | None
                  ) -> tuple[Partial | None, dict]:
    if previous is None:
        return None, {"mode": "full", "reason": "no previous build"}
    return partial_heads(cfg, *paths, previous)


def _on_driver(cfg: Mapping, paths: tuple, previous: dict | None, cache_dir: Path, lap: Laps):
    """Heads chosen and searched in this process (``path_cache_driver``): no Spark session.
    Returns (heads, report's head facts, all heads, the partial refresh or None, its report)."""
    heads, chosen, heads_all = path_cache_driver.select_heads(cfg, *paths)
    partial, refresh = _refresh_plan(cfg, paths, previous)
    lap("refresh")
    searched = heads if partial is None else np.intersect1d(heads, partial.searched)
    path_cache_driver.search_buckets(searched, paths[:2], _search_settings(cfg), cfg["buckets"],
                                     cache_dir)
    lap("search_and_write")
    return len(heads), chosen, heads_all, partial, refresh


def _on_spark(config: Mapping, cfg: Mapping, paths: tuple, previous: dict | None,
              cache_dir: Path, lap: Laps):
    """Heads chosen in Spark SQL and searched in its Python workers; returns as ``_on_driver``."""
    from pyspark.sql import functions as F

    from lokg.spark_jobs.session import get_spark

    spark = get_spark(dict(config), "lokg-path_cache")
    lap("session")
    heads, chosen, heads_all = select_heads(spark, cfg, *paths)
    partial, refresh = _refresh_plan(cfg, paths, previous)
    lap("refresh")
    buckets = cfg["buckets"]
    tasks = max(1, min(buckets, int(spark.conf.get("spark.sql.shuffle.partitions"))))
    heads = heads.repartition(tasks, (F.col("head") % buckets).alias("bucket")).persist()
    n_heads = heads.count()
    if heads_all is None:
        heads_all = n_heads if cfg["heads"] == "all" else (
            spark.read.parquet(str(paths[0])).select("s").distinct().count())
    to_search = heads if partial is None else heads.join(F.broadcast(spark.createDataFrame(
        [(int(h),) for h in partial.searched], "head long")), "head")
    lap("heads")
    spark_dir = cache_dir.with_name("_path_cache_spark")
    _search(to_search, _searcher(*paths[:2], _search_settings(cfg), buckets), spark_dir)
    lap("search_and_write")
    _move_spark_buckets(spark_dir, cache_dir)
    heads.unpersist()
    return n_heads, chosen, heads_all, partial, refresh


def _search(heads, searcher, spark_dir: Path) -> None:
    """Search each head's paths and write them partitioned by bucket, one file a bucket."""
    from pyspark.sql import functions as F

    schema = ("head long, rank int, score double, relations array<long>, "
              "inverses array<boolean>, nodes array<long>, bucket int")
    rows = heads.mapInArrow(searcher, schema)
    (rows.sortWithinPartitions("bucket", "head", F.col("relations")[0], F.col("inverses")[0],
                               "rank")
     .write.mode("overwrite").partitionBy("bucket").parquet(str(spark_dir)))


def _move_spark_buckets(spark_dir: Path, cache_dir: Path) -> None:
    """Move Spark's bucket files (``bucket=b/part-*.parquet``) to their names."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    for part in sorted(spark_dir.glob("bucket=*")):
        files = table_files(part)
        if len(files) != 1:
            raise StageError(f"{part}: expected one file for the bucket, Spark wrote {len(files)}")
        os.replace(files[0], bucket_path(cache_dir, int(part.name.split("=", 1)[1])))
    shutil.rmtree(spark_dir)


def _complete_buckets(cache_dir: Path, buckets: int, partial: Partial | None) -> None:
    """The searched heads' buckets completed: a partial refresh adds the previous build's
    rows of the heads it did not search; a bucket with no head gets an empty file."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    empty = TABLE_SCHEMAS["path_cache"].empty_table()
    spill = cache_dir.with_name("_path_cache-copied")
    if partial is not None:
        spill_copied_rows(partial, buckets, spill)
    for b in range(buckets):
        if partial is not None:
            _with_previous(cache_dir, spill, b)
        elif not bucket_path(cache_dir, b).exists():
            write_table("path_cache", empty, bucket_path(cache_dir, b))
    shutil.rmtree(spill, ignore_errors=True)
    check_schema("path_cache", pq.read_schema(bucket_path(cache_dir, 0)), bucket_path(cache_dir, 0))


def _written(cache_dir: Path, buckets: int, n_heads: int) -> dict:
    """The report's figures of what the buckets hold."""
    n_bytes = sum(bucket_path(cache_dir, b).stat().st_size for b in range(buckets))
    written = pa.concat_tables(pq.read_table(bucket_path(cache_dir, b), columns=["head", "nodes"])
                               for b in range(buckets))
    hops = pc.value_counts(pc.list_value_length(written.column("nodes"))).to_pylist()
    n_paths = written.num_rows
    return {
        "heads_with_paths": len(pc.unique(written.column("head"))),
        "paths": n_paths,
        "mean_paths_per_head": round(n_paths / n_heads, 3) if n_heads else 0.0,
        "paths_by_hops": {str(h["values"]): h["counts"]
                          for h in sorted(hops, key=lambda h: h["values"])},
        "bytes": n_bytes,
    }

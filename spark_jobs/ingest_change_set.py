"""The change set of an ingest against the previous build's tables: what a refresh's later
stages recompute from. In Spark, or with Arrow on the driver when the entities fit it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lokg.common.stage import previous_inputs
from lokg.runtime.contract import read_table
from lokg.spark_jobs.ingest_tables import write_frame

#: Part of the change set → its columns (strings). ``changed_entities``: kept keys whose name,
#: aliases, description or attributes changed; ``touched_relations``: those of changed triples.
CHANGE_SET_PARTS = {"added_triples": ("s", "r", "o"), "removed_triples": ("s", "r", "o"),
                    "added_entities": ("key",), "removed_entities": ("key",),
                    "changed_entities": ("key",), "touched_relations": ("name",)}
_LITERALS = ("key", "name", "aliases", "description", "attributes")


def keyed_graph(entities: DataFrame, relations: DataFrame, triples: DataFrame) -> DataFrame:
    """Triples of id tables as (s key, relation name, o key): comparable across builds."""
    keys = entities.select("id", "key")
    return (triples.join(F.broadcast(relations.select(F.col("id").alias("r"), "name")), "r")
            .join(keys.select(F.col("id").alias("s"), F.col("key").alias("s_key")), "s")
            .join(keys.select(F.col("id").alias("o"), F.col("key").alias("o_key")), "o")
            .select(F.col("s_key").alias("s"), F.col("name").alias("r"), F.col("o_key").alias("o")))


def change_set(spark: SparkSession, inputs: dict, out: Path, small: bool) -> dict | None:
    """The change set of this ingest (tables just written under ``out``) against the previous
    build's (``previous:`` inputs of a refresh): anti-joins both ways on keyed triples and on
    entity keys, written as ``CHANGE_SET_PARTS`` under ``out/change_set``; its counts, or None
    (and empty parts) in a full build. ``small`` (the entities fit ``driver_max_entities``):
    computed with Arrow on the driver, as the ids are — a dozen Spark jobs cost more there."""
    previous = previous_inputs(inputs, "entities", "relations", "triples")
    if previous is None:
        write_empty_change_set(out / "change_set")
        return None
    if small:
        return driver_change_set(previous, out)
    now = {t: spark.read.parquet(str(out / f"{t}.parquet")) for t in ("entities", "relations",
                                                                      "triples")}
    then = {t: spark.read.parquet(str(path)) for t, path in previous.items()}
    graph_now, graph_then = (keyed_graph(**tables) for tables in (now, then))
    lits_now, lits_then = (t["entities"].select(*_LITERALS) for t in (now, then))
    keys_now, keys_then = (t.select("key") for t in (lits_now, lits_then))
    added, removed = (graph_now.join(graph_then, ["s", "r", "o"], "left_anti"),
                      graph_then.join(graph_now, ["s", "r", "o"], "left_anti"))
    parts = {
        "added_triples": added, "removed_triples": removed,
        "added_entities": keys_now.join(keys_then, "key", "left_anti"),
        "removed_entities": keys_then.join(keys_now, "key", "left_anti"),
        "changed_entities": lits_now.exceptAll(lits_then).select("key").join(keys_then, "key"),
        "touched_relations": added.unionByName(removed).select(F.col("r").alias("name"))
        .distinct(),
    }
    counts = {}
    for part, frame in parts.items():
        write_frame(frame.coalesce(1).sortWithinPartitions(*CHANGE_SET_PARTS[part]),
                    out / "change_set" / part)
        counts[part] = spark.read.parquet(str(out / "change_set" / part)).count()
    return counts


def driver_change_set(previous: dict[str, Path], out: Path) -> dict:
    """``change_set`` in Arrow: the same parts, rows and order as the Spark path writes."""
    now, then = ({t: read_table(root[t], t) for t in ("entities", "relations", "triples")}
                 for root in ({t: out / f"{t}.parquet" for t in previous}, previous))
    graph_now, graph_then = _keyed_table(now), _keyed_table(then)
    keys_now, keys_then = now["entities"]["key"], then["entities"]["key"]
    added = graph_now.join(graph_then, ["s", "r", "o"], join_type="left anti")
    removed = graph_then.join(graph_now, ["s", "r", "o"], join_type="left anti")
    parts = {
        "added_triples": added, "removed_triples": removed,
        "added_entities": _keys(keys_now.filter(pc.invert(pc.is_in(keys_now, keys_then)))),
        "removed_entities": _keys(keys_then.filter(pc.invert(pc.is_in(keys_then, keys_now)))),
        "changed_entities": _keys(_changed_keys(now["entities"], then["entities"])),
        "touched_relations": pa.table({"name": pc.unique(pa.chunked_array(
            [*added["r"].chunks, *removed["r"].chunks], pa.string()))}),
    }
    root = out / "change_set"
    shutil.rmtree(root, ignore_errors=True)
    for part, table in parts.items():
        columns = CHANGE_SET_PARTS[part]
        (root / part).mkdir(parents=True)
        pq.write_table(table.select(list(columns)).sort_by([(c, "ascending") for c in columns]),
                       root / part / "part-00000.parquet")
    return {part: table.num_rows for part, table in parts.items()}


def _keyed_table(tables: dict[str, pa.Table]) -> pa.Table:
    """``keyed_graph`` of Arrow tables: ids are the rows of the tables in id order (dense)."""
    keys, names = (tables[t][c].take(pc.sort_indices(tables[t]["id"]))
                   for t, c in (("entities", "key"), ("relations", "name")))
    triples = tables["triples"]
    return pa.table({"s": keys.take(triples["s"]), "r": names.take(triples["r"]),
                     "o": keys.take(triples["o"])})


def _keys(keys) -> pa.Table:
    return pa.table({"key": pa.array(keys, pa.string()) if isinstance(keys, list) else keys})


def _changed_keys(now: pa.Table, then: pa.Table) -> list[str]:
    """Keys in both tables whose name, aliases, description or attributes differ."""
    columns = _LITERALS[1:]
    before = dict(zip(then["key"].to_pylist(), zip(*(then[c].to_pylist() for c in columns))))
    return [key for key, *row in zip(now["key"].to_pylist(), *(now[c].to_pylist()
                                                               for c in columns))
            if key in before and tuple(row) != before[key]]


def write_empty_change_set(root: Path) -> None:
    """A change set with no rows (a full build, or a reused ingest: nothing changed)."""
    shutil.rmtree(root, ignore_errors=True)
    for part, columns in CHANGE_SET_PARTS.items():
        (root / part).mkdir(parents=True)
        pq.write_table(pa.table({c: pa.array([], pa.string()) for c in columns}),
                       root / part / "part-00000.parquet")

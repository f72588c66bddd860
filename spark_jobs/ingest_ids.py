"""Dense, deterministic entity and relation ids in Spark: the run's persisted DataFrames, the
vocabulary of the parse, and ids numbered on the driver or without funnelling through one
partition."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

_LOW33 = (1 << 33) - 1  # monotonically_increasing_id = partition << 33 | row within partition


class Cache:
    """DataFrames persisted during one run, released at its end."""

    def __init__(self) -> None:
        self.frames: list[DataFrame] = []

    def __call__(self, df: DataFrame) -> DataFrame:
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self.frames.append(df)
        return df

    def release(self) -> None:
        for df in self.frames:
            df.unpersist()
        self.frames.clear()


def dense_ids(spark: SparkSession, keys: DataFrame, key: str, cache: Cache
              ) -> tuple[DataFrame, int]:
    """(key, id) for the distinct keys, id = rank in key order from 0, computed without
    funnelling the data through one partition: sort, number rows within each partition, then
    offset each partition by the sizes of the ones before it."""
    ordered = cache(
        keys.select(key).distinct().orderBy(key)
        .select(key, F.monotonically_increasing_id().alias("_mid"))
    )
    sizes = ordered.groupBy(F.shiftright("_mid", 33).alias("pid")).count().collect()
    offsets, total = [], 0
    for row in sorted(sizes, key=lambda r: r["pid"]):
        offsets.append((int(row["pid"]), total))
        total += int(row["count"])
    off = spark.createDataFrame(offsets, "pid long, base long")
    ids = ordered.join(F.broadcast(off), F.shiftright(ordered["_mid"], 33) == off["pid"]).select(
        F.col(key), (F.col("base") + F.col("_mid").bitwiseAND(F.lit(_LOW33))).alias("id")
    )
    return ids, total


_ENTITY, _RELATION = 0, 1  # tags of the vocabulary's rows


def vocabulary(edges: DataFrame, subjects: DataFrame, cache: Cache) -> tuple[DataFrame, dict]:
    """The distinct entity keys and relation names, as (tag, name) rows, and their number per
    tag: one aggregation (partial, one exchange of the distinct names) over the cached parse
    instead of a de-duplication of the edges followed by one per vocabulary."""
    vocab = cache(
        edges.select(F.lit(_ENTITY).alias("tag"), F.col("s").alias("name"))
        .unionByName(edges.select(F.lit(_ENTITY).alias("tag"), F.col("o").alias("name")))
        .unionByName(subjects.select(F.lit(_ENTITY).alias("tag"), F.col("s").alias("name")))
        .unionByName(edges.select(F.lit(_RELATION).alias("tag"), F.col("p").alias("name")))
        .distinct()
    )
    sizes = {row["tag"]: row["count"] for row in vocab.groupBy("tag").count().collect()}
    return vocab, sizes


def numbered_on_driver(spark: SparkSession, names: pa.Table) -> DataFrame:
    """(key, id) of the entity rows of ``names``, id = rank in key order: sorted by Arrow on
    the driver (byte order of UTF-8 = code-point order = Spark's string order), as relations
    are, instead of a sampled range shuffle, a sort and a count per partition in Spark."""
    keys = names.filter(pc.equal(names["tag"], _ENTITY)).column("name")
    keys = keys.take(pc.sort_indices(keys))
    table = pa.table({"key": keys.combine_chunks(), "id": pa.array(range(len(keys)), pa.int64())})
    return spark.createDataFrame(table)


def entity_and_relation_ids(spark: SparkSession, edges: DataFrame, subjects: DataFrame,
                            driver_max: int, cache: Cache) -> tuple[DataFrame, int, list[str]]:
    """(key, id) of the entities, their number and the relation names in id order. Up to
    ``driver_max`` entities the keys are numbered on the driver; above, by ``dense_ids``."""
    vocab, sizes = vocabulary(edges, subjects, cache)
    n_entities = sizes.get(_ENTITY, 0)
    if n_entities <= driver_max:
        names = vocab.toArrow()
        ent_ids = numbered_on_driver(spark, names)
    else:
        names = vocab.filter(F.col("tag") == _RELATION).toArrow()
        keys = vocab.filter(F.col("tag") == _ENTITY).select(F.col("name").alias("key"))
        ent_ids = cache(dense_ids(spark, keys, "key", cache)[0])
    rel_names = sorted(names.filter(pc.equal(names["tag"], _RELATION)).column("name").to_pylist())
    return ent_ids, n_entities, rel_names

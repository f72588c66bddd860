"""Spark's ingest tables from a parse of every line: the quarantine, the graph's edges and
literal facts, and the relations, triples, entities and type assertions with their ids."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from lokg.runtime.contract import write_table
from lokg.spark_jobs import formats as fm
from lokg.spark_jobs.formats_spark import unescape_literals
from lokg.spark_jobs.ingest_checks import TEXT_LIMIT, LineCounts, refuse

_ATTRIBUTES = "array<struct<key:string,value:string>>"


def write_frame(df: DataFrame, path: Path) -> None:
    df.write.mode("overwrite").parquet(str(path))


def write_quarantine(numbered: DataFrame, counted: LineCounts, dump, plan: fm.Plan,
                     ceiling: float, path: Path) -> None:
    """Write the malformed lines first (the quarantine must exist even when the stage then
    fails), then refuse a dump over the malformed ceiling or with no statement at all."""
    malformed = F.col("kind") == fm.MALFORMED if counted.malformed else F.lit(False)
    write_frame(  # none counted: an empty filter, which Spark answers without scanning the parse
        numbered.filter(malformed)
        .select("file_idx", "file", "line", "reason",
                F.substring("text", 1, TEXT_LIMIT).alias("text"))
        .coalesce(1)
        .sortWithinPartitions("file_idx", "line")
        .drop("file_idx"),
        path,
    )
    refuse(counted, dump, plan, ceiling, path)


def graph_edges(parsed: DataFrame, counted: LineCounts, literals_as_edges: bool
                 ) -> tuple[DataFrame, int]:
    """The graph's (s, p, o) edges as keys — literal attributes too when they count as edges —
    and how many edge facts the lines held (duplicates included)."""
    graph = F.col("graph")
    edges = parsed.filter((F.col("kind") == fm.EDGE) & graph).select("s", "p", "o")
    edge_facts = counted.kinds.get(fm.EDGE, 0)
    if literals_as_edges:
        attrs = parsed.filter((F.col("kind") == fm.ATTRIBUTE) & graph)
        attrs = unescape_literals(attrs.select("s", "p", "o", "escaped"), counted.python)
        edges = edges.unionByName(attrs.select("s", "p", literal_key(F.col("o")).alias("o")))
        edge_facts += counted.kinds.get(fm.ATTRIBUTE, 0)
    return edges, edge_facts


def literal_facts(numbered: DataFrame, literals_as_edges: bool, records: bool,
                  python: bool) -> DataFrame:
    """(file_idx, line, kind, s, p, o) name/alias/description/attribute facts, text unescaped.

    ``records``: the plan has an entities file; ``python``: some literal has ``\\U`` escapes."""
    cols = ["file_idx", "line", "kind", "s", "p", "o"]
    lits = numbered.filter(F.col("kind").isin(*fm.LITERAL_KINDS)).select(*cols, "escaped")
    facts = unescape_literals(lits, python).select(*cols)
    rec = numbered.filter(F.col("kind") == fm.RECORD)
    from_records = [] if not records else [
        rec.select("file_idx", "line", F.lit(fm.NAME).alias("kind"), "s",
                   F.lit(None).cast("string").alias("p"), "o"),
        rec.select("file_idx", "line", F.lit(fm.DESCRIPTION).alias("kind"), "s",
                   F.lit(None).cast("string").alias("p"), F.col("p").alias("o")),
        rec.select("file_idx", "line", F.lit(fm.ALIAS).alias("kind"), "s",
                   F.lit(None).cast("string").alias("p"), F.explode("extra").alias("o")),
    ]
    for frame in from_records:
        facts = facts.unionByName(frame)
    if literals_as_edges:  # attributes became edges to literal nodes; those nodes get names
        attrs = facts.filter(F.col("kind") == fm.ATTRIBUTE)
        facts = facts.filter(F.col("kind") != fm.ATTRIBUTE).unionByName(
            attrs.select("file_idx", "line", F.lit(fm.NAME).alias("kind"),
                         literal_key(F.col("o")).alias("s"), F.col("p"), F.col("o"))
        )
    named = F.col("kind").isin(fm.NAME, fm.ALIAS, fm.DESCRIPTION)
    return facts.filter(F.col("o").isNotNull() & ~(named & (F.trim(F.col("o")) == "")))


def _aggregate_literals(facts: DataFrame) -> DataFrame:
    """Per key: first name and description by (file, line); aliases and attributes in
    first-seen order, de-duplicated."""
    kind = F.col("kind")

    def first(k: str):
        return F.min(F.when(kind == k, F.struct("file_idx", "line", "o")))["o"]

    def in_order(k: str, *fields: str):
        ordered = F.struct("file_idx", "line", *fields)
        return F.array_sort(F.collect_list(F.when(kind == k, ordered)))

    return facts.groupBy(F.col("s").alias("key")).agg(
        first(fm.NAME).alias("name"),
        first(fm.DESCRIPTION).alias("description"),
        F.array_distinct(F.transform(in_order(fm.ALIAS, "o"), lambda x: x["o"])).alias("aliases"),
        F.array_distinct(F.transform(
            in_order(fm.ATTRIBUTE, "p", "o"),
            lambda x: F.struct(x["p"].alias("key"), x["o"].alias("value")),
        )).alias("attributes"),
    )


def literal_key(text):
    """Key of a literal node when ``literals_as_edges`` is set: the quoted text."""
    return F.concat(F.lit('"'), text, F.lit('"'))


def feedback_added(parsed: DataFrame, delta: list[fm.Source]) -> dict:
    """Edges and entities that only the feedback deltas state (the build report's "added by
    feedback"); {} when no delta was read."""
    if not delta:
        return {}
    ours = F.regexp_replace("fp", "^file:(//)?", "") == str(delta[0].files[0].resolve())
    edge = (F.col("kind") == fm.EDGE) & F.col("graph")
    added = parsed.filter(edge & ours).select("s", "p", "o").subtract(
        parsed.filter(edge & ~ours).select("s", "p", "o"))
    known = parsed.filter(F.col("graph") & ~ours).select(F.col("s").alias("key")).union(
        parsed.filter(edge & ~ours).select(F.col("o").alias("key")))
    ends = added.select(F.col("s").alias("key")).union(added.select(F.col("o").alias("key")))
    return {"feedback_edges_added": added.count(),
            "feedback_nodes_added": ends.subtract(known).count()}


def _ids_side(small: bool):
    """Entity-id joins broadcast the ids while they fit the driver."""
    return F.broadcast if small else (lambda df: df)


def write_relations(spark: SparkSession, rel_names: list[str], path: Path) -> DataFrame:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    write_table("relations", pa.table({"id": pa.array(range(len(rel_names)), pa.int64()),
                                       "name": pa.array(rel_names, pa.string())}),
                path / "part-00000.parquet")
    return spark.createDataFrame(list(enumerate(rel_names)), "id long, name string")


def write_triples(edges: DataFrame, ent_ids: DataFrame, relations: DataFrame, small: bool,
                  path: Path) -> int:
    """Ids looked up, then de-duplicated as three longs; the count observed while writing."""
    ids = _ids_side(small)
    s_ids = ent_ids.select(F.col("key").alias("s"), F.col("id").alias("s_id"))
    o_ids = ent_ids.select(F.col("key").alias("o"), F.col("id").alias("o_id"))
    r_ids = relations.select(F.col("name").alias("p"), F.col("id").alias("r_id"))
    written = Observation("triples")
    triples = (
        edges.join(ids(s_ids), "s").join(ids(o_ids), "o").join(F.broadcast(r_ids), "p")
        .select(F.col("s_id").alias("s"), F.col("r_id").alias("r"), F.col("o_id").alias("o"))
        .distinct()
    )
    write_frame(triples.observe(written, F.count("*").alias("n")), path)
    return int(written.get["n"])


def write_entities(ent_ids: DataFrame, facts: DataFrame, name_rule: str, small: bool,
                   path: Path) -> int:
    """Entities with names, aliases, descriptions and attributes, in id order; returns how many
    have a name of their own (counted while writing: no extra pass)."""
    agg = _aggregate_literals(facts)
    fallback = F.col("key") if name_rule == "key" else F.regexp_replace("key", "_", " ")
    named = Observation("names")
    entities = (
        ent_ids.join(agg, "key", "left")  # ids preserved: a broadcast could only build agg
        .select(
            F.col("id"),
            F.col("key"),
            F.coalesce(F.col("name"), fallback).alias("name"),
            F.coalesce(F.col("aliases"), F.array().cast("array<string>")).alias("aliases"),
            F.col("description"),
            F.array().cast("array<string>").alias("types"),
            F.coalesce(F.col("attributes"), F.array().cast(_ATTRIBUTES)).alias("attributes"),
            F.col("name").isNotNull().alias("_named"),
        )
    )
    # row order = id order; up to driver_max_entities in one file, sorted in one task
    entities = (entities.coalesce(1).sortWithinPartitions("id") if small
                else entities.orderBy("id"))
    write_frame(
        entities.observe(named, F.count_if(F.col("_named")).alias("named")).drop("_named"), path)
    return int(named.get["named"])


def write_type_assertions(parsed: DataFrame, ent_ids: DataFrame, counted: LineCounts,
                          small: bool, path: Path) -> int:
    """(id, type) of the graph lines' type assertions, distinct. None counted by the parse: the
    same (empty) query with a filter that is always false, which Spark answers without a pass
    over the parse or the ids, and no observation (an empty write need not report one)."""
    any_type = bool(counted.kinds.get(fm.TYPE))
    asserted = (F.col("kind") == fm.TYPE) & F.col("graph") if any_type else F.lit(False)
    assertions = unescape_literals(
        parsed.filter(asserted).select("s", "o", "escaped"), counted.python,
    ).select("s", F.col("o").alias("type")).distinct()
    rows = assertions.join(_ids_side(small)(ent_ids.withColumnRenamed("key", "s")), "s") \
        .select("id", "type")
    if not any_type:
        write_frame(rows, path)
        return 0
    typed = Observation("types")
    write_frame(rows.observe(typed, F.count("*").alias("n")), path)
    return int(typed.get["n"])



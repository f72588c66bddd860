"""``relation_stats`` in Spark: the passes over the triples (one query collects what the
driver path needs) and, past ``driver_max_relations``, the candidates and pair signals as
DataFrames (they may number |R|²)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from lokg.spark_jobs.relation_stats_driver import DIGITS, UNTYPED, Passes, tail_entropies
from lokg.spark_jobs.relation_stats_tables import stats_table


def _typed_entities(spark_entities, rule: str):
    """DataFrame (e, ts): each entity's canonical type set as a sorted array (see module doc)."""
    from pyspark.sql import functions as F

    clean = F.array_sort(F.array_distinct(F.filter(
        F.coalesce(F.col("types"), F.array().cast("array<string>")),
        lambda t: t.isNotNull() & (t != F.lit("")))))
    if rule == "min":
        clean = F.slice(clean, 1, 1)
    cleaned = spark_entities.select(F.col("id").alias("e"), clean.alias("ts"))
    return cleaned.select("e", F.when(F.size("ts") > 0, F.col("ts"))
                          .otherwise(F.array(F.lit(UNTYPED))).alias("ts"))


def _roles(triples):
    """(e, r, h): each triple as a head row (e = s, h = 1) and a tail row (e = o, h = 0),
    exchanged once by e: every per-entity aggregation after it needs no other (hash(e)
    satisfies its grouping). The triples are distinct by contract (``triples`` in
    runtime/contract.py: ingest, the only producer before this stage, de-duplicates them), so
    there is no ``distinct`` here."""
    from pyspark.sql import functions as F

    heads = triples.select(F.col("s").alias("e"), "r", F.lit(1).alias("h"))
    tails = triples.select(F.col("o").alias("e"), "r", F.lit(0).alias("h"))
    return heads.unionByName(tails).repartition("e")


def _entity_relations(roles):
    """(e, r, h, c): e is a head of r (h = 1) and the tail of c triples of r."""
    from pyspark.sql import functions as F

    return roles.groupBy("e", "r").agg(F.max("h").alias("h"), F.sum(1 - F.col("h")).alias("c"))


def _relation_sets(er):
    """(e, rs): each entity's relations as (r, h, c) structs; grouped where er already is (by e)."""
    from pyspark.sql import functions as F

    return er.groupBy("e").agg(F.collect_list(F.struct("r", "h", "c")).alias("rs"))


def _entity_counts(sets, cap: int):
    """One generate over each entity's relations and one aggregation give both per-relation
    facts and entity pairs, so that one plan (one exchange of the role rows) serves both:

    * b = −1: relation a's triples, heads, tails and entities;
    * b ≥ 0: relations a < b and, as ``entities``, the entities touching ≤ ``cap`` relations
      that they share (pairs made within each entity's row: no self-join, no sort)."""
    from pyspark.sql import functions as F

    def row(a, b, h, c):
        return F.struct(a.alias("a"), b.cast("long").alias("b"), h.cast("int").alias("h"),
                        c.cast("long").alias("c"))

    own = F.transform("rs", lambda x: row(x["r"], F.lit(-1), x["h"], x["c"]))
    pairs = F.flatten(F.transform("rs", lambda x: F.transform(
        F.filter("rs", lambda y: y["r"] > x["r"]), lambda y: row(x["r"], y["r"], F.lit(0), F.lit(0)))))
    rows = sets.select(F.explode(F.when(F.size("rs") <= cap, F.concat(own, pairs))
                                 .otherwise(own)).alias("x")).select("x.*")
    c = F.col("c")
    return rows.groupBy("a", "b").agg(
        F.sum(c).alias("triples"), F.sum("h").alias("heads"),
        F.count(F.when(c > 0, 1)).alias("tails"), F.count(F.lit(1)).alias("entities"))


def _tail_histogram(sets):
    """(r, c, k): k entities are the tail of c triples of relation r — what H(r) is computed
    from on the driver (``tail_entropies``: an exact sum, the same on every path and master)."""
    from pyspark.sql import functions as F

    tails = sets.select(F.explode("rs").alias("x")).select("x.r", "x.c").filter(F.col("c") > 0)
    return tails.groupBy("r", "c").agg(F.count(F.lit(1)).alias("k"))


def _split_counts(counts: pa.Table, tails: pa.Table) -> tuple[pa.Table, pa.Table]:
    """``_entity_counts`` and ``_tail_histogram`` collected → (r, triples, heads, tails,
    entities, entropy) and (r_i, r_j, shared_nonhub)."""
    own = pc.equal(counts.column("b"), -1)
    facts = counts.filter(own).select(["a", "triples", "heads", "tails", "entities"])
    entropy = tail_entropies(*(tails.column(name).to_numpy() for name in "rck"))
    facts = facts.append_column("entropy", pa.array(
        [entropy[r] for r in facts.column("a").to_pylist()], pa.float64()))
    pairs = counts.filter(pc.invert(own)).select(["a", "b", "entities"])
    return (facts.rename_columns(["r", *facts.column_names[1:]]),
            pairs.rename_columns(["r_i", "r_j", "shared_nonhub"]))


def _hub_shared(hub, cand):
    """(r_i, r_j, shared_hub): hub entities (rows e, r) shared by each candidate pair."""
    from pyspark.sql import functions as F

    h1, h2 = hub.alias("h1"), hub.alias("h2")
    return (h1.join(cand.select("r_i", "r_j"), F.col("h1.r") == F.col("r_i"))
            .join(h2, (F.col("h2.e") == F.col("h1.e")) & (F.col("h2.r") == F.col("r_j")))
            .groupBy("r_i", "r_j").agg(F.count(F.lit(1)).alias("shared_hub")))


def _type_combos(spark, triples, entities_path: str, rule: str):
    """(r, hts, tts, c): the triples counted per head type set and tail type set (entity types
    broadcast: no exchange of the triples)."""
    from pyspark.sql import functions as F

    typed = _typed_entities(spark.read.parquet(entities_path).select("id", "types"), rule)
    head, tail = typed.alias("head"), typed.alias("tail")  # one broadcast, reused for both
    untyped = F.array(F.lit(UNTYPED))
    tagged = (triples.join(head, F.col("s") == F.col("head.e"), "left")
              .join(tail, F.col("o") == F.col("tail.e"), "left")
              .select("r", F.coalesce("head.ts", untyped).alias("hts"),
                      F.coalesce("tail.ts", untyped).alias("tts")))
    return tagged.groupBy("r", "hts", "tts").agg(F.count(F.lit(1)).alias("c"))


def _collect_together(parts: Mapping) -> dict[str, pa.Table]:
    """Small aggregates (name → DataFrame) collected by one Spark query, a union tagged by
    name: one result job for all instead of an action each, and their map stages (submitted
    together by adaptive execution) share the cores."""
    from pyspark.sql import functions as F

    tagged = [frame.select(F.lit(name).alias("part"), *frame.columns)
              for name, frame in parts.items()]
    union = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), tagged)
    table = union.toArrow()
    return {name: table.filter(pc.equal(table.column("part"), name)).select(frame.columns)
            for name, frame in parts.items()}


def _first_query(counts, tails, hubs, combos, hubs_possible: bool, on_driver: bool) -> dict:
    """What the stage's first query collects: the per-relation and entity-pair counts, the
    relations' tail histograms, the number of hub entities (only when there can be any: an
    entity touches at most |R| relations, so none when |R| ≤ the cap) and, for the driver
    path, the type-set counts."""
    from pyspark.sql import functions as F

    parts = {"counts": counts, "tails": tails}
    if hubs_possible:
        parts["hubs"] = hubs.agg(F.count(F.lit(1)).alias("n"))
    if on_driver:
        parts["combos"] = combos
    return parts


def spark_passes(spark, cfg: Mapping, paths: tuple[str, str], n_rel: int, on_driver: bool):
    """The passes in Spark: ``Passes`` collected by one query, the (counts, hub, combos)
    DataFrames the Spark path reads again, and the DataFrames it keeps cached."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    entities_path, triples_path = paths
    triples = spark.read.parquet(triples_path).select("s", "r", "o")
    sets, cap_e = _relation_sets(_entity_relations(_roles(triples))), int(cfg["max_relations_per_entity"])
    hubs = sets.filter(F.size("rs") > cap_e)
    hub = hubs.select("e", F.explode("rs.r").alias("r"))
    combos = _type_combos(spark, triples, entities_path, cfg["type_rule"])
    counts, cached = _entity_counts(sets, cap_e), []
    if not on_driver:  # its entity pairs are read again: kept from this first pass
        counts = counts.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(counts)
    # the Spark path keeps its entity pairs (up to |R|²/2) in Spark: only the facts come back
    wanted = counts if on_driver else counts.filter(F.col("b") < 0)
    collected = _collect_together(_first_query(wanted, _tail_histogram(sets), hubs, combos,
                                               n_rel > cap_e, on_driver))
    basic, entity_pairs = _split_counts(collected["counts"], collected["tails"])
    n_hubs = collected["hubs"]["n"][0].as_py() if n_rel > cap_e else 0

    def hub_shared(pairs: Iterable[tuple[int, int]]) -> list[tuple[int, int, int]]:
        pairs_df = spark.createDataFrame(sorted(pairs), "r_i long, r_j long")
        return [(row["r_i"], row["r_j"], row["shared_hub"])
                for row in _hub_shared(hub, pairs_df).toArrow().to_pylist()]

    passes = Passes(basic, entity_pairs if on_driver else None, collected.get("combos"),
                    n_hubs, hub_shared)
    return passes, (counts, hub, combos), cached


def signals_on_spark(spark, relations: pa.Table, passes: Passes, frames: tuple, transe: list,
              cfg: Mapping, report: dict):
    """P_r collected (|R|-sized), candidates and pair signals as DataFrames."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    counts, hub, combos = frames
    basic = passes.basic
    entity_pairs = counts.filter(F.col("b") >= 0).select(
        F.col("a").alias("r_i"), F.col("b").alias("r_j"), F.col("entities").alias("shared_nonhub"))
    tp = _spark_type_pairs(spark, combos, basic).persist(StorageLevel.MEMORY_AND_DISK)
    tp_rows = tp.toArrow()
    stats = stats_table(relations, basic, tp_rows)
    sources = [entity_pairs.select("r_i", "r_j", F.lit("entity").alias("source")),
               _spark_type_candidates(spark, tp, tp_rows, cfg, report)
               .select("r_i", "r_j", F.lit("type").alias("source"))]
    if transe:
        sources.append(spark.createDataFrame(transe, "r_i long, r_j long")
                       .select("r_i", "r_j", F.lit("transe").alias("source")))
    cand = sources[0]
    for extra in sources[1:]:
        cand = cand.unionByName(extra)
    cand = (cand.groupBy("r_i", "r_j")
            .agg(F.concat_ws(",", F.array_sort(F.collect_set("source"))).alias("source"))
            .persist(StorageLevel.MEMORY_AND_DISK))
    shared = cand.join(entity_pairs, ["r_i", "r_j"], "left").select(
        "r_i", "r_j", "source", F.coalesce("shared_nonhub", F.lit(0)).alias("shared_nonhub"))
    if report["hub_entities_skipped"]:
        shared = shared.join(_hub_shared(hub, cand), ["r_i", "r_j"], "left")
    else:
        shared = shared.withColumn("shared_hub", F.lit(None).cast("long"))
    pairs = _spark_signals(spark, shared, cand, tp, stats, tp_rows)
    return stats, pairs, [tp, cand]


def _spark_type_pairs(spark, combos, basic: pa.Table):
    """(r, head_type, tail_type, p): the type-set counts spread over their type pairs."""
    from pyspark.sql import functions as F

    spread = (combos
              .select("r", F.explode("hts").alias("head_type"), "tts",
                      (F.col("c") / (F.size("hts") * F.size("tts"))).alias("w"))
              .select("r", "head_type", F.explode("tts").alias("tail_type"), "w")
              .groupBy("r", "head_type", "tail_type").agg(F.sum("w").alias("w")))
    n_r = spark.createDataFrame(basic.select(["r", "triples"]).to_pylist(), "r long, triples long")
    return (spread.join(F.broadcast(n_r), "r")
            .select("r", "head_type", "tail_type",
                    F.round(F.col("w") / F.col("triples"), DIGITS).alias("p")))


def _spark_type_candidates(spark, tp, tp_rows: pa.Table, cfg: Mapping, report: dict):
    """(r_i, r_j) sharing a type pair of mass ≥ the floor; the collected ``tp_rows`` say which
    type pairs are shared too widely to propose any."""
    from pyspark.sql import functions as F

    cap_t, floor = int(cfg["max_relations_per_type_pair"]), float(cfg["type_pair_min_share"])
    tp_keep = tp_rows.filter(pc.greater_equal(tp_rows.column("p"), floor))
    per_type_pair = tp_keep.group_by(["head_type", "tail_type"]).aggregate([("r", "count")])
    wide = per_type_pair.filter(pc.greater(per_type_pair.column("r_count"), cap_t))
    report["hub_type_pairs_skipped"] = wide.num_rows
    tpc = tp.filter(F.col("p") >= floor).select("r", "head_type", "tail_type")
    if wide.num_rows:
        tpc = tpc.join(F.broadcast(spark.createDataFrame(
            wide.select(["head_type", "tail_type"]).to_pylist(), "head_type string, tail_type string")),
            ["head_type", "tail_type"], "left_anti")
    ta, tb = tpc.alias("ta"), tpc.alias("tb")
    return (ta.join(tb, (F.col("ta.head_type") == F.col("tb.head_type"))
                    & (F.col("ta.tail_type") == F.col("tb.tail_type")) & (F.col("ta.r") < F.col("tb.r")))
            .select(F.col("ta.r").alias("r_i"), F.col("tb.r").alias("r_j")))


def _spark_signals(spark, shared, cand, tp, stats: pa.Table, tp_rows: pa.Table):
    """relation_pairs as a DataFrame: Jaccard from the shared counts, NMI = 1 − JSD_bits from
    the overlap of the two distributions (the parts outside it add half their mass)."""
    from pyspark.sql import functions as F

    tp_i = tp.select(F.col("r").alias("r_i"), "head_type", "tail_type", "p")
    tp_j = tp.select(F.col("r").alias("r_j"), "head_type", "tail_type", F.col("p").alias("q"))
    m = (F.col("p") + F.col("q")) / 2.0
    overlap = (cand.select("r_i", "r_j").join(tp_i, "r_i")
               .join(tp_j, ["r_j", "head_type", "tail_type"]).groupBy("r_i", "r_j")
               .agg(F.sum("p").alias("sp"), F.sum("q").alias("sq"),
                    F.sum(F.col("p") * F.log2(F.col("p") / m)
                          + F.col("q") * F.log2(F.col("q") / m)).alias("kl")))
    mass = {r: p for r, p in zip(*_masses(tp_rows))}
    per_rel = spark.createDataFrame(
        [(r, n, mass.get(r, 0.0)) for r, n in zip(stats.column("r").to_pylist(),
                                                  stats.column("entities").to_pylist())],
        "r long, entities long, mass double")
    side_i = F.broadcast(per_rel.select(F.col("r").alias("r_i"), F.col("entities").alias("n_i"),
                                        F.col("mass").alias("m_i")))
    side_j = F.broadcast(per_rel.select(F.col("r").alias("r_j"), F.col("entities").alias("n_j"),
                                        F.col("mass").alias("m_j")))
    shared_n = F.col("shared_nonhub") + F.coalesce("shared_hub", F.lit(0))
    union = F.col("n_i") + F.col("n_j") - F.col("shared_entities")
    jsd = 0.5 * ((F.col("m_i") - F.col("sp")) + (F.col("m_j") - F.col("sq")) + F.col("kl"))
    return (shared.join(overlap, ["r_i", "r_j"], "left")
            .join(side_i, "r_i", "left").join(side_j, "r_j", "left")
            .fillna(0.0, ["sp", "sq", "kl", "m_i", "m_j"]).fillna(0, ["n_i", "n_j"])
            .withColumn("shared_entities", shared_n)
            .select(F.col("r_i").cast("long"), F.col("r_j").cast("long"),
                    F.col("shared_entities").cast("long"),
                    F.when(union > 0, F.col("shared_entities") / union).otherwise(F.lit(0.0))
                    .cast("double").alias("jaccard"),
                    F.when((F.col("m_i") <= 0) | (F.col("m_j") <= 0), F.lit(0.0))
                    .otherwise(F.least(F.lit(1.0), F.greatest(F.lit(0.0), 1.0 - jsd)))
                    .cast("double").alias("nmi"),
                    "source"))


def _masses(tp_rows: pa.Table) -> tuple[list, list]:
    """(relations, total probability mass of each): 1, up to rounding, for one with triples."""
    if not tp_rows.num_rows:
        return [], []
    sums = tp_rows.group_by("r").aggregate([("p", "sum")])
    return sums.column("r").to_pylist(), sums.column("p_sum").to_pylist()


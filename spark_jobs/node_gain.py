"""Stage ``node_gain`` (Spark SQL, DESIGN §2.6): the node gain μ of every entity.

    μ(v) = (1 + ln(deg_in(v) + 1)) · div(v),    div(v) = in_relations(v) / |R*|

computed on the canonical triples **with inverse edges**, because TAIMR (runtime/taimr.py)
walks edges in both directions: a triple (s, r, o) gives o an incoming edge labelled
(r, forward) and s an incoming edge labelled (r, inverse).

* ``deg_in(v)``       — incoming edges of v, inverse edges included (a self-loop counts twice);
* ``in_relations(v)`` — distinct incoming (relation, direction) labels of v;
* ``|R*|``            — rows of the canonical ``relations`` table. Inverse labels are **not**
  counted in the denominator (DESIGN's reading), so div ranges over [0, 2]: a node entered by
  r forward and by r backward has two labels over one relation.

Every entity gets a row. An entity without any edge has deg_in 0, in_relations 0 and μ = 0;
with inverse edges it is exactly a node no path can reach, so the path scorer never takes
log μ of 0 (it refuses a graph that puts μ = 0 on an edge's target).

Report: rows, entities_without_edges, edges (with inverses), relations (|R*|), the min/mean/max
of μ over all rows and the smallest μ of a node with edges, step seconds.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.stage import Laps, StageError, stage_input
from runtime.contract import check_schema, table_files

SINGLE_FILE_ENTITIES = 1_000_000  # up to this many entities: one sorted output file


def _rows(path: Path) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in table_files(path))


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from spark_jobs.session import get_spark

    lap = Laps()
    ent_path, rel_path, tri_path = (stage_input(inputs, "node_gain", n)
                                      for n in ("entities", "relations", "triples"))
    out_path = Path(out_dir) / "node_gain.parquet"
    n_entities, n_relations = _rows(ent_path), _rows(rel_path)

    spark = get_spark(dict(config), "lokg-node_gain")
    triples = spark.read.parquet(str(tri_path)).select("s", "r", "o")
    incoming = (triples.select(F.col("o").alias("id"), "r", F.lit(False).alias("inverse"))
                .unionAll(triples.select(F.col("s").alias("id"), "r", F.lit(True).alias("inverse"))))
    checked = Observation("node_gain_input")  # id ranges, observed in the same pass as μ
    incoming = incoming.observe(checked, F.count(F.lit(1)).alias("edges"),
                                F.min("id").alias("e_lo"), F.max("id").alias("e_hi"),
                                F.min("r").alias("r_lo"), F.max("r").alias("r_hi"))
    per_label = incoming.groupBy("id", "r", "inverse").agg(F.count(F.lit(1)).alias("c"))
    per_node = per_label.groupBy("id").agg(F.sum("c").alias("deg_in"),
                                           F.count(F.lit(1)).alias("in_relations"))
    gain = (spark.read.parquet(str(ent_path)).select("id")
            .join(per_node, "id", "left")
            .fillna(0, ["deg_in", "in_relations"])
            .select(F.col("id").cast("long"), F.col("deg_in").cast("long"),
                    F.col("in_relations").cast("long"),
                    ((1.0 + F.log1p(F.col("deg_in"))) * F.col("in_relations")
                     / F.lit(float(max(n_relations, 1)))).cast("double").alias("mu")))
    gain = (gain.coalesce(1).sortWithinPartitions("id") if n_entities <= SINGLE_FILE_ENTITIES
            else gain.orderBy("id"))
    observed = Observation("node_gain")
    gain = gain.observe(observed, F.count(F.lit(1)).alias("rows"),
                        F.count_if(F.col("deg_in") == 0).alias("without_edges"),
                        F.min("mu").alias("mu_min"), F.avg("mu").alias("mu_mean"),
                        F.max("mu").alias("mu_max"),
                        F.min(F.when(F.col("deg_in") > 0, F.col("mu"))).alias("mu_min_reached"))
    gain.write.mode("overwrite").parquet(str(out_path))
    bounds, stats = checked.get, observed.get
    lap("gain_and_write")
    if bounds["edges"]:
        problem = None
        if bounds["r_lo"] < 0 or bounds["r_hi"] >= n_relations:
            problem = (f"relation ids in [{bounds['r_lo']}, {bounds['r_hi']}] outside the "
                       f"{n_relations} canonical relations of {rel_path}")
        elif bounds["e_lo"] < 0 or bounds["e_hi"] >= n_entities:
            problem = (f"entity ids in [{bounds['e_lo']}, {bounds['e_hi']}] outside the "
                       f"{n_entities} entities of {ent_path}")
        if problem:
            shutil.rmtree(out_path, ignore_errors=True)
            raise StageError(f"{tri_path}: {problem}")
    files = table_files(out_path)
    check_schema("node_gain", pq.read_schema(files[0]), files[0])

    report = {
        "rows": int(stats["rows"]),
        "entities_without_edges": int(stats["without_edges"]),
        "edges": int(bounds["edges"]),
        "relations": n_relations,
        "div_denominator": "|R*| = rows of relations; inverse labels not counted (div <= 2)",
        "mu_min": float(stats["mu_min"] or 0.0),
        "mu_mean": float(stats["mu_mean"] or 0.0),
        "mu_max": float(stats["mu_max"] or 0.0),
        "mu_min_reached": float(stats["mu_min_reached"] or 0.0),
        "step_seconds": lap.seconds,
        "seconds": round(sum(lap.seconds.values()), 3),
    }
    return {"outputs": {"node_gain": str(out_path)}, "report": report}


if __name__ == "__main__":
    from pipeline.driver import stage_main

    stage_main("node_gain")

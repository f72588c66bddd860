"""Stage ``node_gain`` (Spark SQL): the node gain μ of every entity.

    μ(v) = (1 + ln(deg_in(v) + 1)) · div(v),    div(v) = in_relations(v) / |R*|

computed on the canonical triples **with inverse edges**, because TAIMR (runtime/taimr.py)
walks edges in both directions: a triple (s, r, o) gives o an incoming edge labelled
(r, forward) and s an incoming edge labelled (r, inverse).

* ``deg_in(v)``       — incoming edges of v, inverse edges included (a self-loop counts twice);
* ``in_relations(v)`` — distinct incoming (relation, direction) labels of v;
* ``|R*|``            — rows of the canonical ``relations`` table. Inverse labels are **not**
  counted in the denominator, so div ranges over [0, 2]: a node entered by
  r forward and by r backward has two labels over one relation.

Every entity gets a row. An entity without any edge has deg_in 0, in_relations 0 and μ = 0;
with inverse edges it is exactly a node no path can reach, so the path scorer never takes
log μ of 0 (it refuses a graph that puts μ = 0 on an edge's target).

Refresh (``previous:`` inputs: same code and settings, changed triples; pipeline/refresh.py).
A row depends on the entity's own incoming edges and on |R*| only — nothing else is global —
so when the previous build had as many relations, the stage moves the previous build's ids to
this build's by key (entities by key, relations by name: ids are ranks, and shift when a key
comes or goes), compares the two triple tables on the driver in this build's ids (multisets of
(s, r, o): scos_merge may renumber relations, so the ingest change set alone would miss a
triple whose relation was merged differently), counts deg_in and in_relations anew for the
endpoints of every changed triple (o: forward, s: inverse) and for the entities new to this
build, and copies every other row from the previous build under its new id. μ of the
recomputed rows has the bits of a full run's (Java's ``StrictMath.log1p`` differs from numpy's
in the last bit for some degrees: the Spark expression, or its fdlibm port on the driver), so
the table equals a full run's row for row. Otherwise —
another relation count, or more than ``common.stage.PARTIAL_MAX_SHARE`` of the entities
touched — it runs in full.

Paths: up to ``node_gain.driver_max_triples`` triples the stage runs on the driver with
numpy, full and partial (``spark_jobs.node_gain_driver``: μ by fdlibm's log1p, the bits Spark's
``StrictMath.log1p`` gives; no Spark session, so a small refresh pays no JVM start here); above,
in Spark, the partial path's μ through the same Spark expression as the full one.

Report: rows, entities_without_edges, edges (with inverses), relations (|R*|), the min/mean/max
of μ over all rows and the smallest μ of a node with edges, ``refresh`` (full or partial, with
the changed triples and recomputed rows, or why full), ``path`` (driver or spark), step seconds.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lokg.common.stage import (PARTIAL_MAX_SHARE, Laps, StageError, changed_rows, id_translation, previous_inputs, stage_input)
from lokg.runtime.contract import check_schema, read_table, table_files, to_numpy
from lokg.spark_jobs.node_gain_driver import gain_table, mu_numpy
from lokg.spark_jobs.settings import NodeGainSettings

SINGLE_FILE_ENTITIES = 1_000_000  # up to this many entities: one sorted output file


def _rows(path: Path) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in table_files(path))


def _mu(deg_in, in_relations, n_relations: int):
    """μ as a Spark column: the one expression of the full and the partial run."""
    from pyspark.sql import functions as F

    return ((1.0 + F.log1p(deg_in)) * in_relations
            / F.lit(float(max(n_relations, 1)))).cast("double").alias("mu")


def _id_problem(bounds: dict, n_entities: int, n_relations: int, ent_path, rel_path) -> str | None:
    """What is wrong with the triples' id ranges (min/max of entity and relation ids), if any."""
    if bounds["r_lo"] < 0 or bounds["r_hi"] >= n_relations:
        return (f"relation ids in [{bounds['r_lo']}, {bounds['r_hi']}] outside the "
                f"{n_relations} canonical relations of {rel_path}")
    if bounds["e_lo"] < 0 or bounds["e_hi"] >= n_entities:
        return (f"entity ids in [{bounds['e_lo']}, {bounds['e_hi']}] outside the "
                f"{n_entities} entities of {ent_path}")
    return None


def _sro(triples: pa.Table) -> np.ndarray:
    return np.column_stack([triples[c].to_numpy().astype(np.int64) for c in ("s", "r", "o")])


def changed_endpoints(now: np.ndarray, then: np.ndarray) -> tuple[np.ndarray, int]:
    """(sorted ids of the endpoints of every triple whose count differs between two (s, r, o)
    matrices in this build's ids — an id of -1, a key gone, is no endpoint —, how many such
    distinct triples)."""
    changed = changed_rows(now, then)
    ends = np.unique(changed[:, [0, 2]])
    return ends[ends >= 0], len(changed)


def translated_triples(previous: dict, entities: np.ndarray, relations: np.ndarray) -> np.ndarray:
    """The previous build's (s, r, o) in this build's ids (``common.stage.id_translation``
    of its entities and relations; -1 for a key or name gone)."""
    sro = _sro(read_table(previous["triples"], "triples"))
    return np.column_stack([entities[sro[:, 0]], relations[sro[:, 1]], entities[sro[:, 2]]])


def _incoming_counts(triples: pa.Table, ids: np.ndarray, n_entities: int,
                     n_relations: int) -> tuple[np.ndarray, np.ndarray]:
    """deg_in and in_relations of the entities ``ids`` (inverse edges included), from the
    triples that end at them (forward) or start at them (inverse)."""
    s, r, o = (triples[c].to_numpy().astype(np.int64) for c in ("s", "r", "o"))
    mark = np.zeros(n_entities, bool)
    mark[ids] = True
    forward, inverse = mark[o], mark[s]
    node = np.concatenate([o[forward], s[inverse]])
    label = (node * n_relations + np.concatenate([r[forward], r[inverse]])) * 2 + np.concatenate(
        [np.zeros(forward.sum(), np.int64), np.ones(inverse.sum(), np.int64)])
    deg_in = np.bincount(node, minlength=n_entities)[ids]
    labels = np.bincount(np.unique(label) // (2 * n_relations), minlength=n_entities)[ids]
    return deg_in, labels


def spark_mu(spark):
    """μ of arrays (deg_in, in_relations) by the Spark expression ``_mu``, collected."""

    def mu(deg_in: np.ndarray, labels: np.ndarray, n_relations: int) -> np.ndarray:
        fresh = spark.createDataFrame(
            [(i, int(d), int(n)) for i, (d, n) in enumerate(zip(deg_in, labels))],
            "id long, deg_in long, in_relations long")
        rows = fresh.select("id", _mu(fresh["deg_in"], fresh["in_relations"], n_relations))
        return np.array([row["mu"] for row in sorted(rows.collect())], np.float64)

    return mu


def partial_gain(mu, triples: pa.Table, current: dict, previous: dict, n_entities: int,
                 n_relations: int) -> tuple[pa.Table | None, dict]:
    """The node_gain table of a refresh from the previous build's (``previous``: its entities,
    relations, triples and node_gain; ``current``: this build's entities and relations paths),
    its rows moved to this build's ids by key; only the changed triples' endpoints and the new
    entities recomputed (μ by ``mu``: ``spark_mu`` or ``node_gain_driver.mu_numpy``, the same
    bits). None (and why) when it must run in full."""
    if _rows(previous["relations"]) != n_relations:
        return None, {"mode": "full", "reason": "another relation count (|R*| enters every μ)"}
    entities, relations = (id_translation(read_table(current[n], columns=["id", key]),
                                          read_table(previous[n], columns=["id", key]))
                           for n, key in (("entities", "key"), ("relations", "name")))
    touched, n_changed = changed_endpoints(_sro(triples),
                                           translated_triples(previous, entities, relations))
    old = read_table(previous["node_gain"], "node_gain")
    moved = entities[old["id"].to_numpy()]
    kept = moved >= 0
    without_row = np.ones(n_entities, bool)
    without_row[moved[kept]] = False  # entities new to this build
    touched = np.union1d(touched, np.flatnonzero(without_row))
    if len(touched) > PARTIAL_MAX_SHARE * n_entities:
        return None, {"mode": "full",
                      "reason": f"more than {PARTIAL_MAX_SHARE:.0%} of the entities touched"}
    deg_in, labels = _incoming_counts(triples, touched, n_entities, n_relations)
    columns = {}
    for name, values in (("deg_in", deg_in), ("in_relations", labels),
                         ("mu", mu(deg_in, labels, n_relations))):
        column = np.zeros(n_entities, old[name].to_numpy().dtype)
        column[moved[kept]] = old[name].to_numpy()[kept]
        column[touched] = values
        columns[name] = column
    table = pa.table({"id": np.arange(n_entities, dtype=np.int64), **columns}).cast(old.schema)
    return table, {"mode": "partial", "changed_triples": n_changed, "recomputed": len(touched),
                   "ids_moved": int(np.count_nonzero(moved[kept] != old["id"].to_numpy()[kept]))}


def _full_gain(spark, ent_path: Path, tri_path: Path, n_entities: int, n_relations: int,
               out_path: Path) -> tuple[dict, dict]:
    """node_gain of every entity with Spark, written to ``out_path``: (the triples' id ranges
    and edge count, the table's statistics), observed in the same pass."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

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
                    _mu(F.col("deg_in"), F.col("in_relations"), n_relations)))
    gain = (gain.coalesce(1).sortWithinPartitions("id") if n_entities <= SINGLE_FILE_ENTITIES
            else gain.orderBy("id"))
    observed = Observation("node_gain")
    gain = gain.observe(observed, F.count(F.lit(1)).alias("rows"),
                        F.count_if(F.col("deg_in") == 0).alias("without_edges"),
                        F.min("mu").alias("mu_min"), F.avg("mu").alias("mu_mean"),
                        F.max("mu").alias("mu_max"),
                        F.min(F.when(F.col("deg_in") > 0, F.col("mu"))).alias("mu_min_reached"))
    gain.write.mode("overwrite").parquet(str(out_path))
    return checked.get, observed.get


def _table_stats(table: pa.Table) -> dict:
    """The statistics ``_full_gain`` observes, of a node_gain table in Arrow."""
    deg, mu = table["deg_in"].to_numpy(), table["mu"].to_numpy()
    reached = mu[deg > 0]
    return {"rows": table.num_rows, "without_edges": int((deg == 0).sum()),
            "mu_min": mu.min() if len(mu) else None, "mu_mean": mu.mean() if len(mu) else None,
            "mu_max": mu.max() if len(mu) else None,
            "mu_min_reached": reached.min() if len(reached) else None}


def _bounds(triples: pa.Table) -> dict:
    """The id ranges and edge count ``_full_gain`` observes, of triples in Arrow."""
    ends = [triples[c].to_numpy() for c in ("s", "o")]
    rel = triples["r"].to_numpy()
    if not len(rel):
        return {"edges": 0}
    return {"edges": 2 * len(rel), "e_lo": int(min(e.min() for e in ends)),
            "e_hi": int(max(e.max() for e in ends)), "r_lo": int(rel.min()), "r_hi": int(rel.max())}


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    lap = Laps()
    ent_path, rel_path, tri_path = (stage_input(inputs, "node_gain", n)
                                      for n in ("entities", "relations", "triples"))
    out_path = Path(out_dir) / "node_gain.parquet"
    n_entities, n_relations = _rows(ent_path), _rows(rel_path)
    on_driver = _rows(tri_path) <= NodeGainSettings.of(config, StageError).driver_max_triples
    spark = None if on_driver else _spark(config)
    previous = previous_inputs(inputs, "entities", "relations", "triples", "node_gain")
    table, refresh, bounds = None, {"mode": "full", "reason": "no previous build"}, None
    if previous is not None or on_driver:
        triples = read_table(tri_path, "triples")
        bounds = _bounds(triples)
        _refuse_ids(bounds, n_entities, n_relations, (ent_path, rel_path, tri_path))
    if previous is not None:
        current = {"entities": ent_path, "relations": rel_path}
        table, refresh = partial_gain(mu_numpy if on_driver else spark_mu(spark), triples,
                                      current, previous, n_entities, n_relations)
        lap("partial")
    if table is None and on_driver:
        ids = to_numpy(read_table(ent_path, columns=["id"])["id"])
        table = gain_table(ids, _incoming_counts(triples, ids, n_entities, n_relations),
                           n_relations)
        lap("gain")
    if table is None:
        bounds, stats = _full_gain(spark, ent_path, tri_path, n_entities, n_relations, out_path)
        lap("gain_and_write")
        _refuse_ids(bounds, n_entities, n_relations, (ent_path, rel_path, tri_path), out_path)
    else:
        out_path.mkdir(parents=True)
        pq.write_table(table, out_path / "part-00000.parquet")
        stats = _table_stats(table)
        lap("write")
    files = table_files(out_path)
    check_schema("node_gain", pq.read_schema(files[0]), files[0])
    report = _report(stats, bounds, n_relations, refresh, lap.seconds)
    report["path"] = "driver" if on_driver else "spark"
    return {"outputs": {"node_gain": str(out_path)}, "report": report}


def _spark(config: Mapping):
    from lokg.spark_jobs.session import get_spark

    return get_spark(dict(config), "lokg-node_gain")


def _refuse_ids(bounds: dict, n_entities: int, n_relations: int, paths: tuple,
                written: Path | None = None) -> None:
    """A StageError naming the triples when their ids leave the entities' or relations' range
    (``written``, a table already written from them, removed first)."""
    ent_path, rel_path, tri_path = paths
    problem = bounds["edges"] and _id_problem(bounds, n_entities, n_relations, ent_path, rel_path)
    if problem:
        if written is not None:
            shutil.rmtree(written, ignore_errors=True)
        raise StageError(f"{tri_path}: {problem}")


def _report(stats: dict, bounds: dict, n_relations: int, refresh: dict, seconds: dict) -> dict:
    return {
        "rows": int(stats["rows"]),
        "entities_without_edges": int(stats["without_edges"]),
        "edges": int(bounds["edges"]),
        "relations": n_relations,
        "div_denominator": "|R*| = rows of relations; inverse labels not counted (div <= 2)",
        "mu_min": float(stats["mu_min"] or 0.0),
        "mu_mean": float(stats["mu_mean"] or 0.0),
        "mu_max": float(stats["mu_max"] or 0.0),
        "mu_min_reached": float(stats["mu_min_reached"] or 0.0),
        "refresh": refresh,
        "step_seconds": seconds,
        "seconds": round(sum(seconds.values()), 3),
    }

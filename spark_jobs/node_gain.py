"""Stage ``node_gain``: the node gain μ of every entity.

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
triple whose relation was merged differently), computes the rows of the endpoints of every
changed triple (o: forward, s: inverse) and of the entities new to this build by the full run's
SQL restricted to those nodes (:func:`gain_sql`), and copies every other row from the previous
build under its new id: the table equals a full run's row for row. Otherwise — another relation
count, or more than ``common.stage.PARTIAL_MAX_SHARE`` of the entities touched — it runs in
full.

The rule is SQL, run by the build's engine (spark_jobs/engine.py: DuckDB or Spark SQL, the same
text). ``log1p(deg_in)`` is taken on the driver (numpy) for the distinct degrees, a table of a
few thousand rows at most that the SQL joins: DuckDB has no ``log1p`` and Spark's
(``StrictMath``) differs from the C library's in the last bit for some degrees, so μ gets the
same bits on either engine, full or partial.

Report: rows, entities_without_edges, edges (with inverses), relations (|R*|), the min/mean/max
of μ over all rows and the smallest μ of a node with edges, ``refresh`` (full or partial, with
the changed triples and recomputed rows, or why full), ``engine``, step seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lokg.common.stage import (PARTIAL_MAX_SHARE, Laps, StageError, changed_rows, id_translation,
                               previous_inputs, stage_input)
from lokg.runtime.contract import (TABLE_SCHEMAS, check_schema, read_table, table_files,
                                   table_rows)
from lokg.spark_jobs.engine import Engine, open_engine

#: The contract's node_gain with the counts not null (an entity without edges counts 0)
COUNTED = pa.schema([f.with_nullable(f.name == "id" or f.name == "mu")
                     for f in TABLE_SCHEMAS["node_gain"]])

#: Each entity's incoming edges, the inverse ones included: (id, r, inverse)
INCOMING = ("SELECT o AS id, r, false AS inverse FROM triples "
            "UNION ALL SELECT s AS id, r, true AS inverse FROM triples")


def counts_sql(nodes: str) -> str:
    """deg_in and in_relations of the ids of table ``nodes`` (every entity, or the nodes a
    refresh recomputes; 0 for one without edges), from the view ``incoming``."""
    only = "" if nodes == "entities" else f" WHERE id IN (SELECT id FROM {nodes})"
    per_node = ("SELECT id, CAST(sum(c) AS BIGINT) AS deg_in, count(*) AS in_relations FROM "
                f"(SELECT id, r, inverse, count(*) AS c FROM incoming{only} "
                "GROUP BY id, r, inverse) GROUP BY id")
    return ("SELECT CAST(e.id AS BIGINT) AS id, coalesce(g.deg_in, CAST(0 AS BIGINT)) AS deg_in, "
            "coalesce(g.in_relations, CAST(0 AS BIGINT)) AS in_relations "
            f"FROM {nodes} e LEFT JOIN ({per_node}) g ON e.id = g.id")


def gain_sql(n_relations: int) -> str:
    """μ of the rows of ``counted``: (1 + log1p(deg_in)) · in_relations / |R*| on doubles, in
    that order, log1p from the table ``log1p_of`` (degree → log1p)."""
    return ("SELECT n.id, n.deg_in, n.in_relations, (CAST(1 AS DOUBLE) + l.log1p) "
            f"* CAST(n.in_relations AS DOUBLE) / CAST({max(n_relations, 1)} AS DOUBLE) AS mu "
            "FROM counted n JOIN log1p_of l ON n.deg_in = l.deg_in")


def compute_gain(engine: Engine, nodes: str, n_relations: int) -> None:
    """The view ``gain``: id, deg_in, in_relations and μ of the ids of table ``nodes``; log1p
    taken with numpy for the distinct degrees, so either engine gives the same bits."""
    engine.view("incoming", INCOMING)
    engine.view("counted", counts_sql(nodes), materialise=True)
    degrees = engine.fetch("SELECT DISTINCT deg_in FROM counted")["deg_in"].to_numpy()
    engine.register_arrow("log1p_of", pa.table({
        "deg_in": pa.array(degrees, pa.int64()),
        "log1p": pa.array(np.log1p(degrees.astype(np.float64)), pa.float64())}))
    engine.view("gain", gain_sql(n_relations))


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


def partial_gain(engine: Engine, current: dict, previous: dict, n_entities: int,
                 n_relations: int) -> tuple[pa.Table | None, dict]:
    """The node_gain table of a refresh from the previous build's (``previous``: its entities,
    relations, triples and node_gain; ``current``: this build's entities, relations and
    triples paths), its rows moved to this build's ids by key; only the changed triples'
    endpoints and the new entities computed (:func:`compute_gain` on the table ``nodes``).
    None (and why) when it must run in full."""
    if table_rows(previous["relations"]) != n_relations:
        return None, {"mode": "full", "reason": "another relation count (|R*| enters every μ)"}
    entities, relations = (id_translation(read_table(current[n], columns=["id", key]),
                                          read_table(previous[n], columns=["id", key]))
                           for n, key in (("entities", "key"), ("relations", "name")))
    touched, n_changed = changed_endpoints(_sro(read_table(current["triples"], "triples")),
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
    engine.register_arrow("nodes", pa.table({"id": pa.array(touched, pa.int64())}))
    compute_gain(engine, "nodes", n_relations)
    fresh = engine.fetch("SELECT * FROM gain ORDER BY id")
    columns = {}
    for name in ("deg_in", "in_relations", "mu"):
        column = np.zeros(n_entities, old[name].to_numpy().dtype)
        column[moved[kept]] = old[name].to_numpy()[kept]
        column[touched] = fresh[name].to_numpy()
        columns[name] = column
    table = pa.table({"id": np.arange(n_entities, dtype=np.int64), **columns}).cast(COUNTED)
    return table, {"mode": "partial", "changed_triples": n_changed, "recomputed": len(touched),
                   "ids_moved": int(np.count_nonzero(moved[kept] != old["id"].to_numpy()[kept]))}


#: The id ranges and edge count (with inverses) of the triples
BOUNDS = ("SELECT 2 * count(*) AS edges, least(min(s), min(o)) AS e_lo, "
          "greatest(max(s), max(o)) AS e_hi, min(r) AS r_lo, max(r) AS r_hi FROM triples")
#: The report's statistics of a written node_gain table (``written``)
STATS = ("SELECT count(*) AS rows, count(*) FILTER (WHERE deg_in = 0) AS without_edges, "
         "min(mu) AS mu_min, avg(mu) AS mu_mean, max(mu) AS mu_max, "
         "min(mu) FILTER (WHERE deg_in > 0) AS mu_min_reached FROM written")


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    lap = Laps()
    ent_path, rel_path, tri_path = (stage_input(inputs, "node_gain", n)
                                      for n in ("entities", "relations", "triples"))
    out_path = Path(out_dir) / "node_gain.parquet"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    n_entities, n_relations = table_rows(ent_path), table_rows(rel_path)
    previous = previous_inputs(inputs, "entities", "relations", "triples", "node_gain")
    table, refresh = None, {"mode": "full", "reason": "no previous build"}
    with open_engine(dict(config), Path(out_dir)) as engine:
        engine.register("entities", ent_path)
        engine.register("triples", tri_path)
        bounds = engine.fetch(BOUNDS).to_pylist()[0]
        _refuse_ids(bounds, n_entities, n_relations, (ent_path, rel_path, tri_path))
        lap("check_ids")
        if previous is not None:
            current = {"entities": ent_path, "relations": rel_path, "triples": tri_path}
            table, refresh = partial_gain(engine, current, previous, n_entities, n_relations)
            lap("partial")
        if table is None:
            compute_gain(engine, "entities", n_relations)
            engine.write("SELECT * FROM gain", out_path, order_by=["id"], schema=COUNTED)
        else:
            out_path.mkdir(parents=True)
            pq.write_table(table, out_path / "part-00000.parquet")
        lap("gain_and_write")
        engine.register("written", out_path)
        stats = engine.fetch(STATS).to_pylist()[0]
    files = table_files(out_path)
    check_schema("node_gain", pq.read_schema(files[0]), files[0])
    report = _report(stats, bounds, n_relations, refresh, lap.seconds)
    report["engine"] = engine.name
    return {"outputs": {"node_gain": str(out_path)}, "report": report}


def _refuse_ids(bounds: dict, n_entities: int, n_relations: int, paths: tuple) -> None:
    """A StageError naming the triples when their ids leave the entities' or relations'
    range."""
    ent_path, rel_path, tri_path = paths
    problem = bounds["edges"] and _id_problem(bounds, n_entities, n_relations, ent_path, rel_path)
    if problem:
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

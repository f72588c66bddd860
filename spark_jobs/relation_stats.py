"""Stage ``relation_stats``: the per-relation and pairwise SCOS signals, in SQL.

Per relation r (counts over the distinct triples of ``triples``):

* ``entropy`` — tail conditional entropy H(r) = −Σ_o p(o|r) ln p(o|r) with
  p(o|r) = |{s : (s,r,o)}| / |{(s,o) : (s,r,o)}|, in **nats** (natural log). SCOS only uses H
  through ratios (δ_ij) and through L_info, which is normalised by Σ H, so the unit cancels;
* ``type_pairs`` — the distribution P_r over (head type, tail type). Entities may carry several
  types; rule ``spread`` (default) gives each triple (s,r,o) weight 1 and spreads it evenly over
  T(s) × T(o), i.e. 1/(|T(s)|·|T(o)|) per type pair; rule ``min`` keeps only the smallest type
  name of each entity. An untyped entity (or one missing from ``entities``) has the single
  type ``∅``;
* ``triples``, ``heads`` (distinct s), ``tails`` (distinct o), ``entities`` = |heads ∪ tails|.

Candidate pairs (r_i < r_j) — never a |R|² cross join:

* ``entity``: relations that touch a common entity (self-join of entity → relations within each
  entity), skipping hub entities touching more than ``max_relations_per_entity`` relations;
* ``type``: relations sharing a (head type, tail type) pair of mass ≥ ``type_pair_min_share`` in
  both, skipping type pairs shared by more than ``max_relations_per_type_pair`` relations;
* ``transe``: each relation's ``transe_neighbours`` nearest neighbours by cosine of the TransE
  relation embeddings, when the input ``relation_embeddings`` (.npy, [num_relations, dim],
  row = relation id) exists.

For every candidate pair: ``shared_entities`` = |E_i ∩ E_j| counted exactly (non-hub entities
from the self-join, hub entities by a join of the hub's relations with the candidate pairs),
``jaccard`` = shared / (|E_i| + |E_j| − shared) and ``nmi`` = 1 − JSD_bits(P_ri, P_rj) (0 when
either relation has no triples). ``source`` lists the generators that proposed the pair,
comma-separated and sorted (e.g. ``entity,type``).

How: every rule is one SQL statement in DuckDB's dialect (``spark_jobs.engine``: DuckDB on one
node, Spark SQL on a cluster, the same text). The triples are distinct by contract (ingest
de-duplicates them), so nothing is de-duplicated here. One pass makes each (entity, relation)
row with its role and tail count (``er``); per-relation counts, the tail histograms, entity
pairs, hubs come from it; P_r from the triples joined with the entities' numbered type sets.
Two |R|-sized steps are Python, the single place each is computed: H(r) summed exactly
(``tail_entropies``, ``math.fsum``) from the SQL tail histogram, and the TransE neighbours
(``transe_neighbour_pairs``).

The same rules measure clusters of relations for scos_merge (``ClusterSignals``: the triples
with a cluster's relations as one relation), so a merged cluster has no signals of its own.

Every sum of doubles is independent of the order an engine meets the rows in, so that every
run and either engine write the same values: H(r) exactly; P_r from exact integer counts, its
few terms per type pair added in ascending order (``engine.ordered_sum``); the JSD's terms of
the type pairs both relations hold likewise, the half-masses of those only one holds exactly
as integers (P_r in units of 10^-``DIGITS``). H(r) and P_r are rounded to ``DIGITS``
decimals; the logarithms are the engines' own (``ln``), which may differ in the last bit.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lokg.common.stage import Laps, StageError
from lokg.runtime.contract import TABLE_SCHEMAS, StoreError, read_table, write_table
from lokg.spark_jobs.engine import Engine, literal, open_engine, ordered_sum
from lokg.spark_jobs.settings import RelationStatsSettings

#: Decimals kept of H(r) and of P_r, so that both engines write the same values.
DIGITS = 12

#: The single type of an entity without any (``type_rule``).
UNTYPED = "∅"


def settings(config: Mapping) -> RelationStatsSettings:
    return RelationStatsSettings.of(config, StageError)


def transe_neighbour_pairs(emb: np.ndarray, relation_ids: np.ndarray, k: int
                           ) -> list[tuple[int, int]]:
    """Pairs (i < j) among ``relation_ids`` where j is among i's k nearest by cosine or vice versa.

    One kNN implementation serves TransE and SCOS: ``common.neighbours.nearest_relations``
    (blockwise, never the |R|² matrix; zero vectors get no neighbours).
    """
    from lokg.common.neighbours import nearest_relations

    ids = np.asarray(relation_ids, dtype=np.int64)
    if len(ids) and ids.max() >= emb.shape[0]:
        raise StoreError(
            f"relation_embeddings has {emb.shape[0]} rows but relation id {int(ids.max())} exists"
        )
    present = np.zeros_like(emb, dtype=np.float32)
    present[ids] = emb[ids]
    return sorted({(min(i, j), max(i, j)) for i, j, _ in nearest_relations(present, k)})


def tail_entropies(hist: pa.Table) -> pa.Table:
    """(r, entropy): H(r) in nats of each relation from its tail histogram (r, c, k: ``k``
    entities are the tail of ``c`` triples of r), ln n − Σ k·c·ln c / n with n = Σ k·c, the sum
    exactly rounded (``math.fsum``: independent of the rows' order), rounded to ``DIGITS``."""
    terms: dict[int, list[float]] = {}
    n: dict[int, int] = {}
    for ri, ci, ki in zip(*(hist.column(name).to_pylist() for name in "rck")):
        terms.setdefault(ri, []).append(ki * ci * math.log(ci))
        n[ri] = n.get(ri, 0) + ki * ci
    h = [round(max(0.0, math.log(n[ri]) - math.fsum(terms[ri]) / n[ri]), DIGITS) for ri in n]
    return pa.table({"r": pa.array(list(n), pa.int64()), "entropy": pa.array(h, pa.float64())})


#: (entity, relation) rows: h = 1 where e is a head of r, c = the triples of r with tail e,
#: k = the relations e touches (over k > max_relations_per_entity: a hub)
ENTITY_RELATIONS = """
WITH er0 AS (
  SELECT e, r, max(h) AS h, CAST(sum(1 - h) AS BIGINT) AS c FROM (
    SELECT s AS e, r, 1 AS h FROM triples UNION ALL SELECT o AS e, r, 0 AS h FROM triples
  ) AS roles GROUP BY e, r)
SELECT er0.e, er0.r, er0.h, er0.c, d.k FROM er0
JOIN (SELECT e, count(*) AS k FROM er0 GROUP BY e) AS d ON d.e = er0.e"""

#: per relation: triples, distinct heads and tails, entities
FACTS = """
SELECT r, CAST(sum(c) AS BIGINT) AS triples, CAST(sum(h) AS BIGINT) AS heads,
       CAST(sum(CASE WHEN c > 0 THEN 1 ELSE 0 END) AS BIGINT) AS tails, count(*) AS entities
FROM er GROUP BY r"""

TAIL_HISTOGRAM = "SELECT r, c, count(*) AS k FROM er WHERE c > 0 GROUP BY r, c"


def canonical_types_sql(rule: str, column: str) -> str:
    """A type set from a list of types: sorted distinct non-empty types (``min``: the
    smallest alone); [] when none."""
    clean = (f"list_sort(list_distinct(list_filter(coalesce({column}, []::VARCHAR[]), "
             "lambda x: x <> '')))")
    if rule == "min":
        return (f"CASE WHEN array_length({clean}) > 0 THEN [list_min({clean})] "
                "ELSE []::VARCHAR[] END")
    return clean


def raw_types_sql(rule: str) -> str:
    """(raw, ts): each distinct ``types`` list of the entities (null as []) and its type set:
    the lists are few, so each is made canonical once, not once per entity."""
    return f"""SELECT raw, {canonical_types_sql(rule, 'raw')} AS ts FROM (
                 SELECT DISTINCT coalesce(types, []::VARCHAR[]) AS raw FROM entities) AS d"""


#: The type sets (ts, sid) numbered; [∅], of an entity without any type, is set 0
TYPE_SETS = f"""SELECT [{literal(UNTYPED)}] AS ts, 0 AS sid UNION ALL
SELECT ts, row_number() OVER (ORDER BY ts) AS sid FROM (SELECT DISTINCT ts FROM raw_types) AS d
WHERE array_length(ts) > 0 AND ts <> [{literal(UNTYPED)}]"""

#: Each entity's type set (e, sid)
TYPED = """SELECT id AS e, coalesce(s.sid, 0) AS sid FROM entities
LEFT JOIN (SELECT raw, sid FROM raw_types JOIN type_sets USING (ts)) AS s
  ON s.raw = coalesce(types, []::VARCHAR[])"""


#: P_r: the triples counted per (relation, head type set, tail type set), each count spread
#: evenly over the product of the two sets (d = |hts|·|tts| pairs) and divided by the
#: relation's triples; the counts summed exactly per (type pair, d), the few terms c/(d·n)
#: per type pair added in ascending order (``ordered_sum``). An entity missing from
#: ``entities`` has the set [∅] (0).
TYPE_PAIRS = f"""
WITH g AS (
  SELECT r, hs, os, count(*) AS c FROM (
    SELECT t.r, coalesce(h.sid, 0) AS hs, coalesce(o.sid, 0) AS os
    FROM triples t LEFT JOIN typed h ON t.s = h.e LEFT JOIN typed o ON t.o = o.e) AS tagged
  GROUP BY r, hs, os),
a AS (SELECT g.r, unnest(h.ts) AS head_type, o.ts AS tts,
             array_length(h.ts) * array_length(o.ts) AS d, g.c
      FROM g JOIN type_sets h ON h.sid = g.hs JOIN type_sets o ON o.sid = g.os),
b AS (SELECT r, head_type, unnest(tts) AS tail_type, d, c FROM a),
s AS (SELECT r, head_type, tail_type, d, CAST(sum(c) AS BIGINT) AS c FROM b
      GROUP BY r, head_type, tail_type, d)
SELECT s.r, s.head_type, s.tail_type,
       round({ordered_sum('s.c / (s.d * f.triples)')}, {DIGITS}) AS p
FROM s JOIN facts f ON f.r = s.r GROUP BY s.r, s.head_type, s.tail_type"""


def entity_pairs_sql(cap: int) -> str:
    """(r_i, r_j, shared): relations r_i < r_j and the non-hub entities touching both."""
    return f"""SELECT a.r AS r_i, b.r AS r_j, count(*) AS shared FROM er a
               JOIN er b ON a.e = b.e AND a.r < b.r WHERE a.k <= {cap} AND b.k <= {cap}
               GROUP BY a.r, b.r"""


def wide_type_pairs_sql(floor: float, cap: int) -> str:
    """The type pairs of mass ≥ ``floor`` held by more than ``cap`` relations."""
    return f"""SELECT head_type, tail_type FROM tp WHERE p >= {floor!r}
               GROUP BY head_type, tail_type HAVING count(*) > {cap}"""


def candidates_sql(floor: float) -> str:
    """(r_i, r_j, source): the pairs each generator proposes, their sources joined sorted."""
    keep = f"""(SELECT t.r, t.head_type, t.tail_type FROM tp t LEFT JOIN wide w
                ON w.head_type = t.head_type AND w.tail_type = t.tail_type
                WHERE t.p >= {floor!r} AND w.head_type IS NULL)"""
    null = "CAST(NULL AS VARCHAR)"
    return f"""
SELECT r_i, r_j, concat_ws(',', max(e), max(n), max(y)) AS source FROM (
  SELECT r_i, r_j, 'entity' AS e, {null} AS n, {null} AS y FROM entity_pairs
  UNION ALL SELECT r_i, r_j, {null}, 'transe', {null} FROM transe
  UNION ALL SELECT a.r, b.r, {null}, {null}, 'type' FROM {keep} a JOIN {keep} b
    ON a.head_type = b.head_type AND a.tail_type = b.tail_type AND a.r < b.r
) AS proposed GROUP BY r_i, r_j"""


def hub_shared_sql(cap: int) -> str:
    """(r_i, r_j, shared): the hub entities touching both relations of each candidate."""
    return f"""SELECT c.r_i, c.r_j, count(*) AS shared FROM cand c
               JOIN er h1 ON h1.r = c.r_i AND h1.k > {cap}
               JOIN er h2 ON h2.e = h1.e AND h2.r = c.r_j AND h2.k > {cap}
               GROUP BY c.r_i, c.r_j"""


#: P_r's values in units of 10^-DIGITS: integers, exactly, as P_r is rounded to DIGITS decimals
UNITS = f"CAST(round({{}} * 1e{DIGITS}) AS BIGINT)"

#: each relation's total mass of P_r, in units (``UNITS``)
MASS = f"SELECT r, CAST(sum({UNITS.format('p')}) AS BIGINT) AS m FROM tp GROUP BY r"

#: per candidate, over the type pairs both hold: ½a·log2(a/m) + ½b·log2(b/m) with
#: m = (a + b)/2 added in ascending order (``ordered_sum``), and the mass of each side there
#: in units
SHARED = f"""
SELECT r_i, r_j, {ordered_sum('term')} AS kl, CAST(sum(ua) AS BIGINT) AS ua,
       CAST(sum(ub) AS BIGINT) AS ub FROM (
  SELECT c.r_i, c.r_j, {UNITS.format('a.p')} AS ua, {UNITS.format('b.p')} AS ub,
    (CASE WHEN a.p > 0 THEN 0.5 * a.p * ln(a.p / ((a.p + b.p) / 2.0)) / ln(2.0) ELSE 0.0 END)
    + (CASE WHEN b.p > 0 THEN 0.5 * b.p * ln(b.p / ((a.p + b.p) / 2.0)) / ln(2.0) ELSE 0.0 END)
      AS term
  FROM cand c JOIN tp a ON a.r = c.r_i
  JOIN tp b ON b.r = c.r_j AND b.head_type = a.head_type AND b.tail_type = a.tail_type
) AS terms GROUP BY r_i, r_j"""

#: relation_pairs: shared entities, Jaccard and NMI = 1 − JSD_bits of every candidate, where
#: a type pair only one side holds adds half its mass to the JSD (summed exactly, in units)
PAIRS = f"""
SELECT c.r_i, c.r_j, CAST(shared AS BIGINT) AS shared_entities,
  CASE WHEN n_i + n_j - shared > 0 THEN shared / (n_i + n_j - shared) ELSE 0.0 END AS jaccard,
  CASE WHEN n_i > 0 AND n_j > 0 THEN 1.0 - least(1.0, greatest(0.0, jsd)) ELSE 0.0 END AS nmi,
  c.source
FROM (
  SELECT c.r_i, c.r_j, c.source, coalesce(ep.shared, 0) + coalesce(hs.shared, 0) AS shared,
         coalesce(fi.entities, 0) AS n_i, coalesce(fj.entities, 0) AS n_j,
         coalesce(d.kl, 0.0) + (coalesce(mi.m, 0) - coalesce(d.ua, 0)) / 2e{DIGITS}
         + (coalesce(mj.m, 0) - coalesce(d.ub, 0)) / 2e{DIGITS} AS jsd
  FROM cand c LEFT JOIN entity_pairs ep ON ep.r_i = c.r_i AND ep.r_j = c.r_j
  LEFT JOIN hub_shared hs ON hs.r_i = c.r_i AND hs.r_j = c.r_j
  LEFT JOIN shared_types d ON d.r_i = c.r_i AND d.r_j = c.r_j
  LEFT JOIN facts fi ON fi.r = c.r_i LEFT JOIN facts fj ON fj.r = c.r_j
  LEFT JOIN mass mi ON mi.r = c.r_i LEFT JOIN mass mj ON mj.r = c.r_j
) AS c"""

#: relation_stats: one row per relation of ``relations``
STATS = """
SELECT rel.id AS r, rel.name, coalesce(f.triples, 0) AS triples, coalesce(f.heads, 0) AS heads,
       coalesce(f.tails, 0) AS tails, coalesce(f.entities, 0) AS entities,
       coalesce(h.entropy, 0.0) AS entropy, d.type_pairs
FROM relations rel LEFT JOIN facts f ON f.r = rel.id LEFT JOIN entropy h ON h.r = rel.id
LEFT JOIN (SELECT r, list_sort(list({'head_type': head_type, 'tail_type': tail_type, 'p': p}))
             AS type_pairs FROM tp GROUP BY r) d ON d.r = rel.id
ORDER BY rel.id"""


def type_tables(engine: Engine, rule: str) -> None:
    """Each entity's numbered type set under ``rule``, as tables ``raw_types``, ``type_sets``
    and ``typed`` (from table ``entities``)."""
    engine.view("raw_types", raw_types_sql(rule), materialise=True)
    engine.view("type_sets", TYPE_SETS, materialise=True)
    engine.view("typed", TYPED, materialise=True)


def relation_tables(engine: Engine) -> None:
    """The (entity, relation) rows, per-relation facts, H(r) and P_r of table ``triples`` as
    tables ``er``, ``facts``, ``entropy``, ``tp`` (the type tables: ``type_tables``)."""
    engine.view("er", ENTITY_RELATIONS, materialise=True)
    engine.view("facts", FACTS, materialise=True)
    engine.register_arrow("entropy", tail_entropies(engine.fetch(TAIL_HISTOGRAM)))
    engine.view("tp", TYPE_PAIRS, materialise=True)


def pair_tables(engine: Engine, cap: int) -> None:
    """What ``PAIRS`` reads of the candidates (table ``cand``) beyond ``entity_pairs``: the
    hub entities they share (``hub_shared``), each relation's mass (``mass``) and the type
    pairs both hold (``shared_types``)."""
    engine.view("hub_shared", hub_shared_sql(cap), materialise=True)
    engine.view("mass", MASS, materialise=True)
    engine.view("shared_types", SHARED, materialise=True)


def per_relation(engine: Engine, cfg: Mapping, report: dict) -> pa.Table:
    """The tables of ``relation_tables`` and ``type_tables``; returns the relation_stats table."""
    type_tables(engine, cfg["type_rule"])
    relation_tables(engine)
    stats = engine.fetch(STATS)
    empty = pa.array([[]] * stats.num_rows, TABLE_SCHEMAS["relation_stats"].field("type_pairs").type)
    type_pairs = pc.if_else(stats.column("type_pairs").is_null(), empty,
                            stats.column("type_pairs").cast(empty.type))
    stats = stats.set_column(stats.column_names.index("type_pairs"), "type_pairs", type_pairs)
    report["triples"] = int(pc.sum(stats.column("triples")).as_py() or 0)
    return stats.cast(TABLE_SCHEMAS["relation_stats"])


def pair_signals(engine: Engine, cfg: Mapping, transe: list[tuple[int, int]], report: dict,
                 out: Path) -> None:
    """The candidates (table ``cand``) and relation_pairs written under ``out``."""
    cap_e = int(cfg["max_relations_per_entity"])
    floor, cap_t = float(cfg["type_pair_min_share"]), int(cfg["max_relations_per_type_pair"])
    engine.view("entity_pairs", entity_pairs_sql(cap_e), materialise=True)
    engine.view("wide", wide_type_pairs_sql(floor, cap_t), materialise=True)
    engine.register_arrow("transe", pa.table({
        "r_i": pa.array([i for i, _ in transe], pa.int64()),
        "r_j": pa.array([j for _, j in transe], pa.int64())}))
    engine.view("cand", candidates_sql(floor), materialise=True)
    pair_tables(engine, cap_e)
    engine.write(PAIRS, out, order_by=["r_i", "r_j"])
    counts = engine.fetch(f"""SELECT
        (SELECT count(*) FROM (SELECT DISTINCT e FROM er WHERE k > {cap_e}) AS hubs) AS hubs,
        (SELECT count(*) FROM wide) AS wide""").to_pylist()[0]
    report["hub_entities_skipped"], report["hub_type_pairs_skipped"] = counts["hubs"], counts["wide"]
    by_source = engine.fetch("SELECT source, count(*) AS n FROM cand GROUP BY source").to_pylist()
    report["candidate_pairs"] = sum(row["n"] for row in by_source)
    report["candidate_pairs_by_source"] = {row["source"]: row["n"] for row in
                                           sorted(by_source, key=lambda row: row["source"])}


#: The triples of table ``graph`` with each relation replaced by its cluster (table
#: ``members``: r → c; relations of no cluster left out), distinct: a cluster's triples are
#: those of one relation
CLUSTER_TRIPLES = "SELECT DISTINCT t.s, m.c AS r, t.o FROM graph t JOIN members m ON m.r = t.r"


class ClusterSignals:
    """H of clusters of relations and (NMI, Jaccard) of pairs of them, by this stage's rules
    run over the triples of table ``graph`` with each relation replaced by its cluster
    (``CLUSTER_TRIPLES``): a merged cluster's signals are those of one relation holding the
    union of its members' triples. At first every relation of ``graph`` is its own cluster
    (the values of this stage's tables); ``merge`` measures a new cluster from its own triples
    and keeps every other cluster's rows of ``er``, ``facts`` and ``tp``. Needs tables
    ``graph`` and ``entities``."""

    #: the per-cluster tables kept between merges
    KEPT = ("er", "facts", "tp")

    def __init__(self, engine: Engine, rule: str):
        self.engine = engine
        type_tables(engine, rule)
        engine.view("triples", "SELECT s, r, o FROM graph", materialise=True)
        relation_tables(engine)

    def merge(self, cluster: int, gone: int, members: list[int]) -> float:
        """Cluster ``cluster`` now holds ``members`` (cluster ``gone``'s among them, which
        ends); its H."""
        engine = self.engine
        for name in self.KEPT:
            engine.view(f"{name}_kept", f"SELECT * FROM {name} WHERE r NOT IN ({int(cluster)}, "
                        f"{int(gone)})", materialise=True)
        engine.register_arrow("members", pa.table({
            "r": pa.array(members, pa.int64()), "c": pa.array([cluster] * len(members), pa.int64())}))
        engine.view("triples", CLUSTER_TRIPLES, materialise=True)
        relation_tables(engine)
        entropy = engine.fetch("SELECT entropy FROM entropy").column("entropy").to_pylist()
        for name in self.KEPT:
            engine.view(name, f"SELECT * FROM {name}_kept UNION ALL SELECT * FROM {name}",
                        materialise=True)
        return float(entropy[0]) if entropy else 0.0

    def pairs(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[float, float]]:
        """(NMI, Jaccard) of each pair of clusters; every shared entity counted as a hub's
        (cap 0: exactly, per pair)."""
        engine = self.engine
        engine.register_arrow("cand", pa.table({
            "r_i": pa.array([a for a, _ in pairs], pa.int64()),
            "r_j": pa.array([b for _, b in pairs], pa.int64()),
            "source": pa.array([""] * len(pairs), pa.string())}))
        engine.view("entity_pairs", entity_pairs_sql(0), materialise=True)
        pair_tables(engine, 0)
        rows = engine.fetch(f"SELECT r_i, r_j, nmi, jaccard FROM ({PAIRS}) AS p").to_pylist()
        return {(row["r_i"], row["r_j"]): (row["nmi"], row["jaccard"]) for row in rows}


def _transe_pairs(relations: pa.Table, embeddings_path: str | None, cfg: Mapping, report: dict,
                  log) -> list[tuple[int, int]]:
    """The TransE nearest-neighbour candidates, or none without the embeddings input."""
    if not (embeddings_path and Path(embeddings_path).is_file()):
        report["transe"], report["transe_candidates"] = "skipped: no relation_embeddings input", 0
        log("relation_stats: no relation_embeddings input, TransE candidates skipped")
        return []
    emb = np.load(embeddings_path, mmap_mode="r")
    pairs = transe_neighbour_pairs(emb, relations.column("id").to_numpy(),
                                   int(cfg["transe_neighbours"]))
    report["transe"] = f"{len(pairs)} neighbour pairs from {embeddings_path}"
    report["transe_candidates"] = len(pairs)
    return pairs


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    for name in ("entities", "triples", "relations"):
        if name not in inputs:
            raise StoreError(f"relation_stats: input '{name}' missing (have {sorted(inputs)})")
    cfg, lap, out = settings(config), Laps(), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"entropy_unit": "nats", "type_rule": cfg["type_rule"],
                    "step_seconds": lap.seconds}
    relations = read_table(Path(inputs["relations"]), "relations")
    n_rel = report["relations"] = relations.num_rows
    report["max_possible_pairs"] = n_rel * (n_rel - 1) // 2
    transe = _transe_pairs(relations, inputs.get("relation_embeddings"), cfg, report,
                           lambda msg: print(msg, file=sys.stderr))
    stats_path, pairs_path = out / "relation_stats.parquet", out / "relation_pairs"
    with open_engine(dict(config), out) as engine:
        report["engine"] = engine.name
        for name in ("entities", "triples", "relations"):
            engine.register(name, inputs[name])
        write_table("relation_stats", per_relation(engine, cfg, report), stats_path)
        lap("per_relation")
        pair_signals(engine, cfg, transe, report, pairs_path)
        lap("pair_signals_and_write")
    report["step_seconds_total"] = round(sum(report["step_seconds"].values()), 3)
    return {"outputs": {"relation_stats": str(stats_path), "relation_pairs": str(pairs_path)},
            "report": report}

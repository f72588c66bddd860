"""Stage ``relation_stats`` (DESIGN §2.3): the per-relation and pairwise SCOS signals, in Spark.

Per relation r (counts over the distinct triples of ``triples``):

* ``entropy`` — tail conditional entropy H(r) = −Σ_o p(o|r) ln p(o|r) with
  p(o|r) = |{s : (s,r,o)}| / |{(s,o) : (s,r,o)}|, in **nats** (natural log). SCOS only uses H
  through ratios (δ_ij) and through L_info, which is normalised by Σ H, so the unit cancels;
* ``type_pairs`` — the distribution P_r over (head type, tail type). Entities may carry several
  types; rule ``spread`` (default) gives each triple (s,r,o) weight 1 and spreads it evenly over
  T(s) × T(o), i.e. 1/(|T(s)|·|T(o)|) per type pair; rule ``min`` keeps only the smallest type
  name of each entity. An untyped entity has the single type ``∅``;
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

The pure-numpy helpers at the top (``tail_entropy``, ``TypeIndex``, ``jsd_bits``,
``nmi_signal``) are the driver-side definitions of the same quantities; ``scos_merge`` uses them
to recompute cluster statistics from the union of triples, and the tests check that they agree
with the Spark computation.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.stage import Laps, StageError
from runtime.config import TYPE_RULES, section
from runtime.contract import (
    TABLE_SCHEMAS,
    StoreError,
    check_schema,
    read_table,
    table_files,
    write_table,
)

UNTYPED = "∅"
#: Decimals kept of the tail entropy and of P_r: Spark sums doubles in partition order, so the
#: last bits would otherwise differ between runs on different masters or partitionings.
DIGITS = 12


def settings(config: Mapping) -> dict:
    cfg = section(config, "relation_stats")
    if cfg["type_rule"] not in TYPE_RULES:
        raise StageError(f"relation_stats.type_rule={cfg['type_rule']!r}: expected one of {TYPE_RULES}")
    return cfg


# ============================================================================================
# driver-side definitions (numpy / plain Python)


def canonical_types(types: Iterable[str] | None, rule: str = "spread") -> tuple[str, ...]:
    """An entity's type set under a rule: sorted distinct non-empty names, or (∅,) if none."""
    clean = sorted({t for t in (types or ()) if t})
    if not clean:
        return (UNTYPED,)
    return (clean[0],) if rule == "min" else tuple(clean)


def tail_entropy(o: np.ndarray) -> float:
    """H(r) in nats from the tails of the *distinct* (s, o) pairs of a relation (or cluster).

    Each distinct (s, o) pair contributes one subject to its tail, so p(o|r) is the share of
    pairs with tail o.
    """
    n = len(o)
    if n == 0:
        return 0.0
    _, counts = np.unique(o, return_counts=True)
    p = counts / n
    return float(max(0.0, -(p * np.log(p)).sum()))


def jsd_bits(p: Mapping, q: Mapping) -> float:
    """Jensen–Shannon divergence of two distributions (dicts key → probability), in bits."""
    total = 0.0
    for key in set(p) | set(q):
        a, b = p.get(key, 0.0), q.get(key, 0.0)
        m = (a + b) / 2.0
        if a > 0:
            total += 0.5 * a * math.log2(a / m)
        if b > 0:
            total += 0.5 * b * math.log2(b / m)
    return min(1.0, max(0.0, total))


def nmi_signal(p: Mapping, q: Mapping) -> float:
    """1 − JSD_bits(P, Q) ∈ [0, 1]; 0 when either distribution is empty (no triples)."""
    if not p or not q:
        return 0.0
    return 1.0 - jsd_bits(p, q)


class TypeIndex:
    """Entity id → type set (under a rule), for recomputing type-pair distributions on the driver."""

    def __init__(self, ids: Iterable[int], types: Iterable[Iterable[str] | None], rule: str = "spread"):
        ids = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids, dtype=np.int64)
        types = list(types)
        self.sets: list[tuple[str, ...]] = [(UNTYPED,)]
        index: dict[tuple[str, ...], int] = {(UNTYPED,): 0}
        size = int(ids.max()) + 1 if len(ids) else 0
        self.of = np.zeros(size, dtype=np.int64)
        cache: dict = {}
        for eid, raw in zip(ids.tolist(), types):
            key = tuple(raw) if raw is not None else ()
            ts = cache.get(key)
            if ts is None:
                ts = cache[key] = canonical_types(raw, rule)
            k = index.get(ts)
            if k is None:
                k = index[ts] = len(self.sets)
                self.sets.append(ts)
            self.of[eid] = k

    @classmethod
    def from_table(cls, entities: pa.Table, rule: str = "spread") -> TypeIndex:
        return cls(entities.column("id").to_numpy(), entities.column("types").to_pylist(), rule)

    def set_ids(self, entities: np.ndarray) -> np.ndarray:
        out = np.zeros(len(entities), dtype=np.int64)  # unknown entity → (∅,)
        known = entities < len(self.of)
        out[known] = self.of[entities[known]]
        return out

    def distribution(self, s: np.ndarray, o: np.ndarray) -> dict[tuple[str, str], float]:
        """P over (head type, tail type) of the distinct pairs (s[i], o[i]) (rule: see module)."""
        n = len(s)
        if n == 0:
            return {}
        k = len(self.sets)
        combos, counts = np.unique(self.set_ids(s) * k + self.set_ids(o), return_counts=True)
        dist: dict[tuple[str, str], float] = {}
        for combo, count in zip(combos.tolist(), counts.tolist()):
            heads, tails = self.sets[combo // k], self.sets[combo % k]
            w = count / (len(heads) * len(tails) * n)
            for ht in heads:
                for tt in tails:
                    dist[(ht, tt)] = dist.get((ht, tt), 0.0) + w
        return dist


def transe_neighbour_pairs(emb: np.ndarray, relation_ids: np.ndarray, k: int
                           ) -> list[tuple[int, int]]:
    """Pairs (i < j) among ``relation_ids`` where j is among i's k nearest by cosine or vice versa.

    One kNN implementation serves TransE and SCOS: ``training.transe.nearest_relations``
    (blockwise, never the |R|² matrix; zero vectors get no neighbours).
    """
    from training.transe import nearest_relations

    ids = np.asarray(relation_ids, dtype=np.int64)
    if len(ids) and ids.max() >= emb.shape[0]:
        raise StoreError(
            f"relation_embeddings has {emb.shape[0]} rows but relation id {int(ids.max())} exists"
        )
    present = np.zeros_like(emb, dtype=np.float32)
    present[ids] = emb[ids]
    return sorted({(min(i, j), max(i, j)) for i, j, _ in nearest_relations(present, k)})


# ============================================================================================
# Spark


def _typed_entities(spark_entities, rule: str):
    """DataFrame (e, ts): each entity's canonical type set as a sorted array (see module doc)."""
    from pyspark.sql import functions as F

    clean = F.array_sort(F.array_distinct(F.filter(
        F.coalesce(F.col("types"), F.array().cast("array<string>")),
        lambda t: t.isNotNull() & (t != F.lit("")))))
    if rule == "min":
        clean = F.when(F.size(clean) > 0, F.array(F.array_min(clean))).otherwise(clean)
    ts = F.when(F.size(clean) > 0, clean).otherwise(F.array(F.lit(UNTYPED)))
    return spark_entities.select(F.col("id").alias("e"), ts.alias("ts"))


def compute(spark, config: Mapping, entities_path: str, triples_path: str, relations_path: str,
            embeddings_path: str | None = None, log=None):
    """Run the Spark computation. Returns (stats arrow table, pairs DataFrame, report)."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    cfg = settings(config)
    log = log or (lambda msg: None)
    lap = Laps()
    report: dict = {"entropy_unit": "nats", "type_rule": cfg["type_rule"], "step_seconds": lap.seconds}

    mem = StorageLevel.MEMORY_AND_DISK
    relations = read_table(Path(relations_path), "relations")
    report["relations"] = relations.num_rows
    triples = spark.read.parquet(triples_path).select("s", "r", "o").distinct().persist(mem)

    # -- per relation: counts, tail entropy, entity sets ----------------------------------------
    ro = triples.groupBy("r", "o").agg(F.count(F.lit(1)).alias("c"))
    per_r = ro.groupBy("r").agg(
        F.sum("c").alias("triples"),
        F.count(F.lit(1)).alias("tails"),
        F.sum(F.col("c") * F.log(F.col("c"))).alias("clc"),
    ).select("r", "triples", "tails",
             F.round(F.greatest(F.lit(0.0),
                                F.log(F.col("triples")) - F.col("clc") / F.col("triples")),
                     DIGITS).alias("entropy"))
    # (r, e) with role flags: one shuffle gives heads, entities and the entity → relation lists
    er = (triples.select("r", F.col("s").alias("e"), F.lit(1).alias("h"))
          .union(triples.select("r", F.col("o").alias("e"), F.lit(0).alias("h")))
          .groupBy("r", "e").agg(F.max("h").alias("h"))
          .persist(mem))
    sizes = er.groupBy("r").agg(F.count(F.lit(1)).alias("entities"), F.sum("h").alias("heads"))
    basic = per_r.join(sizes, "r").toArrow()
    report["triples"] = int(pc.sum(basic.column("triples")).as_py() or 0)
    lap("entropy_and_sizes")

    # -- type-pair distributions --------------------------------------------------------------
    typed = _typed_entities(spark.read.parquet(entities_path).select("id", "types"), cfg["type_rule"])
    untyped = F.array(F.lit(UNTYPED))
    tagged = (triples
              .join(typed.withColumnRenamed("e", "s").withColumnRenamed("ts", "hts"), "s", "left")
              .join(typed.withColumnRenamed("e", "o").withColumnRenamed("ts", "tts"), "o", "left")
              .select("r", F.coalesce("hts", untyped).alias("hts"),
                      F.coalesce("tts", untyped).alias("tts")))
    grouped = tagged.groupBy("r", "hts", "tts").agg(F.count(F.lit(1)).alias("c"))
    spread = (grouped
              .select("r", F.explode("hts").alias("head_type"), "tts",
                      (F.col("c") / (F.size("hts") * F.size("tts"))).alias("w"))
              .select("r", "head_type", F.explode("tts").alias("tail_type"), "w")
              .groupBy("r", "head_type", "tail_type").agg(F.sum("w").alias("w")))
    n_r = spark.createDataFrame(basic.select(["r", "triples"]).to_pandas()) \
        if basic.num_rows else per_r.select("r", "triples")
    tp = (spread.join(F.broadcast(n_r), "r")
          .select("r", "head_type", "tail_type",
                  F.round(F.col("w") / F.col("triples"), DIGITS).alias("p"))
          .persist(mem))
    tp_rows = tp.toArrow()
    lap("type_pairs")

    stats = _stats_table(relations, basic, tp_rows)
    small = {  # |R|-sized per-relation facts, broadcast to every join that needs them
        "entities": stats.select(["r", "entities"]).to_pandas(),
        "mass": _masses(tp_rows),
    }

    # -- candidate pairs ------------------------------------------------------------------------
    cap_e = int(cfg["max_relations_per_entity"])
    er_k = er.select("e", "r", F.count(F.lit(1)).over(Window.partitionBy("e")).alias("k"))
    nonhub = er_k.filter(F.col("k") <= cap_e).select("e", "r")
    hub = er_k.filter(F.col("k") > cap_e).select("e", "r").persist(mem)
    n_hub_entities = hub.select("e").distinct().count()
    a, b = nonhub.alias("a"), nonhub.alias("b")
    entity_pairs = (a.join(b, (F.col("a.e") == F.col("b.e")) & (F.col("a.r") < F.col("b.r")))
                    .groupBy(F.col("a.r").alias("r_i"), F.col("b.r").alias("r_j"))
                    .agg(F.count(F.lit(1)).alias("shared_nonhub"))
                    .persist(mem))

    # type candidates: computed from the collected distributions which pairs qualify
    cap_t = int(cfg["max_relations_per_type_pair"])
    floor = float(cfg["type_pair_min_share"])
    tp_keep = tp_rows.filter(pc.greater_equal(tp_rows.column("p"), floor))
    per_type_pair = tp_keep.group_by(["head_type", "tail_type"]).aggregate([("r", "count")])
    wide = per_type_pair.filter(pc.greater(per_type_pair.column("r_count"), cap_t))
    report["hub_type_pairs_skipped"] = wide.num_rows
    tpc = tp.filter(F.col("p") >= floor).select("r", "head_type", "tail_type")
    if wide.num_rows:
        tpc = tpc.join(F.broadcast(spark.createDataFrame(
            wide.select(["head_type", "tail_type"]).to_pandas())), ["head_type", "tail_type"],
            "left_anti")
    ta, tb = tpc.alias("ta"), tpc.alias("tb")
    type_pairs = (ta.join(tb, (F.col("ta.head_type") == F.col("tb.head_type"))
                          & (F.col("ta.tail_type") == F.col("tb.tail_type"))
                          & (F.col("ta.r") < F.col("tb.r")))
                  .select(F.col("ta.r").alias("r_i"), F.col("tb.r").alias("r_j")))

    sources = [entity_pairs.select("r_i", "r_j", F.lit("entity").alias("source")),
               type_pairs.select("r_i", "r_j", F.lit("type").alias("source"))]
    lap("candidates_entity_type")

    report["transe_candidates"] = 0
    if embeddings_path and Path(embeddings_path).is_file():
        emb = np.load(embeddings_path, mmap_mode="r")
        ids = relations.column("id").to_numpy()
        tr = transe_neighbour_pairs(emb, ids, int(cfg["transe_neighbours"]))
        report["transe"] = f"{len(tr)} neighbour pairs from {embeddings_path}"
        report["transe_candidates"] = len(tr)
        if tr:
            tr_df = spark.createDataFrame(tr, "r_i long, r_j long")
            sources.append(tr_df.select("r_i", "r_j", F.lit("transe").alias("source")))
    else:
        report["transe"] = "skipped: no relation_embeddings input"
        log("relation_stats: no relation_embeddings input, TransE candidates skipped")
    lap("candidates_transe")

    cand = sources[0]
    for extra in sources[1:]:
        cand = cand.unionByName(extra)
    cand = (cand.groupBy("r_i", "r_j")
            .agg(F.concat_ws(",", F.array_sort(F.collect_set("source"))).alias("source"))
            .persist(mem))
    report["hub_entities_skipped"] = n_hub_entities
    report["max_possible_pairs"] = report["relations"] * (report["relations"] - 1) // 2

    # -- pair signals ---------------------------------------------------------------------------
    shared = cand.join(entity_pairs, ["r_i", "r_j"], "left")
    shared = shared.select("r_i", "r_j", "source",
                           F.coalesce("shared_nonhub", F.lit(0)).alias("shared_nonhub"))
    if n_hub_entities:
        h1, h2 = hub.alias("h1"), hub.alias("h2")
        hub_shared = (h1.join(cand.select("r_i", "r_j"), F.col("h1.r") == F.col("r_i"))
                      .join(h2, (F.col("h2.e") == F.col("h1.e")) & (F.col("h2.r") == F.col("r_j")))
                      .groupBy("r_i", "r_j").agg(F.count(F.lit(1)).alias("shared_hub")))
        shared = shared.join(hub_shared, ["r_i", "r_j"], "left")
    else:
        shared = shared.withColumn("shared_hub", F.lit(None).cast("long"))

    tp_i = tp.select(F.col("r").alias("r_i"), "head_type", "tail_type", "p")
    tp_j = tp.select(F.col("r").alias("r_j"), "head_type", "tail_type", F.col("p").alias("q"))
    m = (F.col("p") + F.col("q")) / 2.0
    overlap = (cand.select("r_i", "r_j").join(tp_i, "r_i")
               .join(tp_j, ["r_j", "head_type", "tail_type"])
               .groupBy("r_i", "r_j")
               .agg(F.sum("p").alias("sp"), F.sum("q").alias("sq"),
                    F.sum(F.col("p") * F.log2(F.col("p") / m)
                          + F.col("q") * F.log2(F.col("q") / m)).alias("kl")))

    per_rel = spark.createDataFrame(
        small["entities"].merge(small["mass"], on="r", how="left").fillna({"mass": 0.0}),
        "r long, entities long, mass double")
    side_i = F.broadcast(per_rel.select(F.col("r").alias("r_i"), F.col("entities").alias("n_i"),
                                        F.col("mass").alias("m_i")))
    side_j = F.broadcast(per_rel.select(F.col("r").alias("r_j"), F.col("entities").alias("n_j"),
                                        F.col("mass").alias("m_j")))
    shared_n = F.col("shared_nonhub") + F.coalesce("shared_hub", F.lit(0))
    union = F.col("n_i") + F.col("n_j") - F.col("shared_entities")
    jsd = 0.5 * ((F.col("m_i") - F.col("sp")) + (F.col("m_j") - F.col("sq")) + F.col("kl"))
    pairs = (shared.join(overlap, ["r_i", "r_j"], "left")
             .join(side_i, "r_i", "left").join(side_j, "r_j", "left")
             .fillna(0.0, ["sp", "sq", "kl", "m_i", "m_j"]).fillna(0, ["n_i", "n_j"])
             .withColumn("shared_entities", shared_n)
             .select(
                 F.col("r_i").cast("long"), F.col("r_j").cast("long"),
                 F.col("shared_entities").cast("long"),
                 F.when(union > 0, F.col("shared_entities") / union).otherwise(F.lit(0.0))
                 .cast("double").alias("jaccard"),
                 F.when((F.col("m_i") <= 0) | (F.col("m_j") <= 0), F.lit(0.0))
                 .otherwise(F.least(F.lit(1.0), F.greatest(F.lit(0.0), 1.0 - jsd)))
                 .cast("double").alias("nmi"),
                 "source"))
    return stats, pairs, report, lap, [triples, er, tp, hub, entity_pairs, cand]


def _masses(tp_rows: pa.Table):
    """Total probability mass per relation (1, or 0 for a relation without triples)."""
    import pandas as pd

    if not tp_rows.num_rows:
        return pd.DataFrame({"r": pd.Series([], dtype="int64"), "mass": pd.Series([], dtype="float64")})
    return tp_rows.group_by("r").aggregate([("p", "sum")]).rename_columns(["r", "mass"]).to_pandas()


def _stats_table(relations: pa.Table, basic: pa.Table, tp_rows: pa.Table) -> pa.Table:
    """Assemble the ``relation_stats`` contract table (one row per relation of ``relations``)."""
    by_r = {row["r"]: row for row in basic.to_pylist()}
    dists: dict[int, list] = {}
    for row in tp_rows.to_pylist():
        dists.setdefault(row["r"], []).append(
            {"head_type": row["head_type"], "tail_type": row["tail_type"], "p": row["p"]})
    cols: dict[str, list] = {k: [] for k in
                             ("r", "name", "triples", "heads", "tails", "entities", "entropy", "type_pairs")}
    for rid, name in zip(relations.column("id").to_pylist(), relations.column("name").to_pylist()):
        row = by_r.get(rid, {})
        cols["r"].append(rid)
        cols["name"].append(name)
        for key in ("triples", "heads", "tails", "entities"):
            cols[key].append(int(row.get(key, 0) or 0))
        cols["entropy"].append(float(row.get("entropy", 0.0) or 0.0))
        cols["type_pairs"].append(sorted(dists.get(rid, []),
                                         key=lambda d: (d["head_type"], d["tail_type"])))
    return pa.table(cols, schema=TABLE_SCHEMAS["relation_stats"])


def type_pair_dict(entries: Iterable[Mapping] | None) -> dict[tuple[str, str], float]:
    """``relation_stats.type_pairs`` cell → {(head_type, tail_type): p}."""
    return {(d["head_type"], d["tail_type"]): float(d["p"]) for d in (entries or ())}


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    from spark_jobs.session import get_spark

    for name in ("entities", "triples", "relations"):
        if name not in inputs:
            raise StoreError(f"relation_stats: input '{name}' missing (have {sorted(inputs)})")
    out = Path(out_dir)
    spark = get_spark(dict(config), "lokg-relation_stats")
    stats, pairs, report, lap, cached = compute(
        spark, config, inputs["entities"], inputs["triples"], inputs["relations"],
        inputs.get("relation_embeddings"),
        log=lambda msg: print(msg, file=sys.stderr))

    stats_path = out / "relation_stats.parquet"
    write_table("relation_stats", stats, stats_path)
    pairs_path = out / "relation_pairs"
    pairs.orderBy("r_i", "r_j").write.mode("overwrite").parquet(str(pairs_path))
    files = table_files(pairs_path)
    if files:
        check_schema("relation_pairs", pq.read_schema(files[0]), files[0])
        source = pa.concat_tables(pq.read_table(f, columns=["source"]) for f in files).column("source")
        counts = pc.value_counts(source).to_pylist()
        report["candidate_pairs"] = len(source)
        report["candidate_pairs_by_source"] = {c["values"]: c["counts"] for c in counts}
    else:
        report["candidate_pairs"], report["candidate_pairs_by_source"] = 0, {}
    lap("pair_signals_and_write")
    for df in cached:
        df.unpersist()
    report["step_seconds_total"] = round(sum(report["step_seconds"].values()), 3)
    return {"outputs": {"relation_stats": str(stats_path), "relation_pairs": str(pairs_path)},
            "report": report}


if __name__ == "__main__":
    from pipeline.driver import stage_main

    stage_main("relation_stats")

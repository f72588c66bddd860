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

How (issue 17 item 2): the triples are distinct by contract (ingest de-duplicates them), so
the stage de-duplicates nothing. One Spark query makes the passes that grow with the triples —
one exchange of the head and tail rows by entity (``_roles``), then, per entity, one generate
of its (relation, counts) rows and of its non-hub relation pairs and one aggregation of both
(``_entity_counts``: per-relation counts, shared entities per pair; ``_tail_histogram``: the
tail counts H(r) is summed from exactly on the driver), beside the
triples counted per (head type set, tail type set) with the entity types broadcast — collected
together (``_collect_together``). Up to ``driver_max_relations``
relations, what is left is |R|-sized and done on the driver: P_r spread from those counts
(``spread_counts``, as ``TypeIndex``), the type candidates, NMI (``nmi_signals``: every
candidate's ``nmi_signal`` at once, with numpy), Jaccard, and
one Arrow write; hub entities, when there can be any (|R| > the cap), are counted for the
candidates by one Spark join. Above that threshold (candidates may number |R|²) P_r is
collected but candidates and signals stay DataFrames, as before. Both paths give the same
rows (tested).

Up to ``driver_max_triples`` triples as well (issue 18), the passes themselves run on the
driver (``spark_jobs.relation_stats_driver``: numpy, scipy.sparse, Arrow) and feed the same
driver path: the stage starts no Spark session (``report["passes"]``: driver | spark). Equal
rows to both Spark paths (tested).

The pure-numpy helpers at the top (``tail_entropy``, ``TypeIndex``, ``jsd_bits``,
``nmi_signal``) are the driver-side definitions of the same quantities, and the tests check
that they agree with the Spark computation; ``scos_merge`` uses ``tail_entropy`` and
``TypeIndex`` to recompute cluster statistics from the union of triples; ``nmi_signals`` (the
driver path's NMI, vectorised) is tested equal to ``nmi_signal`` pair by pair.
"""

from __future__ import annotations

import functools
import itertools
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lokg.pipeline.stage import Laps, StageError
from lokg.runtime.contract import (
    TABLE_SCHEMAS,
    StoreError,
    check_schema,
    read_table,
    table_files,
    write_table,
)
from lokg.spark_jobs.relation_stats_driver import (
    DIGITS,
    UNTYPED,
    Passes,
    TypeIndex,
    canonical_types,
    spread_counts,
    tail_entropies,
    triple_passes,
)
from lokg.spark_jobs.settings import RelationStatsSettings


def settings(config: Mapping) -> RelationStatsSettings:
    return RelationStatsSettings.of(config, StageError)


# ============================================================================================
# driver-side definitions (numpy / plain Python)



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


def nmi_signals(pairs: list[tuple[int, int]], dists: Mapping[int, Mapping],
                chunk: int = 2048) -> np.ndarray:
    """``nmi_signal`` of many relation pairs at once (the driver path's candidates, thousands):
    the JSD terms of the keys both hold summed with numpy, a key only one holds adding half its
    mass (½·a·log2(a / (a/2)) = a/2), ``chunk`` pairs at a time."""
    index, rows = _sparse_distributions(dists)
    out = np.zeros(len(pairs))
    pairs_np = np.asarray(pairs, np.int64).reshape(-1, 2)
    for start in range(0, len(pairs_np), chunk):
        part = pairs_np[start:start + chunk]
        i = np.array([index.get(int(r), -1) for r in part[:, 0]], np.int64)
        j = np.array([index.get(int(r), -1) for r in part[:, 1]], np.int64)
        both = (i >= 0) & (j >= 0)
        jsd = _jsd_rows(rows, i[both], j[both], int(both.sum()))
        out[start:start + chunk][both] = 1.0 - np.clip(jsd, 0.0, 1.0)
    return out


def _sparse_distributions(dists: Mapping[int, Mapping]) -> tuple[dict, tuple]:
    """{relation: row} and the CSR (indptr, key ids, p) of the non-empty distributions."""
    keys: dict = {}
    index, indptr, key_ids, probs = {}, [0], [], []
    for r, dist in dists.items():
        if not dist:
            continue
        index[r] = len(indptr) - 1
        key_ids.extend(keys.setdefault(k, len(keys)) for k in dist)
        probs.extend(dist.values())
        indptr.append(len(key_ids))
    return index, (np.asarray(indptr, np.int64), np.asarray(key_ids, np.int64),
                   np.asarray(probs, np.float64), max(len(keys), 1))


def _expanded(rows: tuple, which: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pair, key, p) of every key of each pair's row ``which[pair]``."""
    indptr, key_ids, probs, _ = rows
    lengths = indptr[which + 1] - indptr[which]
    pair = np.repeat(np.arange(len(which)), lengths)
    at = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths) \
        + np.repeat(indptr[which], lengths)
    return pair, key_ids[at], probs[at]


def _jsd_rows(rows: tuple, i: np.ndarray, j: np.ndarray, n: int) -> np.ndarray:
    """JSD in bits of rows ``i[k]`` and ``j[k]`` for each k."""
    n_keys = rows[3]
    pair_a, key_a, a = _expanded(rows, i)
    pair_b, key_b, b = _expanded(rows, j)
    _, at_a, at_b = np.intersect1d(pair_a * n_keys + key_a, pair_b * n_keys + key_b,
                                   assume_unique=True, return_indices=True)
    sa, sb = a[at_a], b[at_b]
    m = (sa + sb) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        shared = (np.where(sa > 0, 0.5 * sa * np.log2(sa / m), 0.0)
                  + np.where(sb > 0, 0.5 * sb * np.log2(sb / m), 0.0))
    only_a, only_b = np.ones(len(a), bool), np.ones(len(b), bool)
    only_a[at_a], only_b[at_b] = False, False
    return (np.bincount(pair_a[at_a], shared, n)
            + np.bincount(pair_a[only_a], np.maximum(a[only_a], 0.0) / 2.0, n)
            + np.bincount(pair_b[only_b], np.maximum(b[only_b], 0.0) / 2.0, n))



def transe_neighbour_pairs(emb: np.ndarray, relation_ids: np.ndarray, k: int
                           ) -> list[tuple[int, int]]:
    """Pairs (i < j) among ``relation_ids`` where j is among i's k nearest by cosine or vice versa.

    One kNN implementation serves TransE and SCOS: ``training.transe.nearest_relations``
    (blockwise, never the |R|² matrix; zero vectors get no neighbours).
    """
    from lokg.training.transe import nearest_relations

    ids = np.asarray(relation_ids, dtype=np.int64)
    if len(ids) and ids.max() >= emb.shape[0]:
        raise StoreError(
            f"relation_embeddings has {emb.shape[0]} rows but relation id {int(ids.max())} exists"
        )
    present = np.zeros_like(emb, dtype=np.float32)
    present[ids] = emb[ids]
    return sorted({(min(i, j), max(i, j)) for i, j, _ in nearest_relations(present, k)})


# ============================================================================================
# Spark: the passes over the triples (and, past ``driver_max_relations``, the pair signals)


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



def compute(session: Callable, config: Mapping, entities_path: str, triples_path: str,
            relations_path: str, embeddings_path: str | None = None, log=None):
    """Run the stage (``session()`` gives the Spark session, asked for only where Spark runs).
    Returns (stats Arrow table, pairs — an Arrow table from the driver path, a DataFrame from
    the Spark one —, report, laps, DataFrames to unpersist)."""
    cfg = settings(config)
    lap = Laps()
    report: dict = {"entropy_unit": "nats", "type_rule": cfg["type_rule"], "step_seconds": lap.seconds}
    relations = read_table(Path(relations_path), "relations")
    n_rel = report["relations"] = relations.num_rows
    report["max_possible_pairs"] = n_rel * (n_rel - 1) // 2
    report["path"] = "driver" if n_rel <= int(cfg["driver_max_relations"]) else "spark"
    n_triples = sum(pq.ParquetFile(f).metadata.num_rows for f in table_files(Path(triples_path)))
    report["passes"] = "driver" if report["path"] == "driver" \
        and n_triples <= int(cfg["driver_max_triples"]) else "spark"
    spark, frames, cached = None, None, []
    cap_e = int(cfg["max_relations_per_entity"])
    if report["passes"] == "driver":
        passes = triple_passes(entities_path, triples_path, cfg["type_rule"], cap_e, n_rel > cap_e)
    else:
        spark = session()
        passes, frames, cached = _spark_passes(spark, cfg, (entities_path, triples_path),
                                               n_rel, report["path"] == "driver")
    report["triples"] = int(pc.sum(passes.basic.column("triples")).as_py() or 0)
    report["hub_entities_skipped"] = passes.hubs
    lap("triple_passes")

    transe = _transe_pairs(relations, embeddings_path, cfg, report, log or (lambda msg: None))
    if report["path"] == "driver":
        stats, pairs = _on_driver(relations, passes, transe, cfg, report)
    else:
        stats, pairs, more = _on_spark(spark, relations, passes, frames, transe, cfg, report)
        cached += more
    lap("type_pairs_and_candidates")
    return stats, pairs, report, lap, cached


def _spark_passes(spark, cfg: Mapping, paths: tuple[str, str], n_rel: int, on_driver: bool):
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


# --------------------------------------------------------------------------------------------
# driver path (|R| ≤ driver_max_relations): the |R|-sized tables collected, the rest in Python


def _on_driver(relations: pa.Table, passes: Passes, transe: list, cfg: Mapping,
               report: dict) -> tuple[pa.Table, pa.Table]:
    """P_r, the type candidates and every pair signal from the facts, non-hub entity pairs
    and type-set counts (the hub entities, if any, counted by ``passes.hub_shared``)."""
    basic, entity_pairs = passes.basic, passes.entity_pairs
    n = dict(zip(basic.column("r").to_pylist(), basic.column("triples").to_pylist()))
    dists = _distributions(passes.combos, n)
    stats = _stats_table(relations, basic, _distribution_rows(dists))
    shared = dict(zip(zip(entity_pairs.column("r_i").to_pylist(),
                          entity_pairs.column("r_j").to_pylist()),
                      entity_pairs.column("shared_nonhub").to_pylist()))
    typed, report["hub_type_pairs_skipped"] = _type_candidates(
        dists, float(cfg["type_pair_min_share"]), int(cfg["max_relations_per_type_pair"]))
    cand: dict[tuple[int, int], set[str]] = {}
    for source, found in (("entity", shared), ("type", typed), ("transe", transe)):
        for pair in found:
            cand.setdefault(pair, set()).add(source)
    if passes.hubs and cand:
        for i, j, n_hub in passes.hub_shared(cand):
            shared[(i, j)] = shared.get((i, j), 0) + n_hub
    sizes = dict(zip(stats.column("r").to_pylist(), stats.column("entities").to_pylist()))
    return stats, _signal_table(cand, shared, sizes, dists)


def _distributions(combos: pa.Table, n: Mapping[int, int]) -> dict[int, dict]:
    """P_r per relation from the (r, hts, tts, c) counts, spread as ``TypeIndex`` does; rows
    sorted first, so that the sums (and the rounding) do not depend on Spark's row order."""
    grouped: dict[int, list] = {}
    for row in sorted(combos.to_pylist(), key=lambda d: (d["r"], d["hts"], d["tts"])):
        grouped.setdefault(row["r"], []).append((row["hts"], row["tts"], row["c"]))
    return {r: {key: round(p, DIGITS) for key, p in spread_counts(rows, n[r]).items()}
            for r, rows in grouped.items()}


def _distribution_rows(dists: Mapping[int, Mapping]) -> pa.Table:
    """{r: P_r} as the (r, head_type, tail_type, p) rows ``_stats_table`` takes."""
    rows = [(r, ht, tt, p) for r, dist in dists.items() for (ht, tt), p in dist.items()]
    names = ["r", "head_type", "tail_type", "p"]
    return pa.table({k: [row[i] for row in rows] for i, k in enumerate(names)},
                    schema=pa.schema([("r", pa.int64()), ("head_type", pa.string()),
                                      ("tail_type", pa.string()), ("p", pa.float64())]))


def _type_candidates(dists: Mapping[int, Mapping], floor: float, cap: int
                     ) -> tuple[set[tuple[int, int]], int]:
    """Pairs sharing a type pair of mass ≥ ``floor`` in both, and how many type pairs held by
    more than ``cap`` relations were skipped."""
    holders: dict[tuple[str, str], list[int]] = {}
    for r in sorted(dists):
        for key, p in dists[r].items():
            if p >= floor:
                holders.setdefault(key, []).append(r)
    pairs = {pair for rs in holders.values() if len(rs) <= cap
             for pair in itertools.combinations(rs, 2)}
    return pairs, sum(len(rs) > cap for rs in holders.values())


def _signal_table(cand: Mapping[tuple[int, int], set], shared: Mapping, sizes: Mapping,
                  dists: Mapping) -> pa.Table:
    """``relation_pairs`` (sorted by r_i, r_j): shared entities, Jaccard, NMI and sources."""
    cols: dict[str, list] = {name: [] for name in TABLE_SCHEMAS["relation_pairs"].names}
    for i, j in sorted(cand):
        k = shared.get((i, j), 0)
        union = sizes.get(i, 0) + sizes.get(j, 0) - k
        cols["r_i"].append(i)
        cols["r_j"].append(j)
        cols["shared_entities"].append(k)
        cols["jaccard"].append(k / union if union > 0 else 0.0)
        cols["source"].append(",".join(sorted(cand[(i, j)])))
    cols["nmi"] = nmi_signals(sorted(cand), dists)
    return pa.table(cols, schema=TABLE_SCHEMAS["relation_pairs"])


# --------------------------------------------------------------------------------------------
# Spark path (|R| > driver_max_relations: candidates may number |R|²)


def _on_spark(spark, relations: pa.Table, passes: Passes, frames: tuple, transe: list,
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
    stats = _stats_table(relations, basic, tp_rows)
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


#: The contract's relation_pairs with the columns Spark's plan makes non-null (the shared
#: count, NMI, the sources) non-null: the same schema whichever path wrote it, so a refresh's
#: row-digest cut-off (pipeline.refresh.same_rows) can match either
SPARK_PAIRS = pa.schema([f.with_nullable(f.name not in ("shared_entities", "nmi", "source"))
                         for f in TABLE_SCHEMAS["relation_pairs"]])


def _write_pairs(pairs, path: Path) -> pa.ChunkedArray:
    """Write ``relation_pairs`` (one file from the driver path's Arrow table, Spark's part files
    from a DataFrame), sorted by (r_i, r_j); returns its ``source`` column."""
    if isinstance(pairs, pa.Table):
        write_table("relation_pairs", pairs, path / "part-00000.parquet", SPARK_PAIRS)
        return pairs.column("source")
    pairs.orderBy("r_i", "r_j").write.mode("overwrite").parquet(str(path))
    files = table_files(path)
    if not files:
        return pa.chunked_array([], pa.string())
    check_schema("relation_pairs", pq.read_schema(files[0]), files[0])
    return pa.concat_tables(pq.read_table(f, columns=["source"]) for f in files).column("source")


def _session(config: Mapping):
    """The Spark session, imported and started only when a path needs it."""
    from lokg.spark_jobs.session import get_spark

    return get_spark(dict(config), "lokg-relation_stats")


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    for name in ("entities", "triples", "relations"):
        if name not in inputs:
            raise StoreError(f"relation_stats: input '{name}' missing (have {sorted(inputs)})")
    out = Path(out_dir)
    stats, pairs, report, lap, cached = compute(
        lambda: _session(config), config, inputs["entities"], inputs["triples"], inputs["relations"],
        inputs.get("relation_embeddings"),
        log=lambda msg: print(msg, file=sys.stderr))

    stats_path = out / "relation_stats.parquet"
    write_table("relation_stats", stats, stats_path)
    pairs_path = out / "relation_pairs"
    source = _write_pairs(pairs, pairs_path)
    report["candidate_pairs"] = len(source)
    report["candidate_pairs_by_source"] = {
        c["values"]: c["counts"] for c in pc.value_counts(source).to_pylist()} if len(source) else {}
    lap("pair_signals_and_write")
    for df in cached:
        df.unpersist()
    report["step_seconds_total"] = round(sum(report["step_seconds"].values()), 3)
    return {"outputs": {"relation_stats": str(stats_path), "relation_pairs": str(pairs_path)},
            "report": report}


if __name__ == "__main__":
    from lokg.pipeline.driver import stage_main

    stage_main("relation_stats")

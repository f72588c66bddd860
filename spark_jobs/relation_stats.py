"""Stage ``relation_stats``: the per-relation and pairwise SCOS signals, in Spark.

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

How: the triples are distinct by contract (ingest de-duplicates them), so
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

Up to ``driver_max_triples`` triples as well, the passes themselves run on the
driver (``spark_jobs.relation_stats_driver``: numpy, scipy.sparse, Arrow) and feed the same
driver path: the stage starts no Spark session (``report["passes"]``: driver | spark). Equal
rows to both Spark paths (tested).

The Spark passes and Spark path live in ``spark_jobs.relation_stats_spark``, the driver path in
``spark_jobs.relation_stats_tables`` (its passes in ``spark_jobs.relation_stats_driver``), and
the plain-numpy definitions of the signals (``tail_entropy``, ``jsd_bits``, ``nmi_signal``) in
``spark_jobs.relation_stats_math``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lokg.common.stage import Laps, StageError
from lokg.runtime.contract import (
    TABLE_SCHEMAS,
    StoreError,
    check_schema,
    read_table,
    table_files,
    write_table,
)
from lokg.spark_jobs.relation_stats_driver import triple_passes
from lokg.spark_jobs.relation_stats_spark import signals_on_spark, spark_passes
from lokg.spark_jobs.relation_stats_tables import signals_on_driver
from lokg.spark_jobs.settings import RelationStatsSettings


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
        passes, frames, cached = spark_passes(spark, cfg, (entities_path, triples_path),
                                              n_rel, report["path"] == "driver")
    report["triples"] = int(pc.sum(passes.basic.column("triples")).as_py() or 0)
    report["hub_entities_skipped"] = passes.hubs
    lap("triple_passes")

    transe = _transe_pairs(relations, embeddings_path, cfg, report, log or (lambda msg: None))
    if report["path"] == "driver":
        stats, pairs = signals_on_driver(relations, passes, transe, cfg, report)
    else:
        stats, pairs, more = signals_on_spark(spark, relations, passes, frames, transe, cfg, report)
        cached += more
    lap("type_pairs_and_candidates")
    return stats, pairs, report, lap, cached


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

"""Stage ``scos_merge``: Semantic Compression of Ontology Schema.

The greedy merge runs on the driver (plain Python, |R|-sized); a merged cluster's signals (H,
and NMI and Jaccard with its partners) are relation_stats' SQL over the union of its members'
triples (``relation_stats.ClusterSignals``), run by an in-process DuckDB (``MEASURE_ENGINE``:
the loop's many small queries); the triple rewrite is SQL on the build's engine
(spark_jobs/engine.py: DuckDB or Spark SQL, the same text).

* Refresh (``previous:`` inputs, pipeline/refresh.py): a warm-started TransE moves relation
  vectors by noise the data did not ask for (docs/BENCHMARKS.md measures it), enough to flip a
  merge whose sim sits near θ. While that shift is at most
  ``scos_merge.refresh_max_vector_shift``, the cosine term uses the previous build's vectors
  (by relation name; every relation must have one), so the merges follow the data signals
  only. Those move too: a small edit moves the NMI, Jaccard and H of relations with few
  triples across θ. So a refresh also decides with hysteresis: two clusters that one
  merge group of the previous build held (relations by name) merge while sim ≥ θ −
  ``scos_merge.refresh_merge_margin``, and every pair of such a group is a candidate even when
  relation_stats no longer proposes it; any other pair still needs sim ≥ θ (so on the same
  signals the refresh differs from a decision without memory only by the previous merges the
  margin kept — the report lists them, ``refresh.kept_by_margin``). A pair fallen further
  splits; a full build has no previous merges.
The greedy merge itself is ``spark_jobs.scos_greedy``; the triple rewrite
``spark_jobs.scos_rewrite``.

Outputs: ``relation_map`` (every relation of R0), ``merge_log``, rewritten ``triples`` (φ
applied to r, then distinct; from the driver one file in (s, r, o) order) and ``relations``
(canonical relations). When nothing merges, or with ``scos_merge.enabled = false``, ``triples``
and ``relations`` are the input tables, untouched. The report's ``engine`` names the engine that
rewrote the triples (None: nothing rewritten).

Memory: the driver holds |R|-sized state (clusters, the candidate pairs); the triples are
only read by the engines (DuckDB within ``build.memory_gb``, spilling): the measurements'
(each relation's (entity, relation) rows and P_r, kept between merges; each merged cluster's
triples) and the rewrite's.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pyarrow as pa

from lokg.common.stage import Laps, StageError, previous_inputs
from lokg.runtime.contract import (TABLE_SCHEMAS, StoreError, read_table, table_files,
                                   table_rows, write_table)
from lokg.spark_jobs.engine import open_engine
from lokg.spark_jobs.relation_stats import ClusterSignals
from lokg.spark_jobs.relation_stats import settings as stats_settings
from lokg.spark_jobs.scos_greedy import (NORMALISER, Merger, MergeResult, add_candidates,
                                         canonical_mapping, margin_outcome, summary)
from lokg.spark_jobs.scos_rewrite import rewrite
from lokg.spark_jobs.settings import ScosMergeSettings


def settings(config: Mapping) -> ScosMergeSettings:
    return ScosMergeSettings.of(config, StageError)


def _read_pairs(path: str) -> pa.Table:
    files = table_files(Path(path))
    if not files:
        return TABLE_SCHEMAS["relation_pairs"].empty_table()
    return read_table(Path(path), "relation_pairs")


def _write_identity(relations: pa.Table, out: Path, inputs: Mapping, report: dict,
                    seconds: dict) -> dict:
    ids = relations.column("id")
    names = relations.column("name")
    write_table("relation_map", pa.table({"id": ids, "name": names, "canonical_id": ids,
                                          "canonical_name": names}), out / "relation_map.parquet")
    write_table("merge_log", TABLE_SCHEMAS["merge_log"].empty_table(), out / "merge_log.parquet")
    report["step_seconds"] = seconds
    return {"outputs": {"relation_map": str(out / "relation_map.parquet"),
                        "merge_log": str(out / "merge_log.parquet"),
                        "triples": str(inputs["triples"]),
                        "relations": str(inputs["relations"])},
            "report": report}


def _require(inputs: Mapping[str, str], names: Iterable[str]) -> None:
    for name in names:
        if name not in inputs:
            raise StoreError(f"scos_merge: input '{name}' missing (have {sorted(inputs)})")


def _relation_embeddings(cfg: Mapping, emb_path: str | None, top_id: int | None,
                         report: dict) -> tuple[np.ndarray | None, list[float]]:
    """TransE relation vectors and the fused weights; without vectors the cosine term is 0 (or
    its weight renormalised onto NMI/Jaccard), which the report warns about."""
    weights = [float(w) for w in cfg["weights"]]
    if emb_path and Path(emb_path).is_file():
        emb = np.load(emb_path)
        if emb.ndim != 2 or (top_id is not None and emb.shape[0] <= top_id):
            raise StoreError(f"{emb_path}: relation embeddings of shape {emb.shape} do not cover "
                             f"relation ids up to {top_id}")
        report["cosine"] = f"TransE relation embeddings {emb_path} {list(emb.shape)}"
        return emb, weights
    if cfg["missing_embeddings"] == "renormalise" and weights[0] + weights[1] > 0:
        scale = sum(weights) / (weights[0] + weights[1])
        weights = [weights[0] * scale, weights[1] * scale, 0.0]
        msg = (f"NO relation_embeddings: cosine term dropped, NMI/Jaccard weights renormalised "
               f"to {weights[0]:.3f}/{weights[1]:.3f}")
    else:
        msg = (f"NO relation_embeddings: cosine term is 0, so sim <= {weights[0] + weights[1]:.2f}"
               f" (theta_base {cfg['theta_base']}); merges are "
               + ("IMPOSSIBLE" if weights[0] + weights[1] < cfg["theta_base"] else "rarer"))
    report["cosine"] = "absent (0)"
    report["warnings"].append(msg)
    print(f"WARNING scos_merge: {msg}", file=sys.stderr)
    return None, weights


def refresh_vectors(cfg: Mapping, inputs: Mapping[str, str], relations: pa.Table,
                    stats: pa.Table, emb: np.ndarray | None) -> tuple[np.ndarray | None, dict]:
    """The vectors of the cosine term, and the report's ``refresh``: in a refresh whose warm
    TransE moved the relation vectors less than ``refresh_max_vector_shift`` from the previous
    build's (the triple-weighted mean cosine distance, relations matched by name), the previous
    build's vectors — the warm start's drift then flips no merge, and only the data signals
    (NMI, Jaccard, H: recomputed) can; else this build's."""
    previous = previous_inputs(inputs, "relation_embeddings", "relation_map")
    if previous is None or emb is None:
        return emb, {"mode": "full", "reason": "no previous build or no relation vectors"}
    then = np.load(previous["relation_embeddings"])
    before = read_table(previous["relation_map"], columns=["id", "name"])
    where = dict(zip(before.column("name").to_pylist(), before.column("id").to_pylist()))
    ids, names = relations.column("id").to_pylist(), relations.column("name").to_pylist()
    new = [n for n in names if n not in where]
    if new or then.shape[1] != emb.shape[1]:
        return emb, {"mode": "full", "reason": f"{len(new)} relations new, vector sizes "
                     f"{then.shape[1]} / {emb.shape[1]}"}
    kept = emb.copy()
    kept[ids] = then[[where[n] for n in names]]
    counts = dict(zip(stats.column("r").to_pylist(), stats.column("triples").to_pylist()))
    weight = np.array([counts.get(r, 0) for r in ids], np.float64) + 1e-12
    a, b = emb[ids].astype(np.float64), kept[ids].astype(np.float64)
    norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    shift = float(np.sum(weight * (1 - np.sum(a * b, axis=1) / norms)) / weight.sum())
    tolerance = float(cfg["refresh_max_vector_shift"])
    if shift > tolerance:
        return emb, {"mode": "full", "reason": f"relation vectors moved {shift:.4f} > "
                     f"{tolerance}", "vector_shift": round(shift, 6)}
    return kept, {"mode": "partial", "vectors": "previous build's",
                  "vector_shift": round(shift, 6), "tolerance": tolerance}


def previous_merges(cfg: Mapping, inputs: Mapping[str, str],
                    relations: pa.Table) -> tuple[dict[int, int], dict]:
    """In a refresh: each relation of one of the previous build's merge groups → that group
    (relations matched by name), and the report's part on them. Merges within such a group
    need only sim ≥ θ − ``refresh_merge_margin`` (``Merger.admits``)."""
    previous = previous_inputs(inputs, "relation_map")
    if previous is None:
        return {}, {}
    before = read_table(previous["relation_map"], columns=["name", "canonical_id"])
    group = dict(zip(before.column("name").to_pylist(),
                     before.column("canonical_id").to_pylist()))
    sizes = Counter(group.values())
    held = {r: group[n] for r, n in zip(relations.column("id").to_pylist(),
                                        relations.column("name").to_pylist())
            if sizes.get(group.get(n), 0) > 1}
    return held, {"merge_margin": float(cfg["refresh_merge_margin"]),
                  "previous_groups": sum(1 for n in sizes.values() if n > 1)}


#: The engine of the greedy merge's measurements, whatever the build's: the loop on the driver
#: asks for a few small results after each merge, which an in-process DuckDB answers in
#: milliseconds and a Spark job in seconds; bounded by ``build.memory_gb``, spilling
MEASURE_ENGINE = "duckdb"


class _Signals:
    """``Merger``'s ``measure``: ``relation_stats.ClusterSignals`` on ``MEASURE_ENGINE``,
    opened on the first call (most builds merge little, and reading the triples would
    dominate the stage) and closed with ``stack``; its seconds in ``seconds["measure"]``."""

    def __init__(self, config: Mapping, inputs: Mapping[str, str], work_dir: Path,
                 stack: ExitStack, seconds: dict):
        self.config, self.inputs, self.work_dir = config, inputs, work_dir
        self.stack, self.seconds = stack, seconds
        self.signals: ClusterSignals | None = None

    def _measured(self, what: str, *args):
        started = time.perf_counter()
        if self.signals is None:
            self.work_dir.mkdir(parents=True, exist_ok=True)  # the engine spills there
            config = {**self.config, "engine": {**(self.config.get("engine") or {}),
                                                "name": MEASURE_ENGINE}}
            engine = self.stack.enter_context(open_engine(config, self.work_dir))
            engine.register("graph", self.inputs["triples"])
            engine.register("entities", self.inputs["entities"])
            self.signals = ClusterSignals(engine, stats_settings(self.config)["type_rule"])
        result = getattr(self.signals, what)(*args)
        self.seconds["measure"] = round(self.seconds.get("measure", 0.0)
                                        + time.perf_counter() - started, 3)
        return result

    def merge(self, cluster: int, gone: int, members: list[int]) -> float:
        return self._measured("merge", cluster, gone, members)

    def pairs(self, pairs: list[tuple[int, int]]) -> dict:
        return self._measured("pairs", pairs)


def _merger(cfg: Mapping, stats: pa.Table, emb: np.ndarray | None, weights: list[float],
            measure: _Signals, held: Mapping[int, int]) -> Merger:
    ids = stats.column("r").to_pylist()
    names = dict(zip(ids, stats.column("name").to_pylist()))
    counts = dict(zip(ids, stats.column("triples").to_pylist()))
    entropy = dict(zip(ids, stats.column("entropy").to_pylist()))
    return Merger(names, counts, entropy, measure, emb, weights, cfg["theta_base"],
                  cfg["epsilon"], held, cfg["refresh_merge_margin"])


def _write_merges(relations: pa.Table, result: MergeResult, counts: Mapping[int, int],
                  normaliser: float, out: Path, report: dict) -> tuple[pa.Table, dict]:
    """relation_map and merge_log written, the report's merge summary filled."""
    rmap = canonical_mapping(relations, result.clusters, counts)
    r0 = relations.num_rows
    r_star = len(set(rmap.column("canonical_id").to_pylist()))
    report.update(summary(r0, r_star, result.total_loss, normaliser))
    report["merge_count"] = len(result.log)
    report["merges"] = [[m["left"], m["right"]] for m in result.log]
    report["total_loss"] = result.total_loss
    report["stale_heap_entries_skipped"] = result.stale_skipped
    report["heap_pushes"] = result.pushed
    write_table("relation_map", rmap, out / "relation_map.parquet")
    log_cols = ("step", "left", "right", "sim", "nmi", "jaccard", "cos", "theta", "loss", "members")
    write_table("merge_log", pa.table({k: [m[k] for m in result.log] for k in log_cols}),
                out / "merge_log.parquet")
    return rmap, {"relation_map": str(out / "relation_map.parquet"),
                  "merge_log": str(out / "merge_log.parquet")}


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    cfg = settings(config)
    out = Path(out_dir)
    lap = Laps()
    _require(inputs, ("triples", "relations"))
    relations = read_table(Path(inputs["relations"]), "relations")
    r0 = relations.num_rows
    report: dict = {"enabled": bool(cfg["enabled"]), "warnings": [], "merges": [], "engine": None,
                    "merge_count": 0, **summary(r0, r0, 0.0, 0.0)}
    if not cfg["enabled"]:
        report["normaliser"]["definition"] = NORMALISER + " (not computed: SCOS disabled)"
        return _write_identity(relations, out, inputs, report, lap.seconds)

    _require(inputs, ("relation_stats", "relation_pairs", "entities"))
    stats = read_table(Path(inputs["relation_stats"]), "relation_stats")
    pairs = _read_pairs(inputs["relation_pairs"])
    ids = stats.column("r").to_pylist()
    emb, weights = _relation_embeddings(cfg, inputs.get("relation_embeddings"),
                                        max(ids) if ids else None, report)
    emb, report["refresh"] = refresh_vectors(cfg, inputs, relations, stats, emb)
    held, margin_report = previous_merges(cfg, inputs, relations)
    report.update(weights=weights, theta_base=cfg["theta_base"], epsilon=cfg["epsilon"])
    report["refresh"].update(margin_report)
    lap("load_stats")
    outputs = _merge(config, cfg, inputs, relations, (stats, pairs), (emb, weights), held, out,
                     report, lap)
    report["step_seconds"] = lap.seconds
    return {"outputs": outputs, "report": report}


def _merge(config: Mapping, cfg: Mapping, inputs: Mapping[str, str], relations: pa.Table,
           stats_and_pairs: tuple[pa.Table, pa.Table],
           vectors: tuple[np.ndarray | None, list[float]], held: Mapping[int, int], out: Path,
           report: dict, lap: Laps) -> dict:
    """The greedy merge from relation_stats' candidates, relation_map and merge_log written,
    and the triples rewritten under φ (the input tables when nothing merged); the outputs."""
    (stats, pairs), (emb, weights) = stats_and_pairs, vectors
    with ExitStack() as stack:
        merger = _merger(cfg, stats, emb, weights,
                         _Signals(config, inputs, out, stack, lap.seconds), held)
        add_candidates(merger, pairs, held)
        report["candidate_pairs"] = pairs.num_rows
        report["admissible_initial"] = merger.pushed
        lap("initial_heap")
        result = merger.run()
        lap("greedy_merge")  # includes measure (the merged clusters' signals) when a merge happened
    normaliser = float(sum(stats.column("entropy").to_pylist()))
    rmap, outputs = _write_merges(relations, result, merger.triple_counts, normaliser, out, report)
    if held:
        report["refresh"].update(margin_outcome(result, rmap, held))
    lap("write_map_and_log")

    if len(set(rmap.column("canonical_id").to_pylist())) == relations.num_rows:  # φ: identity
        outputs.update(triples=str(inputs["triples"]), relations=str(inputs["relations"]))
        report["triples_in"] = report["triples_out"] = None
    else:
        outputs.update(_rewrite(config, inputs, rmap, out, report))
        lap("rewrite_triples")
    return outputs


def _rewrite(config: Mapping, inputs: Mapping, rmap: pa.Table, out: Path,
             report: dict) -> dict:
    """The triples under φ — (s, φ(r), o), distinct — on the build's engine; and the
    canonical relations table."""
    path = out / "triples"
    report["triples_in"] = table_rows(Path(inputs["triples"]))
    report["engine"] = rewrite(config, inputs, rmap, path)
    report["triples_out"] = table_rows(path)

    first = {}
    for cid, cname in zip(rmap.column("canonical_id").to_pylist(),
                          rmap.column("canonical_name").to_pylist()):
        first.setdefault(cid, cname)
    ids = sorted(first)
    write_table("relations", pa.table({"id": ids, "name": [first[i] for i in ids]}),
                out / "relations.parquet")
    return {"triples": str(path), "relations": str(out / "relations.parquet")}

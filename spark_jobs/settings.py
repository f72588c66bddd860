"""The config sections of the Spark stages and their session: each setting declared once
(runtime/settings.py). Light on purpose (no pyspark): the build config is assembled from here
without importing the stages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lokg.runtime.settings import (BOOL, COUNT, FILE, SHARE, WEIGHT, Settings, choice,
                                   integer, number, numbers, setting, shown, text)

#: engine.name: chosen by the dump's size | DuckDB on one node | Spark SQL (spark_jobs/engine.py).
ENGINE_NAMES = ("auto", "duckdb", "spark")

#: relation_stats.type_rule: weight spread over type pairs | the smallest type only.
TYPE_RULES = ("spread", "min")
#: scos_merge.missing_embeddings: without relation vectors, the cosine term is 0 | the other
#: weights are rescaled.
MISSING_EMBEDDINGS = ("zero", "renormalise")
#: path_cache.heads values that choose a hot set in the stage (spark_jobs/path_cache.py).
HEAD_SELECTORS = ("degree", "mu", "query_log")
SPARK_LOG_LEVELS = ("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF", "TRACE")


@dataclass(frozen=True)
class SparkSettings(Settings, section="spark"):
    """The local Spark session of the stages (spark_jobs/session.py); under spark-submit the
    master and memory come from the submit command."""

    master: str = setting("local[2]", text(r".+", "a Spark master URL such as local[2]"),
            "the Spark master (LOKG_SPARK_MASTER overrides it)")
    driver_memory: str = setting("4g", text(r"\d+[kmgtp]?b?",
                                            "a Spark memory size such as 4g or 512m"),
            "spark.driver.memory")
    shuffle_partitions: int = setting(8, COUNT, "spark.sql.shuffle.partitions")
    log_level: str = setting("ERROR", text("|".join(SPARK_LOG_LEVELS),
                                           f"one of {' | '.join(SPARK_LOG_LEVELS)}"),
            "Spark's own log level (WARN shows planner chatter)")


@dataclass(frozen=True)
class EngineSettings(Settings, section="engine"):
    """The SQL engine of the relational stages, chosen once per build (spark_jobs/engine.py)."""

    name: str = setting("auto", choice(*ENGINE_NAMES),
            "auto: DuckDB up to spark_above_gb of dump, Spark SQL above | duckdb | spark")
    spark_above_gb: float = setting(200.0, number(0),
            "auto: dumps larger than this many GB (on disk) run on Spark (the `spark` section's "
            "master, a cluster), smaller ones on DuckDB")
    spill_dir: str | None = setting(None, FILE,
            "where DuckDB spills what exceeds build.memory_gb (null: beside the stage's outputs)")


@dataclass(frozen=True)
class EntityTypesSettings(Settings, section="entity_types"):
    """Each entity's types (spark_jobs/entity_types.py: SQL on the build's engine; no
    settings of its own)."""


@dataclass(frozen=True)
class RelationStatsSettings(Settings, section="relation_stats"):
    """Relation statistics and merge candidates (spark_jobs/relation_stats.py)."""

    max_relations_per_entity: int = setting(200, COUNT,
            "hub entities above this are skipped for pair candidates")
    max_relations_per_type_pair: int = setting(200, COUNT,
            "type pairs shared more widely propose no candidates")
    type_pair_min_share: float = setting(0.01, SHARE,
            "a type pair proposes candidates only where its p >= this")
    type_rule: str = setting("spread", choice(*TYPE_RULES),
            "spread: weight 1/(|T(s)||T(o)|) per type pair | min: smallest type")
    transe_neighbours: int = setting(10, integer(0),
            "extra candidate pairs from TransE nearest neighbours")


@dataclass(frozen=True)
class ScosMergeSettings(Settings, section="scos_merge"):
    """Merging synonymous relations into canonical ones (spark_jobs/scos_merge.py)."""

    enabled: bool = setting(True, BOOL, "merge at all (false: every relation stays its own)")
    weights: list[float] = setting([0.40, 0.30, 0.30], numbers(3),
            "weights of the NMI signal, Jaccard and TransE cosine in a pair's sim")
    theta_base: float = setting(0.75, SHARE, "θ's base: the sim a merge needs")
    epsilon: float = setting(0.15, WEIGHT, "how far θ moves with the pair's entropy gap δ")
    missing_embeddings: str = setting("zero", choice(*MISSING_EMBEDDINGS),
            "without relation_embeddings: 'zero' keeps the cosine term at 0 (max sim w1 + w2); "
            "'renormalise' rescales w1, w2 to sum to w1 + w2 + w3")
    refresh_max_vector_shift: float = setting(0.3, number(0, 2),
            "a refresh keeps the previous build's relation vectors for the cosine term while the "
            "warm TransE moved them at most this far (triple-weighted mean cosine distance): the "
            "merges then move with the data only")
    refresh_merge_margin: float = setting(0.05, number(0, 1),
            "a refresh keeps a merge of the previous build while its sim stays >= θ - this margin "
            "(new merges still need sim >= θ; a full build ignores the previous merges)")


@dataclass(frozen=True)
class NodeGainSettings(Settings, section="node_gain"):
    """Each entity's information gain μ (spark_jobs/node_gain.py: SQL on the build's engine;
    no settings of its own)."""


@dataclass(frozen=True)
class PathCacheSettings(Settings, section="path_cache"):
    """The precomputed best paths from each head (spark_jobs/path_cache.py; the scorer is
    runtime/taimr.py)."""

    max_hops: int = setting(3, COUNT, "L: the longest path, in hops")
    k_top: int = setting(20, COUNT, "paths kept per (head, first relation, direction)")
    beam_width: int = setting(64, COUNT,
            "partial paths kept per (head, first relation, direction) and hop")
    lambda_topo: float = setting(1.0, WEIGHT,
            "weight of Σ log μ against Σ log α in S_topo")
    heads: str = setting("all", text(r".+", f"all, {', '.join(HEAD_SELECTORS)} or a file of "
                                            "entity keys"),
            "all (every entity with an out-edge) | a hot set: degree | mu | query_log (the top "
            "heads by out-degree in edges, by μ of node_gain, by how many logged answers linked "
            "them; ties: smaller id first) sized by hot_share or hot_count | a file of entity "
            "keys, one a line. Cold heads are computed at query time (runtime/query.py)")
    hot_share: float | None = setting(None, number(0, 1, low_open=True, nullable=True),
            "degree|mu|query_log: the hot set as a share of all heads, 0 < x <= 1")
    hot_count: int | None = setting(None, integer(1, nullable=True),
            "degree|mu|query_log: the hot set as a number of heads (set one of the two)")
    query_log: str | None = setting(None, FILE,
            "query_log: JSON lines (a file, or a directory read recursively) of answers carrying "
            "linked[].key (the Answer JSON of /v1/ask) or details.linked[].key (lokg eval's "
            "predictions.jsonl); other lines are skipped")
    buckets: int = setting(256, COUNT, "output files; a head lives in bucket head % buckets")

    @classmethod
    def related_problem(cls, settings: Mapping) -> tuple[str, str] | None:
        """A selector (HEAD_SELECTORS) needs exactly one of hot_share and hot_count, query_log
        needs its log, and none of the three applies to ``all`` or a keys file (a setting that
        would be ignored is refused rather than silently dropped)."""
        heads = settings["heads"]
        quoted = {k: shown(settings[k]) for k in ("heads", "hot_share", "hot_count", "query_log")}
        if heads in HEAD_SELECTORS:
            if settings["hot_share"] is None and settings["hot_count"] is None:
                return ("path_cache.heads", f"path_cache.heads: {quoted['heads']} needs the hot "
                        "set's size: path_cache.hot_share (a share of all heads, 0 < x <= 1) or "
                        "path_cache.hot_count (a number of heads >= 1)")
            if settings["hot_share"] is not None and settings["hot_count"] is not None:
                return ("path_cache.hot_count", f"path_cache.hot_count: {quoted['hot_count']} and "
                        f"path_cache.hot_share={quoted['hot_share']} are both set (set one of the "
                        "two)")
        else:
            for key in ("hot_share", "hot_count"):
                if settings[key] is not None:
                    return (f"path_cache.{key}", f"path_cache.{key}: {quoted[key]} applies only to "
                            f"path_cache.heads {' | '.join(HEAD_SELECTORS)} (heads is "
                            f"{quoted['heads']})")
        return cls._query_log_problem(settings, quoted)

    @staticmethod
    def _query_log_problem(settings: Mapping, quoted: Mapping) -> tuple[str, str] | None:
        heads = settings["heads"]
        if heads == "query_log" and settings["query_log"] is None:
            return ("path_cache.heads", "path_cache.heads: 'query_log' needs path_cache.query_log "
                    "(a JSON-lines file or directory of answers with their linked entities)")
        if heads != "query_log" and settings["query_log"] is not None:
            return ("path_cache.query_log", f"path_cache.query_log: {quoted['query_log']} applies "
                    f"only to path_cache.heads=query_log (heads is {quoted['heads']})")
        return None

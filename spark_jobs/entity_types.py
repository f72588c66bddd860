"""Stage ``entity_types`` (Spark): fill ``entities.types`` for NMI.

One rule is chosen per build and recorded in ``report["rule"]``:

* ``explicit`` — the dump has type assertions (``type.object.type`` / ``rdf:type``, the
  ``type_assertions`` table of ingest is non-empty): types = the asserted types.
* ``domain`` — else, when most distinct relation names are Freebase-style paths
  (``/people/person/place_of_birth`` or ``people.person.place_of_birth``): the subject of a
  triple has the relation's domain type, its first two segments joined by a dot
  (``people.person``; a CVT compound ``/tv/tv_program/regular_cast./tv/regular_tv_appearance/actor``
  gives ``tv.tv_program``). An entity gets the domains of all its outgoing relations.
* ``frequent_relation`` — else: the entity's most frequent outgoing relation name is its type
  proxy (ties → the smallest name).

Entities the rule leaves untyped fall back, in this order, to the later rules — ``explicit`` →
``domain`` (Freebase-style relations only) → ``frequent_relation`` → ``incoming_relation``: an
entity with no outgoing edge at all gets ``~<name>`` of its most frequent *incoming* relation
(ties → smallest name), e.g. ``~people.person.place_of_birth`` for a place. The ``~`` marks a
proxy taken from the entity's role as an object. Entities with no edge and no assertion stay
untyped (``[]``). ``types`` is always a sorted list of distinct strings.

Report: rule, typed_entities, untyped_entities, distinct_types, typed_by (entities per source),
fallbacks (entities typed by a rule other than the build's rule), freebase_style_relations.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from lokg.common.stage import StageError, stage_input
from lokg.runtime.contract import INCOMING_TYPE_PREFIX, TABLE_SCHEMAS, read_table
from lokg.spark_jobs import entity_types_driver
from lokg.spark_jobs.session import get_spark
from lokg.spark_jobs.settings import EntityTypesSettings

RULES = ("explicit", "domain", "frequent_relation")
SOURCES = ("explicit", "domain", "frequent_relation", "incoming_relation")
INCOMING_PREFIX = INCOMING_TYPE_PREFIX
BROADCAST_ENTITIES = 1_000_000  # up to this many entities: broadcast joins, one output file

_SLASH = re.compile(r"^/([^/\s]+)/([^/\s]+)/\S+$")  # /domain/type/property[./cvt/...]
_DOTTED = re.compile(r"^([A-Za-z0-9_]+)\.([A-Za-z0-9_]+)(?:\.[A-Za-z0-9_]+)+$")  # domain.type.prop


def relation_domain(name: str) -> str | None:
    """``people.person`` for a Freebase-style relation name, else None."""
    match = _SLASH.match(name) or _DOTTED.match(name)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def _rows(path: Path) -> int:
    files = [path] if path.is_file() else sorted(path.rglob("*.parquet"))
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def _edge_stats(triples: DataFrame, rels: DataFrame, side: str, prefix: str = "") -> DataFrame:
    """Per entity on ``side`` (s: outgoing, o: incoming): the distinct domains of its relations
    and the most frequent relation name (ties → smallest name), prefixed."""
    counts = triples.groupBy(F.col(side).alias("id"), "r").count().join(F.broadcast(rels), "r")
    best = F.min(F.struct((-F.col("count")).alias("neg"), F.col("name")))["name"]
    return counts.groupBy("id").agg(
        F.array_sort(F.collect_set("domain")).alias("domains"),  # nulls are not collected
        F.concat(F.lit(prefix), best).alias("frequent"),
    )


def _distinct_types(path: Path) -> int:
    """Distinct type strings of a written entities table (read column-wise on the driver)."""
    import pyarrow.compute as pc

    seen: set[str] = set()
    for f in sorted(path.glob("*.parquet")):
        for batch in pq.ParquetFile(f).iter_batches(columns=["types"]):
            seen.update(pc.unique(pc.list_flatten(batch.column(0))).to_pylist())
    return len(seen)


def _relation_domains(rel_path) -> tuple[dict, dict]:
    """Relation id → name, and id → the domain its Freebase-style name gives (or None)."""
    relations = read_table(rel_path, columns=["id", "name"])
    names = dict(zip(relations["id"].to_pylist(), relations["name"].to_pylist()))
    return names, {k: relation_domain(n) for k, n in names.items()}


def _write_types(path: str, config: dict, paths: tuple, names: dict, domains: dict,
                 cascade: list[str], out_path: Path, *, small: bool) -> dict:
    """Write the typed entities on the ``driver`` or the ``spark`` path; the count each
    source typed."""
    ent_path, tri_path, ta_path = paths
    if path == "driver":
        return entity_types_driver.write_types(
            (ent_path, tri_path, ta_path if "explicit" in cascade else None),
            names, domains, cascade, out_path)
    return _spark_types(config, paths, names, domains, cascade, out_path, small=small)


def run(config: dict, inputs: dict, out_dir: str) -> dict:
    started = time.perf_counter()
    ent_path, rel_path, tri_path = (stage_input(inputs, "entity_types", n)
                                      for n in ("entities", "relations", "triples"))
    ta_path = Path(inputs["type_assertions"]) if inputs.get("type_assertions") else None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    out_path = out / "entities.parquet"

    names, domains = _relation_domains(rel_path)
    freebase_style = sum(d is not None for d in domains.values())
    n_entities = _rows(ent_path)
    n_assertions = _rows(ta_path) if ta_path is not None and ta_path.exists() else 0
    rule = _first_rule(n_assertions, len(names), freebase_style)
    cascade = list(SOURCES[SOURCES.index(rule):])
    n_triples = _rows(tri_path)
    path = "driver" if n_triples <= EntityTypesSettings.of(config, StageError).driver_max_triples \
        else "spark"
    by_source = _write_types(path, config, (ent_path, tri_path, ta_path), names, domains,
                             cascade, out_path, small=n_entities <= BROADCAST_ENTITIES)
    untyped = by_source.pop(None, 0)
    report = {
        "rule": rule,
        "path": path,
        "triples": n_triples,
        "cascade": cascade,
        "typed_entities": sum(by_source.values()),
        "untyped_entities": untyped,
        "distinct_types": _distinct_types(out_path),
        "typed_by": {s: by_source.get(s, 0) for s in SOURCES},
        "fallbacks": {s: by_source.get(s, 0) for s in SOURCES if s != rule},
        "type_assertions": n_assertions,
        "relations": len(names),
        "freebase_style_relations": freebase_style,
        "incoming_prefix": INCOMING_PREFIX,
        "seconds": round(time.perf_counter() - started, 3),
    }
    return {"outputs": {"entities": str(out_path)}, "report": report}


def _spark_types(config: dict, paths: tuple, names: dict, domains: dict, cascade: list[str],
                 out_path: Path, *, small: bool) -> dict:
    """The Spark path (more triples than ``driver_max_triples``): the typed entities written,
    the count each source typed returned. ``small``: few enough entities to broadcast."""
    ent_path, tri_path, ta_path = paths
    spark: SparkSession = get_spark(config, "lokg-entity_types")
    rels = spark.createDataFrame([(k, n, domains[k]) for k, n in names.items()],
                                 "r long, name string, domain string")
    typed, candidates = _candidate_types(
        spark.read.parquet(str(ent_path)), spark.read.parquet(str(tri_path)).select("s", "r", "o"),
        rels, spark.read.parquet(str(ta_path)) if "explicit" in cascade else None, small)
    return _write_typed(_choose(typed, cascade, candidates), small, out_path)


def _first_rule(n_assertions: int, n_relations: int, freebase_style: int) -> str:
    """Where the cascade starts: explicit type assertions when the dump has them, else the
    Freebase-style domain when most relation names carry one, else the frequent relation."""
    if n_assertions:
        return "explicit"
    if n_relations and freebase_style * 2 > n_relations:
        return "domain"
    return "frequent_relation"


def _candidate_types(entities, triples, rels, assertions, small: bool):
    """The entities joined with every source's candidate type list (null where a source has
    none for the entity); the small side broadcast when the entities fit."""
    side = F.broadcast if small else (lambda df: df)
    typed = entities.drop("types")
    candidates: dict[str, object] = {}
    if assertions is not None:
        explicit = (assertions.groupBy("id")
                    .agg(F.array_sort(F.collect_set("type")).alias("_explicit")))
        typed = typed.join(side(explicit), "id", "left")
        candidates["explicit"] = F.col("_explicit")
    out_stats = _edge_stats(triples, rels, "s").select(
        "id", F.col("domains").alias("_domains"), F.col("frequent").alias("_out"))
    in_stats = _edge_stats(triples, rels, "o", INCOMING_PREFIX).select(
        "id", F.col("frequent").alias("_in"))
    typed = typed.join(side(out_stats), "id", "left").join(side(in_stats), "id", "left")
    candidates["domain"] = F.when(F.size("_domains") > 0, F.col("_domains"))
    candidates["frequent_relation"] = F.when(F.col("_out").isNotNull(), F.array(F.col("_out")))
    candidates["incoming_relation"] = F.when(F.col("_in").isNotNull(), F.array(F.col("_in")))
    return typed, candidates


def _choose(typed, cascade: list[str], candidates: dict):
    """Each entity's types from the first source of the cascade that has some, and that
    source's name in ``_source`` (null: untyped)."""
    chosen = F.lit(None).cast("string")
    for source in reversed(cascade):
        chosen = F.when(candidates[source].isNotNull(), F.lit(source)).otherwise(chosen)
    types = F.coalesce(*[candidates[s] for s in cascade], F.array().cast("array<string>"))
    columns = [types.alias("types") if c == "types" else F.col(c)
               for c in TABLE_SCHEMAS["entities"].names]
    return typed.select(*columns, chosen.alias("_source"))


def _write_typed(typed, small: bool, out_path: Path) -> dict:
    """Write the entities in id order; the count of entities each source typed, counted on
    the way (None: untyped)."""
    typed = typed.coalesce(1).sortWithinPartitions("id") if small else typed.orderBy("id")
    observed = Observation("types")
    typed = typed.observe(observed, *[F.count_if(F.col("_source") == s).alias(s) for s in SOURCES],
                          F.count_if(F.col("_source").isNull()).alias("untyped"))
    typed.drop("_source").write.mode("overwrite").parquet(str(out_path))
    by_source = {k: int(v) for k, v in observed.get.items()}
    by_source[None] = by_source.pop("untyped")
    return by_source

"""Stage ``entity_types``: fill ``entities.types`` for NMI, as SQL on the build's engine
(spark_jobs/engine.py: DuckDB or Spark SQL, the same text).

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
untyped (``[]``). ``types`` is always a sorted list of distinct strings (byte order), never
null; triples whose relation is not in ``relations`` give no type. An id with assertions whose
types are all null is typed ``explicit`` with ``[]``.

Output: the entities in id order, one file, the contract's schema with ``types`` not null.
Report: rule, typed_entities, untyped_entities, distinct_types, typed_by (entities per source),
fallbacks (entities typed by a rule other than the build's rule), freebase_style_relations,
engine.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pyarrow as pa

from lokg.common.stage import stage_input
from lokg.runtime.contract import INCOMING_TYPE_PREFIX, TABLE_SCHEMAS, read_table, table_rows
from lokg.spark_jobs.engine import Engine, open_engine

RULES = ("explicit", "domain", "frequent_relation")
SOURCES = ("explicit", "domain", "frequent_relation", "incoming_relation")
INCOMING_PREFIX = INCOMING_TYPE_PREFIX
#: The contract's entities with ``types`` not null (an empty list for an untyped entity)
TYPED = TABLE_SCHEMAS["entities"].set(TABLE_SCHEMAS["entities"].get_field_index("types"),
                                      pa.field("types", pa.list_(pa.string()), nullable=False))

_SLASH = re.compile(r"^/([^/\s]+)/([^/\s]+)/\S+$")  # /domain/type/property[./cvt/...]
_DOTTED = re.compile(r"^([A-Za-z0-9_]+)\.([A-Za-z0-9_]+)(?:\.[A-Za-z0-9_]+)+$")  # domain.type.prop

#: Each source's candidate list per entity id (view ``by_<source>``: ``id, types``; no row: no
#: candidate), over the relations ``rels`` (r, name, domain) and the triples per (entity,
#: relation) on an end, ``out_counts`` / ``in_counts`` (id, r, n)
SOURCE_SQL = {
    "explicit": "SELECT id, list_sort(list_distinct(list(type))) AS types "
                "FROM type_assertions GROUP BY id",
    "domain": "SELECT id, list_sort(list(domain)) AS types FROM (SELECT DISTINCT c.id, "
              "rels.domain FROM out_counts c JOIN rels ON c.r = rels.r "
              "WHERE rels.domain IS NOT NULL) GROUP BY id",
    "frequent_relation": "SELECT id, [{most_frequent}] AS types FROM {counts}",
    "incoming_relation": "SELECT id, ['{prefix}' || {most_frequent}] AS types FROM {counts}",
}
#: Per entity (grouped by id), the name of its relation with the most triples on one end, ties
#: to the smallest name; ``{counts}``: triples per (entity, relation) on that end
MOST_FREQUENT = "arg_min(rels.name, (-c.n, rels.name))"
FREQUENT_OF = "{counts} c JOIN rels ON c.r = rels.r GROUP BY c.id"


def relation_domain(name: str) -> str | None:
    """``people.person`` for a Freebase-style relation name, else None."""
    match = _SLASH.match(name) or _DOTTED.match(name)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def _relations(rel_path) -> pa.Table:
    """The relations as ``r, name, domain`` (the domain of a Freebase-style name, else null)."""
    relations = read_table(rel_path, columns=["id", "name"])
    names = relations["name"].to_pylist()
    return pa.table({"r": relations["id"].cast(pa.int64()), "name": pa.array(names, pa.string()),
                     "domain": pa.array([relation_domain(n) for n in names], pa.string())})


def _first_rule(n_assertions: int, n_relations: int, freebase_style: int) -> str:
    """Where the cascade starts: explicit type assertions when the dump has them, else the
    Freebase-style domain when most relation names carry one, else the frequent relation."""
    if n_assertions:
        return "explicit"
    if n_relations and freebase_style * 2 > n_relations:
        return "domain"
    return "frequent_relation"


def chosen_sql(cascade: list[str]) -> str:
    """Each entity id's ``types`` from the first source of ``cascade`` that has a candidate
    (else ``[]``) and that source's name in ``source`` (null: untyped)."""
    types = ", ".join(f"by_{s}.types" for s in cascade)
    chosen = " ".join(f"WHEN by_{s}.id IS NOT NULL THEN '{s}'" for s in cascade)
    joins = " ".join(f"LEFT JOIN by_{s} ON e.id = by_{s}.id" for s in cascade)
    return (f"SELECT e.id, coalesce({types}, CAST([] AS VARCHAR[])) AS types, "
            f"CASE {chosen} END AS source FROM (SELECT id FROM entities) e {joins}")


#: The entities with their chosen types, the contract's columns
TYPED_SQL = "SELECT {columns} FROM entities e JOIN chosen c ON e.id = c.id".format(
    columns=", ".join("c.types" if c == "types" else f"e.{c}" for c in TYPED.names))


def _define_sources(engine: Engine, cascade: list[str]) -> None:
    """The views the cascade reads: per-end relation counts and each source's candidates."""
    engine.view("out_counts", "SELECT s AS id, r, count(*) AS n FROM triples GROUP BY s, r",
                materialise=True)
    engine.view("in_counts", "SELECT o AS id, r, count(*) AS n FROM triples GROUP BY o, r")
    ends = {"frequent_relation": "out_counts", "incoming_relation": "in_counts"}
    for source in cascade:
        counts = FREQUENT_OF.format(counts=ends.get(source, ""))
        engine.view(f"by_{source}", SOURCE_SQL[source].format(
            most_frequent=MOST_FREQUENT, counts=counts, prefix=INCOMING_PREFIX))


def write_types(engine: Engine, paths: tuple, relations: pa.Table, cascade: list[str],
                out_path: Path) -> tuple[dict, int]:
    """Write the typed entities (``out_path``: one file, in id order); (the number of entities
    each source typed, None: untyped; the distinct type strings written)."""
    ent_path, tri_path, ta_path = paths
    engine.register("entities", ent_path)
    engine.register("triples", tri_path)
    engine.register_arrow("rels", relations)
    if "explicit" in cascade:
        engine.register("type_assertions", ta_path)
    _define_sources(engine, cascade)
    engine.view("chosen", chosen_sql(cascade), materialise=True)
    engine.write(TYPED_SQL, out_path, order_by=["id"], schema=TYPED)
    counts = engine.fetch("SELECT source, count(*) AS n FROM chosen GROUP BY source")
    distinct = engine.fetch("SELECT count(DISTINCT t) AS n FROM "
                            "(SELECT unnest(types) AS t FROM chosen)")
    by_source = dict(zip(counts["source"].to_pylist(), counts["n"].to_pylist()))
    return by_source, int(distinct["n"][0].as_py())


def run(config: dict, inputs: dict, out_dir: str) -> dict:
    started = time.perf_counter()
    ent_path, rel_path, tri_path = (stage_input(inputs, "entity_types", n)
                                      for n in ("entities", "relations", "triples"))
    ta_path = Path(inputs["type_assertions"]) if inputs.get("type_assertions") else None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    out_path = out / "entities.parquet"

    relations = _relations(rel_path)
    freebase_style = relations["domain"].length() - relations["domain"].null_count
    n_assertions = table_rows(ta_path) if ta_path is not None and ta_path.exists() else 0
    rule = _first_rule(n_assertions, relations.num_rows, freebase_style)
    cascade = list(SOURCES[SOURCES.index(rule):])
    with open_engine(config, out) as engine:
        by_source, distinct_types = write_types(engine, (ent_path, tri_path, ta_path),
                                                relations, cascade, out_path)
    untyped = by_source.pop(None, 0)
    report = {
        "rule": rule,
        "engine": engine.name,
        "triples": table_rows(tri_path),
        "cascade": cascade,
        "typed_entities": sum(by_source.values()),
        "untyped_entities": untyped,
        "distinct_types": distinct_types,
        "typed_by": {s: by_source.get(s, 0) for s in SOURCES},
        "fallbacks": {s: by_source.get(s, 0) for s in SOURCES if s != rule},
        "type_assertions": n_assertions,
        "relations": relations.num_rows,
        "freebase_style_relations": freebase_style,
        "incoming_prefix": INCOMING_PREFIX,
        "seconds": round(time.perf_counter() - started, 3),
    }
    return {"outputs": {"entities": str(out_path)}, "report": report}

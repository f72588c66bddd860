"""Ingest's tables from the parsed lines (the table ``parsed``: ``ingest_sql.PARSED``), as SQL
on the build's engine: the quarantine, the graph's edges, entity and relation ids, triples,
entities with their literals, type assertions, and what the feedback deltas alone state.

Ids are dense and deterministic: entities numbered 0..N-1 in key order, relations in name
order (both engines order strings by code point). Names, descriptions: the first by (file,
line); aliases and attributes: first-seen order, de-duplicated (a record's aliases, on one
line, by text).
"""

from __future__ import annotations

from pathlib import Path

from lokg.spark_jobs import formats as fm
from lokg.spark_jobs.engine import Engine, literal_list
from lokg.spark_jobs.ingest_checks import TEXT_LIMIT
from lokg.spark_jobs.ingest_sql import POS, SUBJECT_KINDS

_NAMED = literal_list((fm.NAME, fm.ALIAS, fm.DESCRIPTION))


def literal_key(text: str) -> str:
    """Key of a literal node when ``literals_as_edges`` is set: the quoted text."""
    return f"'\"' || {text} || '\"'"


def write_quarantine(engine: Engine, path: Path) -> None:
    """The malformed lines by (file, line), their text cut to ``TEXT_LIMIT`` characters."""
    engine.write(f"""SELECT f.file, p.line, p.reason, substr(p.text, 1, {TEXT_LIMIT}) AS text,
                        p.file_idx FROM parsed p JOIN files f ON p.file_idx = f.file_idx
                     WHERE p.kind = '{fm.MALFORMED}'""", path, order_by=["file_idx", "line"],
                 drop=["file_idx"])


def ids(engine: Engine, literals_as_edges: bool) -> None:
    """Tables ``edges`` (distinct s, p, o keys), ``ent`` (key, id) and ``rel`` (name, id)."""
    attrs = (f" UNION ALL SELECT s, p, {literal_key('o')} FROM parsed WHERE kind = "
             f"'{fm.ATTRIBUTE}' AND graph" if literals_as_edges else "")
    engine.view("edges", f"""SELECT DISTINCT s, p, o FROM (SELECT s, p, o FROM parsed
                WHERE kind = '{fm.EDGE}' AND graph{attrs})""", materialise=True)
    engine.view("ent", f"""SELECT key, CAST(row_number() OVER (ORDER BY key) - 1 AS BIGINT) AS id
        FROM (
        SELECT s AS key FROM edges UNION SELECT o FROM edges UNION
        SELECT s FROM parsed WHERE kind IN {literal_list(SUBJECT_KINDS)} AND graph)""",
                materialise=True)
    engine.view("rel", """SELECT name, CAST(row_number() OVER (ORDER BY name) - 1 AS BIGINT) AS id
                          FROM (SELECT DISTINCT p AS name FROM edges)""", materialise=True)


def write_relations(engine: Engine, path: Path) -> None:
    engine.write("SELECT id, name FROM rel", path, order_by=["id"])


def write_triples(engine: Engine, path: Path) -> None:
    """The distinct edges in ids (distinct keys have distinct ids)."""
    engine.write("""SELECT es.id AS s, r.id AS r, eo.id AS o FROM edges
                    JOIN ent es ON edges.s = es.key JOIN ent eo ON edges.o = eo.key
                    JOIN rel r ON edges.p = r.name""", path, order_by=["s", "r", "o"])


def _facts(literals_as_edges: bool) -> str:
    """(pos, kind, s, p, o) of the facts that name or describe a key: literal facts and the
    entities files' records; blank names, aliases and descriptions left out."""
    lits = f"kind IN {literal_list(fm.LITERAL_KINDS)}"
    named_attrs = ""
    if literals_as_edges:  # attributes became edges to literal nodes; those nodes get names
        lits = f"kind IN {_NAMED}"
        named_attrs = (f" UNION ALL SELECT {POS} AS pos, '{fm.NAME}' AS kind, "
                       f"{literal_key('o')} AS s, p, o FROM parsed WHERE kind = '{fm.ATTRIBUTE}'")
    record = f"FROM parsed WHERE kind = '{fm.RECORD}'"
    facts = f"""SELECT {POS} AS pos, kind, s, p, o FROM parsed WHERE {lits}{named_attrs}
        UNION ALL SELECT {POS}, '{fm.NAME}', s, NULL, o {record}
        UNION ALL SELECT {POS}, '{fm.DESCRIPTION}', s, NULL, p {record}
        UNION ALL SELECT pos, '{fm.ALIAS}', s, NULL, alias FROM (
            SELECT {POS} AS pos, s, unnest(extra) AS alias {record} AND extra IS NOT NULL)"""
    return f"""SELECT * FROM ({facts}) WHERE o IS NOT NULL
               AND NOT (kind IN {_NAMED} AND trim(o) = '')"""


def _literals(literals_as_edges: bool) -> str:
    """Per key: its first name and description, its aliases and attributes in order."""
    def first(kind: str) -> str:
        return f"min_by(o, pos) FILTER (WHERE kind = '{kind}')"

    def in_order(kind: str, value: str) -> str:
        return (f"list_transform(list_sort(list({{'pos': pos, 'v': {value}}}) FILTER "
                f"(WHERE kind = '{kind}')), lambda x: x.v)")

    return f"""SELECT s, {first(fm.NAME)} AS name, {first(fm.DESCRIPTION)} AS description,
        {in_order(fm.ALIAS, 'o')} AS aliases,
        {in_order(fm.ATTRIBUTE, "{'key': p, 'value': o}")} AS attributes
      FROM (SELECT s, kind, p, o, min(pos) AS pos FROM (
              SELECT s, kind, CASE WHEN kind = '{fm.ALIAS}' THEN NULL ELSE p END AS p, o, pos
              FROM ({_facts(literals_as_edges)}) WHERE kind IN {_NAMED}
                OR kind = '{fm.ATTRIBUTE}') GROUP BY s, kind, p, o)
      GROUP BY s"""


def write_entities(engine: Engine, name_rule: str, literals_as_edges: bool, path: Path) -> int:
    """Entities with names, aliases, descriptions and attributes, in id order; returns how
    many have a name of their own."""
    engine.view("literals", f"SELECT l.* FROM ({_literals(literals_as_edges)}) l "
                            "JOIN ent ON l.s = ent.key", materialise=True)
    fallback = "ent.key" if name_rule == "key" else "replace(ent.key, '_', ' ')"
    engine.write(f"""SELECT ent.id, ent.key, coalesce(l.name, {fallback}) AS name,
          coalesce(l.aliases, CAST([] AS VARCHAR[])) AS aliases, l.description,
          CAST([] AS VARCHAR[]) AS types,
          coalesce(l.attributes, CAST([] AS STRUCT(key VARCHAR, value VARCHAR)[])) AS attributes
        FROM ent LEFT JOIN literals l ON l.s = ent.key""", path, order_by=["id"])
    return int(engine.fetch("SELECT count(*) AS n FROM literals WHERE name IS NOT NULL")
               .column("n")[0].as_py())


def write_type_assertions(engine: Engine, path: Path) -> None:
    """(id, type) of the graph lines' type assertions, distinct."""
    engine.write(f"""SELECT DISTINCT ent.id, t.o AS type FROM parsed t JOIN ent
                     ON t.s = ent.key WHERE t.kind = '{fm.TYPE}' AND t.graph""", path,
                 order_by=["id", "type"])


def feedback_added(engine: Engine, delta_file: int | None) -> dict:
    """Edges and entities that only the feedback deltas state (the build report's "added by
    feedback"), ``delta_file``: the index of the deltas' triples file; {} when none was read."""
    if delta_file is None:
        return {}
    edge = f"kind = '{fm.EDGE}' AND graph"
    ours, others = f"file_idx = {delta_file}", f"file_idx <> {delta_file}"
    engine.view("fb_added", f"""SELECT s, p, o FROM parsed WHERE {edge} AND {ours}
                EXCEPT SELECT s, p, o FROM parsed WHERE {edge} AND {others}""", materialise=True)
    counts = engine.fetch(f"""SELECT (SELECT count(*) FROM fb_added) AS edges,
        (SELECT count(*) FROM (SELECT s FROM fb_added UNION SELECT o FROM fb_added
           EXCEPT (SELECT s FROM parsed WHERE graph AND {others}
                   UNION SELECT o FROM parsed WHERE {edge} AND {others}))) AS nodes""")
    return {"feedback_edges_added": int(counts.column("edges")[0].as_py()),
            "feedback_nodes_added": int(counts.column("nodes")[0].as_py())}


def counts(engine: Engine) -> dict[tuple[str, str | None], int]:
    """The parsed lines counted by (kind, reason)."""
    rows = engine.fetch("SELECT kind, reason, count(*) AS n FROM parsed GROUP BY kind, reason")
    return {(k, r): int(n) for k, r, n in zip(*(rows.column(c).to_pylist()
                                                 for c in ("kind", "reason", "n")))}


def scalar(engine: Engine, sql: str) -> int:
    """The one number ``sql`` returns (column ``n``)."""
    return int(engine.fetch(sql).column("n")[0].as_py())


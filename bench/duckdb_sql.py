"""The DuckDB reference of ingest (bench/duckdb_reference.py), as SQL; relation_stats' own
SQL (``spark_jobs.relation_stats`` on the DuckDB engine) is its reference for that stage.

The rules are those of ``spark_jobs.formats`` / ``spark_jobs.ingest``; the N-Triples regexes
are taken from ``spark_jobs.formats`` and rewritten for RE2 (no possessive quantifiers; Java's
``\\s`` spelled out, since RE2's lacks ``\\x0B``), so that both sides classify lines by the
same patterns. Literal text with escapes goes through ``formats.unescape_nt`` (a DuckDB Python
function, only for those rows), which agrees with Spark's ``unescapeJava`` on every N-Triples
escape. Outputs are Parquet files under ``out``, read back by ``fetch_outputs`` in the shape
``read_spark_outputs`` gives Spark's.
"""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow.parquet as pq

from lokg.spark_jobs import formats as fm
from lokg.spark_jobs.formats import re2


def q(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _in(values) -> str:
    return "(" + ", ".join(q(v) for v in values) + ")"


_OBJECT = re2(r'^"(.*)"(?:@[A-Za-z0-9\-]+|\^\^<[^<>"\s]*>)?$')  # as in formats.parse_nt
_LANG = r'"@([A-Za-z0-9\-]+)$'


def _lang_ok(languages: list[str]) -> str:
    """``formats._lang_ok`` in SQL over the column ``lang``."""
    conds = ["false"]
    for code in languages:
        code = (code or "").lower()
        conds.append(f"lower(lang) = {q(code)}")
        if code:
            conds.append(f"starts_with(lower(lang), {q(code + '-')})")
    return "(" + " OR ".join(conds) + ")"


def _kind() -> str:
    """``formats.parse_nt``'s kind of a line."""
    named = (*fm.NAME_PREDICATES, *fm.ALIAS_PREDICATES, *fm.DESCRIPTION_PREDICATES)
    return f"""CASE WHEN skip THEN '{fm.SKIP}'
        WHEN NOT ok OR empty THEN '{fm.MALFORMED}'
        WHEN p IN {_in(fm.TYPE_PREDICATES)} THEN '{fm.TYPE}'
        WHEN NOT lit THEN '{fm.EDGE}'
        WHEN p IN {_in(fm.NAME_PREDICATES)} AND keep THEN '{fm.NAME}'
        WHEN p IN {_in(fm.ALIAS_PREDICATES)} AND keep THEN '{fm.ALIAS}'
        WHEN p IN {_in(fm.DESCRIPTION_PREDICATES)} AND keep THEN '{fm.DESCRIPTION}'
        WHEN p IN {_in(named)} THEN '{fm.FILTERED}'
        ELSE '{fm.ATTRIBUTE}' END"""


def _reason() -> str:
    """The quarantine reason of a malformed line: ``formats.parse_nt``'s diagnosis chain."""
    whens = "".join(f" WHEN regexp_matches(value, {q(re2(p))}) THEN {q(r)}"
                    for p, r in fm._DIAGNOSES)
    return (f"CASE WHEN ctl THEN {q(fm.R_CONTROL)} WHEN ok THEN {q(fm.R_EMPTY_IRI)}{whens} "
            f"ELSE {q(fm.R_GARBAGE)} END")


def _setup(con) -> None:
    con.execute(f"""CREATE OR REPLACE MACRO iri_key(term) AS CASE WHEN starts_with(term, '<')
        THEN (CASE WHEN starts_with(substr(term, 2, length(term) - 2), {q(fm.FREEBASE_NS)})
                   THEN substr(term, {len(fm.FREEBASE_NS) + 2}, length(term) - {len(fm.FREEBASE_NS) + 2})
                   ELSE substr(term, 2, length(term) - 2) END)
        ELSE term END""")
    registered = con.execute("SELECT count(*) FROM duckdb_functions() "
                             "WHERE function_name = 'nt_unescape'").fetchone()[0]
    if not registered:
        con.create_function("nt_unescape", fm.unescape_nt, ["VARCHAR"], "VARCHAR",
                            side_effects=False)


def parse(con, nt_path: Path, languages: list[str]) -> None:
    """Table ``parsed``: one row per line (line, kind, s, p, o unescaped, reason, text)."""
    _setup(con)
    con.execute(f"""CREATE OR REPLACE TABLE raw AS SELECT value FROM read_csv({q(str(nt_path))},
        columns = {{'value': 'VARCHAR'}}, header = false, delim = '\x02\x03', quote = '',
        escape = '', auto_detect = false, strict_mode = false)""")
    full = q(re2(fm._FULL))
    con.execute(f"""CREATE OR REPLACE TABLE parsed AS
    WITH l AS (SELECT rowid + 1 AS line, CASE WHEN starts_with(v, chr(65279)) THEN substr(v, 2)
                                           ELSE v END AS value
               FROM (SELECT rowid, coalesce(value, '') AS v FROM raw)),
    m AS (SELECT line, value, trim(value) = '' OR starts_with(trim(value), '#') AS skip,
                 contains(value, chr(1)) AS ctl,
                 regexp_extract(value, {full}, ['st', 'pt', 'ot']) AS t FROM l),
    k AS (SELECT line, value, skip, ctl, NOT ctl AND t.st <> '' AS ok,
                 t.st AS st, t.pt AS pt, t.ot AS ot FROM m),
    f AS (SELECT *, iri_key(st) AS s, iri_key(pt) AS p, starts_with(ot, '"') AS lit,
                 CASE WHEN starts_with(ot, '"') THEN regexp_extract(ot, {q(_OBJECT)}, 1)
                      ELSE iri_key(ot) END AS o_raw,
                 regexp_extract(ot, {q(_LANG)}, 1) AS lang,
                 (st = '<>' OR pt = '<>' OR ot = '<>') AS empty FROM k),
    g AS (SELECT *, {_lang_ok(languages)} AS keep FROM f),
    h AS (SELECT line, value, ctl, ok, s, p, o_raw, lit, {_kind()} AS kind FROM g)
    SELECT line, kind,
           CASE WHEN kind NOT IN ('{fm.SKIP}', '{fm.MALFORMED}') THEN s END AS s,
           CASE WHEN kind NOT IN ('{fm.SKIP}', '{fm.MALFORMED}') THEN p END AS p,
           CASE WHEN kind IN ('{fm.SKIP}', '{fm.MALFORMED}') THEN NULL
                WHEN lit AND contains(o_raw, '\\') THEN nt_unescape(o_raw) ELSE o_raw END AS o,
           CASE WHEN kind = '{fm.MALFORMED}' THEN {_reason()} END AS reason,
           CASE WHEN kind = '{fm.MALFORMED}' THEN substr(value, 1, 500) END AS text
    FROM h""")


def ingest(con, nt_path: Path, languages: list[str], out: Path) -> dict:
    """Parse, quarantine, ids, de-duplicated triples, entities, type assertions → Parquet."""
    parse(con, nt_path, languages)
    lits = _in(fm.LITERAL_KINDS)
    named = _in((fm.NAME, fm.ALIAS, fm.DESCRIPTION))
    con.execute(f"""CREATE OR REPLACE TABLE edges AS
        SELECT DISTINCT s, p, o FROM parsed WHERE kind = '{fm.EDGE}'""")
    con.execute(f"""CREATE OR REPLACE TABLE ent AS
        SELECT key, row_number() OVER (ORDER BY key) - 1 AS id FROM (
          SELECT s AS key FROM edges UNION SELECT o FROM edges UNION
          SELECT s FROM parsed WHERE kind IN {_in((*fm.LITERAL_KINDS, fm.FILTERED, fm.TYPE))})""")
    con.execute("""CREATE OR REPLACE TABLE rel AS
        SELECT p AS name, row_number() OVER (ORDER BY p) - 1 AS id FROM (SELECT DISTINCT p FROM edges)""")
    con.execute(f"""CREATE OR REPLACE TABLE facts AS
        SELECT s, kind, p, o, min(line) AS first FROM parsed
        WHERE kind IN {lits} AND o IS NOT NULL AND NOT (kind IN {named} AND trim(o) = '')
        GROUP BY ALL""")
    copies = {
        "quarantine": f"""SELECT line, reason, text FROM parsed WHERE kind = '{fm.MALFORMED}'
                          ORDER BY line""",
        "relations": "SELECT id, name FROM rel ORDER BY id",
        "triples": """SELECT es.id AS s, r.id AS r, eo.id AS o FROM edges
                      JOIN ent es ON edges.s = es.key JOIN ent eo ON edges.o = eo.key
                      JOIN rel r ON edges.p = r.name ORDER BY s, r, o""",
        "entities": f"""SELECT ent.id, ent.key, coalesce(a.name, ent.key) AS name,
                          coalesce(a.aliases, []::VARCHAR[]) AS aliases, a.description,
                          coalesce(a.attributes, []::STRUCT(key VARCHAR, value VARCHAR)[])
                            AS attributes
                        FROM ent LEFT JOIN (
                          SELECT s,
                            arg_min(o, first) FILTER (WHERE kind = '{fm.NAME}') AS name,
                            arg_min(o, first) FILTER (WHERE kind = '{fm.DESCRIPTION}') AS description,
                            list(o ORDER BY first) FILTER (WHERE kind = '{fm.ALIAS}') AS aliases,
                            list({{'key': p, 'value': o}} ORDER BY first)
                              FILTER (WHERE kind = '{fm.ATTRIBUTE}') AS attributes
                          FROM facts GROUP BY s) a ON a.s = ent.key ORDER BY ent.id""",
        "type_assertions": f"""SELECT DISTINCT ent.id, parsed.o AS type FROM parsed
                               JOIN ent ON parsed.s = ent.key WHERE kind = '{fm.TYPE}'""",
    }
    for name, sql in copies.items():
        con.execute(f"COPY ({sql}) TO {q(str(out / f'{name}.parquet'))} (FORMAT parquet)")
    counts = dict(con.execute("SELECT kind, count(*) FROM parsed GROUP BY kind").fetchall())
    return {"lines": sum(n for k, n in counts.items() if k != fm.SKIP),
            "malformed": counts.get(fm.MALFORMED, 0)}


# ============================================================================================
# comparison

#: output → (columns compared, sort key)
COMPARED = {
    "quarantine": (["line", "reason", "text"], ["line"]),
    "relations": (["id", "name"], ["id"]),
    "triples": (["s", "r", "o"], ["s", "r", "o"]),
    "entities": (["id", "key", "name", "aliases", "description", "attributes"], ["id"]),
    "type_assertions": (["id", "type"], ["id", "type"]),
    "relation_stats": (["r", "name", "triples", "heads", "tails", "entities", "entropy",
                        "type_pairs"], ["r"]),
    "relation_pairs": (["r_i", "r_j", "shared_entities", "jaccard", "nmi", "source"],
                       ["r_i", "r_j"]),
}


def _rows(path: str | Path, name: str) -> list[dict]:
    columns, key = COMPARED[name]
    table = pq.read_table(str(path), columns=columns)
    return table.sort_by([(k, "ascending") for k in key]).to_pylist()


def fetch_outputs(out: Path) -> dict[str, list[dict]]:
    """Each output under ``out``: ``NAME.parquet``, or the directory ``NAME`` of part files."""
    return {name: _rows(out / f"{name}.parquet" if (out / f"{name}.parquet").exists()
                        else out / name, name) for name in COMPARED}


def read_spark_outputs(outputs: dict, names=COMPARED) -> dict[str, list[dict]]:
    """Spark's outputs ``names`` (``entities``: entity_types' table, whose columns but
    ``types`` are ingest's)."""
    return {name: _rows(outputs[name], name) for name in names}


def _same(a, b, tol: float) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=0, abs_tol=tol)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], tol) for k in a)
    return a == b


def difference(spark: list[dict], duck: list[dict], tol: float) -> str:
    """'equal', or the row count / first differing row of two sorted outputs."""
    if len(spark) != len(duck):
        return f"rows: Spark {len(spark)}, DuckDB {len(duck)}"
    for i, (a, b) in enumerate(zip(spark, duck)):
        if not _same(a, b, tol):
            return f"row {i}: Spark {a} != DuckDB {b}"
    return "equal"

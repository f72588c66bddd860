"""The DuckDB reference of ingest (bench/duckdb_reference.py), as SQL; relation_stats' own
SQL (``spark_jobs.relation_stats`` on the DuckDB engine) is its reference for that stage.

The rules are those of ``spark_jobs.ingest``; the lines are classified by the stage's own SQL
(``spark_jobs.ingest_sql``). Outputs are Parquet files under ``out``, read back by
``fetch_outputs`` in the shape ``read_spark_outputs`` gives Spark's.
"""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow.parquet as pq

from lokg.spark_jobs import formats as fm
from lokg.spark_jobs.engine import literal, literal_list


def parse(con, nt_path: Path, languages: list[str]) -> None:
    """Table ``parsed``: one row per line (line, kind, s, p, o unescaped, reason, text) — the
    stage's own N-Triples rules (``spark_jobs.ingest_sql``) on DuckDB."""
    import tempfile

    from lokg.spark_jobs.ingest_read import write_lines
    from lokg.spark_jobs.ingest_sql import parse_nt

    lines = Path(tempfile.mkdtemp(prefix="duckdb-ref-")) / "lines.parquet"
    write_lines(fm.Plan("nt", [fm.Source("nt", (Path(nt_path),), True)]), lines)
    registered = con.execute("SELECT count(*) FROM duckdb_functions() "
                             "WHERE function_name = 'nt_unescape'").fetchall()[0][0]
    if not registered:
        con.create_function("nt_unescape", fm.unescape_nt, ["VARCHAR"], "VARCHAR",
                            side_effects=False)
    con.execute(f"""CREATE OR REPLACE TABLE parsed AS SELECT line, kind, s, p, o, reason,
        substr(text, 1, 500) AS text FROM ({parse_nt(f"read_parquet({literal(str(lines))})", languages)})""")


def ingest(con, nt_path: Path, languages: list[str], out: Path) -> dict:
    """Parse, quarantine, ids, de-duplicated triples, entities, type assertions → Parquet."""
    parse(con, nt_path, languages)
    lits = literal_list(fm.LITERAL_KINDS)
    named = literal_list((fm.NAME, fm.ALIAS, fm.DESCRIPTION))
    con.execute(f"""CREATE OR REPLACE TABLE edges AS
        SELECT DISTINCT s, p, o FROM parsed WHERE kind = '{fm.EDGE}'""")
    con.execute(f"""CREATE OR REPLACE TABLE ent AS
        SELECT key, row_number() OVER (ORDER BY key) - 1 AS id FROM (
          SELECT s AS key FROM edges UNION SELECT o FROM edges UNION
          SELECT s FROM parsed WHERE kind IN {literal_list((*fm.LITERAL_KINDS, fm.FILTERED, fm.TYPE))})""")
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
        con.execute(f"COPY ({sql}) TO {literal(str(out / f'{name}.parquet'))} (FORMAT parquet)")
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

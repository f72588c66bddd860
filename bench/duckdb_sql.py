"""The DuckDB reference of ingest and relation_stats (bench/duckdb_reference.py), as SQL.

The rules are those of ``spark_jobs.ingest`` / ``spark_jobs.relation_stats``; the lines are
classified by the stage's own SQL (``spark_jobs.ingest_sql``). Outputs are Parquet files
under ``out``, read back by ``fetch_outputs`` in the shape ``read_spark_outputs`` gives Spark's.
"""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow.parquet as pq

from lokg.spark_jobs import formats as fm
from lokg.spark_jobs.relation_stats_driver import DIGITS, UNTYPED


def q(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _in(values) -> str:
    return "(" + ", ".join(q(v) for v in values) + ")"


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
        substr(text, 1, 500) AS text FROM ({parse_nt(f"read_parquet({q(str(lines))})", languages)})""")


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


def _typed(entities: str, rule: str) -> str:
    """``relation_stats._typed_entities``: each entity's canonical type set (sorted array)."""
    clean = "list_sort(list_distinct(list_filter(coalesce(types, []::VARCHAR[]), x -> x <> '')))"
    if rule == "min":
        clean = f"(CASE WHEN len({clean}) > 0 THEN [list_min({clean})] ELSE []::VARCHAR[] END)"
    return f"""SELECT id AS e, CASE WHEN len(c) > 0 THEN c ELSE [{q(UNTYPED)}] END AS ts
               FROM (SELECT id, {clean} AS c FROM read_parquet({q(entities)}))"""


def per_relation(con, out: Path, entities: str, rule: str) -> None:
    """Tables t (distinct triples), er (relation, entity, is-head), tp (P_r) and stats."""
    con.execute(f"""CREATE OR REPLACE TABLE t AS SELECT DISTINCT s, r, o
                    FROM read_parquet({q(str(out / 'triples.parquet'))})""")
    con.execute(f"""CREATE OR REPLACE TABLE per_r AS SELECT r, sum(c) AS triples,
        count(*) AS tails,
        round(greatest(0.0, ln(sum(c)) - sum(c * ln(c)) / sum(c)), {DIGITS}) AS entropy
        FROM (SELECT r, o, count(*) AS c FROM t GROUP BY r, o) GROUP BY r""")
    con.execute("""CREATE OR REPLACE TABLE er AS SELECT r, e, max(h) AS h FROM (
        SELECT r, s AS e, 1 AS h FROM t UNION ALL SELECT r, o AS e, 0 AS h FROM t) GROUP BY r, e""")
    con.execute(f"CREATE OR REPLACE TABLE typed AS {_typed(entities, rule)}")
    con.execute(f"""CREATE OR REPLACE TABLE tp AS
    WITH g AS (SELECT t.r, coalesce(h.ts, [{q(UNTYPED)}]) AS hts,
                      coalesce(tt.ts, [{q(UNTYPED)}]) AS tts, count(*) AS c
               FROM t LEFT JOIN typed h ON t.s = h.e LEFT JOIN typed tt ON t.o = tt.e GROUP BY ALL),
    a AS (SELECT r, unnest(hts) AS head_type, tts, c / (len(hts) * len(tts)) AS w FROM g),
    b AS (SELECT r, head_type, unnest(tts) AS tail_type, w FROM a),
    s AS (SELECT r, head_type, tail_type, sum(w) AS w FROM b GROUP BY ALL)
    SELECT s.r, head_type, tail_type, round(w / per_r.triples, {DIGITS}) AS p
    FROM s JOIN per_r USING (r)""")
    con.execute(f"""COPY (SELECT rel.id AS r, rel.name, coalesce(per_r.triples, 0) AS triples,
          coalesce(z.heads, 0) AS heads, coalesce(per_r.tails, 0) AS tails,
          coalesce(z.entities, 0) AS entities, coalesce(per_r.entropy, 0.0) AS entropy,
          coalesce(d.type_pairs, []) AS type_pairs
        FROM read_parquet({q(str(out / 'relations.parquet'))}) rel
        LEFT JOIN per_r ON per_r.r = rel.id
        LEFT JOIN (SELECT r, count(*) AS entities, sum(h) AS heads FROM er GROUP BY r) z
          ON z.r = rel.id
        LEFT JOIN (SELECT r, list({{'head_type': head_type, 'tail_type': tail_type, 'p': p}}
                                   ORDER BY head_type, tail_type) AS type_pairs
                   FROM tp GROUP BY r) d ON d.r = rel.id ORDER BY rel.id)
        TO {q(str(out / 'relation_stats.parquet'))} (FORMAT parquet)""")


def candidates(con, cfg: dict) -> None:
    """Table cand (r_i, r_j, source) and the exact shared-entity counts of each pair."""
    cap_e, cap_t = int(cfg["max_relations_per_entity"]), int(cfg["max_relations_per_type_pair"])
    floor = float(cfg["type_pair_min_share"])
    con.execute("""CREATE OR REPLACE TABLE er_k AS SELECT er.e, er.r, k.k FROM er
                   JOIN (SELECT e, count(*) AS k FROM er GROUP BY e) k USING (e)""")
    con.execute(f"""CREATE OR REPLACE TABLE entity_pairs AS
        WITH n AS (SELECT e, r FROM er_k WHERE k <= {cap_e})
        SELECT a.r AS r_i, b.r AS r_j, count(*) AS shared_nonhub FROM n a JOIN n b
        ON a.e = b.e AND a.r < b.r GROUP BY ALL""")
    con.execute(f"""CREATE OR REPLACE TABLE cand AS
        WITH tpc AS (SELECT r, head_type, tail_type FROM tp WHERE p >= {floor!r}
                     AND (head_type, tail_type) NOT IN (
                       SELECT (head_type, tail_type) FROM tp WHERE p >= {floor!r}
                       GROUP BY ALL HAVING count(*) > {cap_t})),
        src AS (SELECT r_i, r_j, 'entity' AS source FROM entity_pairs UNION ALL
                SELECT a.r, b.r, 'type' FROM tpc a JOIN tpc b ON a.head_type = b.head_type
                AND a.tail_type = b.tail_type AND a.r < b.r)
        SELECT r_i, r_j, array_to_string(list_sort(list_distinct(list(source))), ',') AS source
        FROM src GROUP BY r_i, r_j""")
    con.execute(f"""CREATE OR REPLACE TABLE hub_shared AS
        WITH hub AS (SELECT e, r FROM er_k WHERE k > {cap_e})
        SELECT c.r_i, c.r_j, count(*) AS shared_hub FROM cand c JOIN hub h1 ON h1.r = c.r_i
        JOIN hub h2 ON h2.e = h1.e AND h2.r = c.r_j GROUP BY ALL""")


def pair_signals(con, out: Path) -> None:
    """relation_pairs: shared entities, Jaccard and NMI = 1 − JSD_bits of every candidate.
    A zero P_r entry gives Spark a null log2 (the term drops out of the sum); likewise here."""
    con.execute(f"""COPY (
    WITH ov AS (SELECT c.r_i, c.r_j, sum(a.p) AS sp, sum(b.p) AS sq,
                  sum(CASE WHEN a.p > 0 AND b.p > 0 THEN
                        a.p * log2(a.p / ((a.p + b.p) / 2)) + b.p * log2(b.p / ((a.p + b.p) / 2))
                      END) AS kl
                FROM cand c JOIN tp a ON a.r = c.r_i JOIN tp b ON b.r = c.r_j
                AND b.head_type = a.head_type AND b.tail_type = a.tail_type GROUP BY ALL),
    side AS (SELECT rs.r, rs.entities AS n, coalesce(m.mass, 0.0) AS mass
             FROM read_parquet({q(str(out / 'relation_stats.parquet'))}) rs
             LEFT JOIN (SELECT r, sum(p) AS mass FROM tp GROUP BY r) m USING (r)),
    x AS (SELECT c.r_i, c.r_j, c.source,
                 coalesce(ep.shared_nonhub, 0) + coalesce(hs.shared_hub, 0) AS shared,
                 coalesce(si.n, 0) AS n_i, coalesce(sj.n, 0) AS n_j,
                 coalesce(si.mass, 0.0) AS m_i, coalesce(sj.mass, 0.0) AS m_j,
                 coalesce(ov.sp, 0.0) AS sp, coalesce(ov.sq, 0.0) AS sq, coalesce(ov.kl, 0.0) AS kl
          FROM cand c LEFT JOIN entity_pairs ep USING (r_i, r_j)
          LEFT JOIN hub_shared hs USING (r_i, r_j) LEFT JOIN ov USING (r_i, r_j)
          LEFT JOIN side si ON si.r = c.r_i LEFT JOIN side sj ON sj.r = c.r_j)
    SELECT r_i, r_j, shared AS shared_entities,
           CASE WHEN n_i + n_j - shared > 0 THEN shared / (n_i + n_j - shared) ELSE 0.0 END
             AS jaccard,
           CASE WHEN m_i <= 0 OR m_j <= 0 THEN 0.0
                ELSE least(1.0, greatest(0.0, 1.0 - 0.5 * ((m_i - sp) + (m_j - sq) + kl))) END
             AS nmi, source
    FROM x ORDER BY r_i, r_j) TO {q(str(out / 'relation_pairs.parquet'))} (FORMAT parquet)""")


def relation_stats(con, out: Path, entities: str, cfg: dict) -> None:
    """relation_stats and relation_pairs from ``out``'s triples/relations and ``entities``."""
    per_relation(con, out, entities, cfg["type_rule"])
    candidates(con, cfg)
    pair_signals(con, out)


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
    return {name: _rows(out / f"{name}.parquet", name) for name in COMPARED}


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

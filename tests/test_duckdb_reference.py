"""bench/duckdb_sql.py's N-Triples parse agrees with spark_jobs.formats line by line, on the
ingest tests' golden lines (every malformed reason, escapes, tags, blank lines, tabs) plus a
byte-order mark and a control character."""

from __future__ import annotations

import pytest

duckdb = pytest.importorskip("duckdb")

from bench import duckdb_sql  # noqa: E402
from lokg.spark_jobs import formats as fm  # noqa: E402
from lokg.spark_jobs import formats_spark as fs  # noqa: E402
from lokg.testing.dumps import NT_LINES, fb  # noqa: E402

LINES = ["\ufeff" + NT_LINES[1], *NT_LINES[1:],
         f"{fb('m.05')} {fb('a.b.c')} \"ctl \u0001 char\" ."]


def spark_rows(spark, path) -> list[tuple]:
    parsed = fs.parse_nt(fs.read_lines(spark, [path]), True, ["en"]).orderBy("mid")
    rows = []
    for r in parsed.collect():
        literal = r["kind"] in fm.LITERAL_KINDS or r["kind"] in (fm.FILTERED, fm.TYPE)
        o = fm.unescape_nt(r["o"]) if literal else r["o"]
        rows.append((r["kind"], r["s"], r["p"], o, r["reason"]))
    return rows


def test_duckdb_parse_agrees_with_spark(spark, tmp_path):
    path = tmp_path / "kg.nt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    con = duckdb.connect()
    duckdb_sql.parse(con, path, ["en"])
    duck = con.execute("SELECT kind, s, p, o, reason FROM parsed ORDER BY line").fetchall()
    assert duck == spark_rows(spark, path)
    assert {k for k, *_ in duck} >= {fm.MALFORMED, fm.SKIP, fm.EDGE, fm.NAME, fm.FILTERED}

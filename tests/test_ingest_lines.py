"""A refresh's ingest from the previous build's line store (spark_jobs/ingest.py): only the
lines the store lacks are parsed, by the same SQL, and the tables, line store and change set
equal those of a refresh that parses every line, whatever the edit; the line parsers' SQL reads
tricky lines alike on both engines."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lokg.common.stage import PREVIOUS
from lokg.pipeline.config import DEFAULTS
from lokg.spark_jobs import formats as fm
from lokg.spark_jobs.ingest import STORE_TABLES
from lokg.spark_jobs.ingest_change_set import CHANGE_SET_PARTS

#: Lines every parser must classify as Spark does: fields, spaces, tabs, comments, a type
#: assertion, a byte-order mark, bytes that are not UTF-8 (and one such comment), a '|'.
TRICKY = [b"/m/a\t/r/one\t/m/b", b"  /m/a \t /r/one\t /m/c  ", b"", b"   ", b"\t", b"\t\t",
          b"# a comment", b"  # indented comment", b"/m/a\t/r/one", b"/m/a\t\t/m/b",
          b"/m/a\t/r/one\t/m/b\textra", b"/m/a\ttype.object.type\t/film/film",
          b"\xef\xbb\xbf/m/bom\t/r/one\t/m/b", b"/m/\xff\t/r/one\t/m/b", b"# \xff comment",
          b"/m/\xc3\t/r/one\t\xe2\x82", b"a|r|b", b"#tag|r|b", b"a|r|", b"a | r | b | c",
          b"/m/a\tJohn Doe", b"/m/a\t", b"/m/a", b"/m/a\tname\twith tab", b" \t ",
          b"/m/\xe2\x82\xac\t/r/\xf0\x9f\x98\x80\t/m/z"]


def write_lines(path: Path, lines: list[bytes], newline: bytes = b"\n") -> Path:
    path.write_bytes(newline.join(lines) + newline)
    return path


def parsed_rows(config: dict, plan: fm.Plan, work: Path) -> list[tuple]:
    """Every line of ``plan`` as the engine of ``config`` parses it (``ingest_sql.parse``)."""
    from lokg.spark_jobs import ingest_sql
    from lokg.spark_jobs.engine import open_engine
    from lokg.spark_jobs.ingest_read import write_lines as read_lines

    read_lines(plan, work / "lines.parquet")
    with open_engine(config, work) as engine:
        engine.register("lines", work / "lines.parquet")
        engine.function("nt_unescape", fm.unescape_nt, ["VARCHAR"], "VARCHAR")
        sql = ingest_sql.parse("lines", [plan.sources[0].parser], ["en"])
        table = engine.fetch(f"SELECT file_idx, line, hash, kind, s, p, o, reason, text "
                             f"FROM ({sql})")
    return sorted(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.spark
@pytest.mark.parametrize("parser", fm.LINE_PARSERS)
def test_tricky_lines_parse_alike_on_both_engines(spark, tmp_path, parser):
    files = (write_lines(tmp_path / "lf.txt", TRICKY),
             write_lines(tmp_path / "crlf.txt", TRICKY[::-1], b"\r\n"),
             write_lines(tmp_path / "cr.txt", TRICKY[:9], b"\r"))
    gz = tmp_path / "gz.txt.gz"
    gz.write_bytes(gzip.compress(b"\n".join(TRICKY) + b"\n"))
    plan = fm.Plan("test", [fm.Source(parser, (*files, gz), True)])
    by_engine = {}
    for name in ("duckdb", "spark"):
        (tmp_path / name).mkdir()
        by_engine[name] = parsed_rows({"engine": {"name": name}}, plan, tmp_path / name)
    assert by_engine["duckdb"] == by_engine["spark"]
    rows = by_engine["duckdb"]
    assert len(rows) == 3 * len(TRICKY) + 9
    at = {(r[0], r[1]): r for r in rows}  # (file, line) → (…, kind, s, p, o, reason, text)
    assert at[(0, 14)][3:] == (fm.MALFORMED, *at[(0, 14)][4:7], fm.R_INVALID_UTF8,
                               "/m/\ufffd\t/r/one\t/m/b")  # not UTF-8
    if parser != "triples_psv":  # MetaQA's '#' starts a title, not a comment
        assert at[(0, 15)][3] == fm.SKIP  # a comment, though not UTF-8
    if parser == "triples_tsv":
        assert at[(0, 13)][3:7] == (fm.EDGE, "/m/bom", "/r/one", "/m/b")  # the BOM dropped
        assert at[(0, 2)][3:7] == (fm.EDGE, "/m/a", "/r/one", "/m/c")  # fields trimmed


def ingest(dump: Path, out: Path, previous: Path | None = None, engine: dict | None = None,
           store: bool = True) -> dict:
    """One ingest of ``dump`` into ``out``; ``previous``: a refresh of that earlier run (with
    its line store unless not ``store``); ``engine``: a config naming one (DuckDB if None)."""
    from lokg.spark_jobs import ingest as stage

    inputs = {"dump": str(dump)}
    if previous is not None:
        inputs.update({PREVIOUS + name: str(previous / f"{name}.parquet")
                       for name in (*STORE_TABLES, *(("dump_lines",) if store else ()))})
    config = {**(engine or {"engine": {"name": "duckdb"}}),
              "ingest": {**DEFAULTS["ingest"], "max_malformed_share": 0.2}}
    return stage.run(config, inputs, str(out))


def rows(result: dict, table: str) -> list[tuple]:
    return sorted(tuple(r.values()) for r in pq.read_table(result["outputs"][table]).to_pylist())


def change(result: dict, part: str) -> list[tuple]:
    path = Path(result["outputs"]["change_set"]) / part
    return sorted(tuple(r.values()) for r in pq.read_table(path).to_pylist())


BASE = {"train.txt": ["/m/a\t/r/x\t/m/b", "/m/b\t/r/x\t/m/c", "/m/a\t/r/y\t/m/c",
                      "/m/c\t/r/y\t/m/d", "/m/d\t/r/x\t/m/a", "/m/a\t/r/x\t/m/b",
                      "/m/e\t/r/z\t/m/a", "not a triple", "/m/f\ttype.object.type\t/t/film"],
        "valid.txt": ["/m/b\t/r/y\t/m/d", "/m/a\t/r/y\t/m/c"],
        "test.txt": ["/m/c\t/r/x\t/m/e"],
        "entity2name.txt": ["/m/a\tAlpha", "/m/b\tBeta", "/m/c\tGamma", "/m/e\tEpsilon",
                            "/m/a\tAlpha again", "/m/z\tNot in graph", "/m/d"]}


def edited(base: dict, **files: list[str]) -> dict:
    return {**base, **files}


def write_dump(root: Path, files: dict[str, list[str]]) -> Path:
    root.mkdir(parents=True)
    for name, lines in files.items():
        (root / name).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def base_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("lines")
    dump = write_dump(root / "dump", BASE)
    return dump, ingest(dump, root / "out")


EDITS = {
    "add only": edited(BASE, **{"train.txt": [*BASE["train.txt"], "/m/b\t/r/z\t/m/e"],
                                "test.txt": [*BASE["test.txt"], "/m/d\t/r/y\t/m/b"]}),
    "delete only": edited(BASE, **{"valid.txt": BASE["valid.txt"][:1],
                                   "test.txt": []}),
    # one copy of the duplicated a-x-b line goes (the other stays: the triple stays); the
    # a-y-c of train goes while valid's stays; the malformed line goes and another comes;
    # /m/e loses its every triple (a removed entity), /m/n comes with a name (a new one);
    # an entity gets a name before the one it had, and the type line moves up
    "mixed": edited(BASE, **{
        "train.txt": ["/m/f\ttype.object.type\t/t/film", "/m/a\t/r/x\t/m/b", "/m/b\t/r/x\t/m/c",
                      "/m/c\t/r/y\t/m/d", "/m/d\t/r/x\t/m/a", "/m/n\t/r/w\t/m/a",
                      "/m/a\t/r/x"],
        "test.txt": ["/m/c\t/r/x\t/m/d"],
        "entity2name.txt": ["/m/d\tDelta", "/m/n\tNew", *BASE["entity2name.txt"]]}),
}


NEW_LINES = {"add only": 2, "delete only": 0, "mixed": 5}


def assert_refresh_equals_a_full_parse(first: dict, new_dump: Path, out: Path, edit: str,
                                       engine: dict | None = None) -> None:
    previous = Path(first["outputs"]["entities"]).parent
    refreshed = ingest(new_dump, out / "refresh", previous, engine)
    full = ingest(new_dump, out / "full", previous, engine, store=False)
    assert refreshed["report"]["refresh"]["ingest"] == "partial"
    assert full["report"]["refresh"]["ingest"] == "full"
    # only the lines the previous build did not have are parsed
    assert refreshed["report"]["refresh"]["parsed_lines"] == NEW_LINES[edit]
    for table in (*STORE_TABLES, "dump_lines"):
        assert rows(refreshed, table) == rows(full, table), table
    for part in CHANGE_SET_PARTS:
        assert change(refreshed, part) == change(full, part), part
    counts = ("lines", "skipped_lines", "malformed", "malformed_by_reason", "entities",
              "relations", "triples", "duplicate_triples_removed", "type_assertions",
              "names_missing", "change_set")
    assert ({k: refreshed["report"][k] for k in counts}
            == {k: full["report"][k] for k in counts})


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_refresh_from_the_line_store_equals_one_parsing_every_line(base_build, tmp_path,
                                                                      edit):
    _, first = base_build
    assert_refresh_equals_a_full_parse(first, write_dump(tmp_path / "dump", EDITS[edit]),
                                       tmp_path, edit)


@pytest.mark.spark
def test_a_refresh_from_the_line_store_on_each_engine(engine_config, base_build, tmp_path):
    _, first = base_build
    assert_refresh_equals_a_full_parse(first, write_dump(tmp_path / "dump", EDITS["mixed"]),
                                       tmp_path, "mixed", engine_config)


def test_a_refresh_over_the_malformed_ceiling_fails_after_its_quarantine(
        base_build, tmp_path):
    from lokg.spark_jobs.ingest_checks import IngestError

    _, first = base_build
    bad = [f"broken line {i}" for i in range(5)]  # 7 of 24 lines malformed: above 0.2
    new_dump = write_dump(tmp_path / "dump", edited(BASE, **{"test.txt": [*BASE["test.txt"],
                                                                          *bad]}))
    with pytest.raises(IngestError, match="above the ceiling") as err:
        ingest(new_dump, tmp_path / "out", Path(first["outputs"]["entities"]).parent)
    assert err.value.kept and [r["text"] for r in pq.read_table(err.value.kept[0]).to_pylist()
                               ] == ["not a triple", *bad, "/m/d"]  # by (file, line)


def test_the_line_store_is_kept_for_line_formats_only(tmp_path):
    nt = write_lines(tmp_path / "kg.nt", [b"<a> <b> <c> ."])
    tsv = write_lines(tmp_path / "kb.tsv", [b"a\tr\tb", b"a\tr\tb"])
    assert "dump_lines" not in ingest(nt, tmp_path / "nt")["outputs"]
    result = ingest(tsv, tmp_path / "tsv")
    assert result["report"]["refresh"]["ingest"] == "full"
    assert len(rows(result, "dump_lines")) == 1  # one row per distinct line


def test_a_truncated_gzip_fails_naming_the_file(tmp_path):
    from lokg.spark_jobs.ingest_checks import IngestError

    whole = gzip.compress(b"a\tr\tb\n" * 1000)
    (tmp_path / "dump").mkdir()
    (tmp_path / "dump" / "kb.tsv.gz").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(IngestError, match="cannot read .*kb.tsv.gz"):
        ingest(tmp_path / "dump", tmp_path / "out")

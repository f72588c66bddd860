"""A refresh's ingest on the driver (spark_jobs/ingest_lines.py): the Python line rules equal
the Spark ones on every fixture line, and a refresh's tables equal a full Spark ingest of the
same dump, row for row, whatever the edit."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lokg.common.stage import PREVIOUS
from lokg.pipeline.config import DEFAULTS
from lokg.spark_jobs import formats as fm
from lokg.spark_jobs import ingest_lines as il
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


@pytest.mark.spark
@pytest.mark.parametrize("parser", fm.LINE_PARSERS)
def test_python_line_rules_equal_the_spark_parse(spark, tmp_path, parser):
    from lokg.spark_jobs.formats_spark import parse_plan
    from lokg.spark_jobs.ingest_checks import number_lines

    files = (write_lines(tmp_path / "lf.txt", TRICKY),
             write_lines(tmp_path / "crlf.txt", TRICKY[::-1], b"\r\n"),
             write_lines(tmp_path / "cr.txt", TRICKY[:9], b"\r"))
    gz = tmp_path / "gz.txt.gz"
    gz.write_bytes(gzip.compress(b"\n".join(TRICKY) + b"\n"))
    plan = fm.Plan("test", [fm.Source(parser, (*files, gz), True)])
    numbered, _ = number_lines(spark, parse_plan(spark, plan, ["en"]), plan)
    columns = ["file_idx", "line", "kind", "s", "p", "o", "reason", "text"]
    by_spark = sorted(tuple(r) for r in numbered.select(*columns).collect())
    ours = il.ParsedLines(plan, il.STORE_SCHEMA.empty_table()).rows.select(columns)
    by_python = sorted(tuple(r.values()) for r in ours.to_pylist())
    assert len(by_spark) == len(by_python) == 3 * len(TRICKY) + 9
    # s, p, o of a malformed line feed nothing (its bytes may not even be text)
    assert [_used(r) for r in by_python] == [_used(r) for r in by_spark]


def _used(row: tuple) -> tuple:
    return row if row[2] != fm.MALFORMED else (*row[:3], row[6], row[7])


def ingest(dump: Path, out: Path, previous: Path | None = None, **cfg) -> dict:
    """One ingest of ``dump`` into ``out``; ``previous``: a refresh of that earlier run."""
    from lokg.spark_jobs import ingest as stage

    inputs = {"dump": str(dump)}
    if previous is not None:
        inputs.update({PREVIOUS + name: str(previous / f"{name}.parquet")
                       for name in (*il.TABLES, "dump_lines")})
    config = {"ingest": {**DEFAULTS["ingest"], "max_malformed_share": 0.2, **cfg}}
    return stage.run(config, inputs, str(out))


def rows(result: dict, table: str) -> list[tuple]:
    return sorted(tuple(r.values()) for r in pq.read_table(result["outputs"][table]).to_pylist())


def change(result: dict, part: str) -> list[tuple]:
    path = Path(result["outputs"]["change_set"]) / part
    return sorted(tuple(r.values()) for r in pq.read_table(path).to_pylist())


def schema(result: dict, table: str):
    return pq.read_schema(min(Path(result["outputs"][table]).glob("*.parquet")))


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
def base_build(spark, tmp_path_factory):
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


@pytest.mark.spark
@pytest.mark.parametrize("edit", list(EDITS))
def test_a_refresh_on_the_driver_equals_a_full_spark_ingest(base_build, tmp_path, edit):
    _, first = base_build
    new_dump = write_dump(tmp_path / "dump", EDITS[edit])
    previous = Path(first["outputs"]["entities"]).parent
    refreshed = ingest(new_dump, tmp_path / "refresh", previous)
    by_spark = ingest(new_dump, tmp_path / "spark", previous, driver_max_dump_mb=0)
    assert refreshed["report"]["refresh"]["ingest"] == "driver"
    assert by_spark["report"]["refresh"]["ingest"] == "spark"
    # only the lines the previous build did not have are parsed
    assert refreshed["report"]["refresh"]["parsed_lines"] == NEW_LINES[edit]
    for table in il.TABLES:
        assert rows(refreshed, table) == rows(by_spark, table), table
        assert schema(refreshed, table).equals(schema(by_spark, table)), table
    for part in CHANGE_SET_PARTS:
        assert change(refreshed, part) == change(by_spark, part), part
    counts = ("lines", "skipped_lines", "malformed", "malformed_by_reason", "entities",
              "relations", "triples", "duplicate_triples_removed", "type_assertions",
              "names_missing", "change_set")
    assert ({k: refreshed["report"][k] for k in counts}
            == {k: by_spark["report"][k] for k in counts})


@pytest.mark.spark
def test_a_refresh_over_the_malformed_ceiling_fails_on_the_driver_after_its_quarantine(
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


def test_the_driver_path_says_why_not(tmp_path):
    from lokg.spark_jobs.ingest import _parsed_lines

    nt = write_lines(tmp_path / "kg.nt", [b"<a> <b> <c> ."])
    tsv = write_lines(tmp_path / "kb.tsv", [b"a\tr\tb"])
    cfg = {**DEFAULTS["ingest"]}
    lines, why = _parsed_lines(fm.resolve(nt), {}, cfg)  # N-Triples: parsed whole, no store
    assert why is None and lines.lines == 1 and lines.store is None
    lines, why = _parsed_lines(fm.resolve(tsv), {}, cfg)  # a full build: Spark, store kept
    assert why.startswith("no previous build") and lines.store.num_rows == 1
    assert _parsed_lines(fm.resolve(tsv), {}, {**cfg, "driver_max_dump_mb": 0})[0] is None


def test_a_truncated_gzip_leaves_the_file_to_the_spark_ingest_and_its_error(tmp_path):
    from lokg.spark_jobs.ingest import _parsed_lines

    whole = gzip.compress(b"a\tr\tb\n" * 1000)
    (tmp_path / "kb.tsv.gz").write_bytes(whole[:len(whole) // 2])
    lines, why = _parsed_lines(fm.resolve(tmp_path, "tsv"), {}, {**DEFAULTS["ingest"]})
    assert lines is None and why.startswith("unreadable on the driver: kb.tsv.gz")

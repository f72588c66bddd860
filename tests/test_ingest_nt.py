"""A full build's N-Triples ingest on the driver (spark_jobs/ingest_nt.py): every table equal,
row for row and schema for schema, to the Spark ingest's; no Spark session asked for; what it
does not parse as Spark does left to Spark, with the reason."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lokg.pipeline.config import DEFAULTS
from lokg.spark_jobs import formats as fm
from lokg.spark_jobs import ingest_lines as il
from lokg.spark_jobs import ingest_nt as nt
from lokg.testing.dumps import NT_LINES, fb

#: Lines beyond the golden file: a byte-order mark, bytes that are not UTF-8 (in a statement
#: and in a comment), a control separator, tabs and comments, an escaped name in a language
#: subtag, a blank name, a type given as a literal, duplicates.
EXTRA = [b"\xef\xbb\xbf" + NT_LINES[16].encode(), fb("m.0x").encode() + b" " +
         fb("a.b").encode() + b" \"caf\xe9\" .", b"# \xff comment",
         f"{fb('m.05')} {fb('a.b.c')} \"ctl \u0001 char\" .".encode(),
         f"  {fb('m.06')}\t{fb('a.b.c')}  {fb('m.07')} . # trailing comment".encode(),
         f'{fb("m.06")} {fb("type.object.name")} "Six \\u00e9"@EN-us .'.encode(),
         f'{fb("m.07")} {fb("type.object.name")} "   "@en .'.encode(),
         f'{fb("m.07")} {fb("type.object.type")} "literal type" .'.encode(),
         f"{fb('m.06')} {fb('a.b.c')} {fb('m.07')} .".encode()]


def ingest(dump: Path, out: Path, **cfg) -> dict:
    from lokg.spark_jobs import ingest as stage

    config = {"ingest": {**DEFAULTS["ingest"], "format": "nt", "max_malformed_share": 0.2,
                         **cfg}}
    return stage.run(config, {"dump": str(dump)}, str(out))


def rows(result: dict, table: str) -> list[tuple]:
    return sorted(tuple(map(repr, r.values()))
                  for r in pq.read_table(result["outputs"][table]).to_pylist())


def schema(result: dict, table: str):
    return pq.read_schema(min(Path(result["outputs"][table]).glob("*.parquet")))


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    """Generator data (malformed lines, names in languages, types) as plain N-Triples, the
    golden lines gzipped, and odd lines with CRLF ends, in one N-Triples directory."""
    from lokg.pipeline.synth import generate

    root = tmp_path_factory.mktemp("nt_driver")
    generate(root / "gen", n_triples=3000, seed=4, n_questions=0, malformed_rate=0.01)
    (root / "dump").mkdir()
    shutil.copy(root / "gen" / "kg.nt", root / "dump" / "a.nt")
    golden = "\n".join(NT_LINES).encode() + b"\n"
    (root / "dump" / "b.nt.gz").write_bytes(gzip.compress(golden))
    (root / "dump" / "c.nt").write_bytes(b"\r\n".join(EXTRA) + b"\r\n" + NT_LINES[12].encode())
    return root / "dump"


@pytest.mark.spark
def test_the_driver_tables_equal_the_spark_ingest(spark, dump, tmp_path, monkeypatch):
    from lokg.spark_jobs import ingest as stage

    by_spark = ingest(dump, tmp_path / "spark", driver_max_nt_mb=0)

    def no_session(*_):
        raise AssertionError("the driver ingest asked for a Spark session")

    monkeypatch.setattr(stage, "get_spark", no_session)
    driver = ingest(dump, tmp_path / "driver")
    assert by_spark["report"]["refresh"]["ingest"] == "spark"
    assert driver["report"]["refresh"] == {"ingest": "driver", "why": None,
                                           "lines": driver["report"]["lines"] + driver[
                                               "report"]["skipped_lines"],
                                           "parsed_lines": driver["report"]["lines"] + driver[
                                               "report"]["skipped_lines"]}
    for table in il.TABLES:
        assert rows(driver, table) == rows(by_spark, table), table
        assert schema(driver, table).equals(schema(by_spark, table)), table
    drop = ("seconds", "step_seconds", "refresh")
    assert ({k: v for k, v in driver["report"].items() if k not in drop}
            == {k: v for k, v in by_spark["report"].items() if k not in drop})
    report = driver["report"]
    assert report["malformed_by_reason"][fm.R_INVALID_UTF8] == 1
    assert report["malformed_by_reason"][fm.R_CONTROL] == 1
    assert report["filtered_literals"] >= 3 and report["type_assertions"] > 0
    assert "dump_lines" not in driver["outputs"]


@pytest.mark.parametrize("block_bytes", [1, 2, 3, 1 << 20])
def test_lines_split_as_spark_reads_them(tmp_path, block_bytes):
    """``\\n``, ``\\r\\n`` and ``\\r`` end lines, a last line may lack one, blank lines stay —
    and blocks cut anywhere (inside a ``\\r\\n`` too) give the same lines."""
    for data in (b"", b"a", b"a\n", b"a\r\nb\rc\n\nd", b"\n\n\r\r\n", b"x\r", b"\r\n",
                 b"ab\r\ncd\r\n\r\nef"):
        path = tmp_path / "f.nt"
        path.write_bytes(data)
        blocks = list(nt.file_blocks(path, block_bytes))
        assert [line for block in blocks for line in block.to_pylist()] == data.splitlines(), data


def test_blocks_parse_as_one(dump, monkeypatch, tmp_path):
    """Lines parsed in small blocks give the rows (in (file, line) order: within a block the
    common shape comes first), malformed lines (numbered within their file) and counts of a
    parse in one block."""
    plan, languages = fm.resolve(dump), ["en", ""]
    whole = nt.ParsedDump(plan, languages)
    monkeypatch.setattr(nt, "BLOCK_BYTES", 4096)
    blocks = nt.ParsedDump(plan, languages)
    in_order = [("file_idx", "ascending"), ("line", "ascending")]
    assert blocks.rows.sort_by(in_order).equals(whole.rows.sort_by(in_order))
    assert blocks.malformed.equals(whole.malformed)
    assert blocks.counts == whole.counts and blocks.lines == whole.lines
    assert whole.malformed.num_rows > 10 and len(list(nt.file_blocks(plan.files[0]))) > 10
    (tmp_path / "empty.nt").write_bytes(b"")
    assert nt.ParsedDump(fm.resolve(tmp_path / "empty.nt"), languages).lines == 0


def test_invalid_utf8_lines_are_found_among_many(tmp_path):
    lines = [b"<a> <b> <c> ."] * 500
    lines[3], lines[257], lines[499] = b"\xff", b"<a> <b> \"\xc3\" .", b"\xef\xbb\xbf\xe2\x82"
    text, invalid = nt.decode(pa_lines(lines))
    assert invalid.nonzero()[0].tolist() == [3, 257, 499]
    assert text[499].as_py() == "\ufffd" and text[0].as_py() == "<a> <b> <c> ."


def pa_lines(lines: list[bytes]):
    import pyarrow as pa

    return pa.array(lines, pa.large_binary())


@pytest.mark.parametrize("line, why", [
    (f'{fb("m.01")} {fb("a.b")} "octal \\101" .', "unescapeJava"),
    (f'{fb("m.01")} {fb("a.b")} "short \\u12" .', "unescapeJava"),
    (f'{fb("m.01")} {fb("a.b")} "pair \\uD83D\\uDE00" .', "unescapeJava"),
    (f"{fb('m.01')} {fb('a.b')} {fb('m.02')} .\u2028", "U+2028"),
])
def test_what_the_driver_would_parse_otherwise_is_left_to_spark(tmp_path, line, why):
    from lokg.spark_jobs.ingest import _parsed_lines

    path = tmp_path / "kg.nt"
    path.write_text(f"{NT_LINES[12]}\n{line}\n", encoding="utf-8")
    lines, reason = _parsed_lines(fm.resolve(path), {}, dict(DEFAULTS["ingest"]))
    assert lines is None and reason.startswith("not parsed on the driver") and why in reason


def test_settings_and_plans_the_driver_does_not_read(tmp_path):
    from lokg.spark_jobs.ingest import _parsed_lines

    path = tmp_path / "kg.nt"
    path.write_text(NT_LINES[12] + "\n", encoding="utf-8")
    (tmp_path / "names.tsv").write_text("m.01\tOne\n", encoding="utf-8")
    cfg = dict(DEFAULTS["ingest"])
    assert _parsed_lines(fm.resolve(path), {}, {**cfg, "literals_as_edges": True}) == (
        None, "ingest.literals_as_edges is read by the Spark ingest only")
    lines, why = _parsed_lines(fm.resolve(path, "nt", tmp_path / "names.tsv"), {}, cfg)
    assert lines is None and why.startswith("parsers entities, nt:")
    lines, why = _parsed_lines(fm.resolve(path), {}, {**cfg, "driver_max_nt_mb": 0})
    assert lines is None and why.endswith("above ingest.driver_max_nt_mb")
    assert _parsed_lines(fm.resolve(path), {}, {**cfg, "driver_max_dump_mb": 0})[1] is None


def test_the_malformed_ceiling_is_kept_on_the_driver(tmp_path, monkeypatch):
    """More malformed lines than the ceiling fail the stage after the quarantine is written,
    in (file, line) order — with no Spark session."""
    from lokg.spark_jobs import ingest as stage

    monkeypatch.setattr(stage, "get_spark", lambda *_: pytest.fail("a Spark session"))
    path = tmp_path / "kg.nt"
    path.write_text("\n".join([NT_LINES[12], "broken", "", "also broken"]) + "\n",
                    encoding="utf-8")
    with pytest.raises(stage.IngestError, match="above the ceiling") as err:
        ingest(path, tmp_path / "out")
    kept = pq.read_table(err.value.kept[0]).to_pylist()
    assert [(r["line"], r["reason"], r["text"]) for r in kept] == [
        (2, fm.R_GARBAGE, "broken"), (4, fm.R_GARBAGE, "also broken")]

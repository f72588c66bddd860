"""Stage ingest: golden inputs per format, N-Triples edge cases, quarantine, schemas, determinism.

Every golden dump is written by the test into a temporary directory; each Spark ingest runs
once per module (fixtures) and several tests assert on its result.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pytest

from lokg.pipeline.config import DEFAULTS
from lokg.runtime.contract import TABLE_SCHEMAS, read_table
from lokg.testing.builds import spark_submit
from lokg.testing.dumps import BOB, FB, FOAF_KNOWS, NT_LINES, NT_MALFORMED, fb


# --------------------------------------------------------------------------------------------
# helpers


def ingest(dump, out: Path, engine: dict | None = None, **ingest_cfg) -> dict:
    """The stage on ``dump`` (``engine``: a config with the engine resolved; DuckDB if None)."""
    from lokg.spark_jobs import ingest as stage

    config = {**(engine or {"engine": {"name": "duckdb"}}),
              "ingest": {**DEFAULTS["ingest"], **ingest_cfg}}
    return stage.run(config, {"dump": str(dump)}, str(out))


class Result:
    """The tables of one ingest run, read back through the contract (schemas checked)."""

    def __init__(self, result: dict):
        self.outputs = {k: Path(v) for k, v in result["outputs"].items()}
        self.report = result["report"]
        self.tables = {t: read_table(self.outputs[t], t)
                       for t in ("entities", "relations", "triples", "quarantine")}
        self.type_assertions = read_table(self.outputs["type_assertions"])

    def rows(self, table: str) -> list[dict]:
        return self.tables[table].to_pylist()

    @property
    def entities(self) -> dict[str, dict]:
        return {e["key"]: e for e in self.rows("entities")}

    @property
    def names(self) -> dict[str, str]:
        return {k: e["name"] for k, e in self.entities.items()}

    @property
    def key_of(self) -> dict[int, str]:
        return {e["id"]: e["key"] for e in self.rows("entities")}

    @property
    def relation_of(self) -> dict[int, str]:
        return {r["id"]: r["name"] for r in self.rows("relations")}

    @property
    def triples(self) -> set[tuple[str, str, str]]:
        k, r = self.key_of, self.relation_of
        return {(k[t["s"]], r[t["r"]], k[t["o"]]) for t in self.rows("triples")}

    @property
    def types(self) -> set[tuple[str, str]]:
        k = self.key_of
        return {(k[row["id"]], row["type"]) for row in self.type_assertions.to_pylist()}

    @property
    def quarantine(self) -> list[tuple[str, int, str]]:
        return [(Path(q["file"]).name, q["line"], q["reason"]) for q in self.rows("quarantine")]


def assert_dense_ids(res: Result) -> None:
    """Ids are 0..N-1 in key order (entities) and name order (relations); triples unique."""
    ents = res.rows("entities")
    assert [e["id"] for e in ents] == list(range(len(ents)))  # written in id order
    assert [e["key"] for e in ents] == sorted(e["key"] for e in ents)
    rels = sorted(res.rows("relations"), key=lambda r: r["id"])
    assert [r["id"] for r in rels] == list(range(len(rels)))
    assert [r["name"] for r in rels] == sorted(r["name"] for r in rels)
    trip = [(t["s"], t["r"], t["o"]) for t in res.rows("triples")]
    assert len(trip) == len(set(trip))
    assert res.report["entities"] == len(ents)
    assert res.report["relations"] == len(rels)
    assert res.report["triples"] == len(trip)


# --------------------------------------------------------------------------------------------
# N-Triples golden file


@pytest.fixture(scope="module")
def nt_dump(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("nt") / "dump.nt"
    path.write_text("\n".join(NT_LINES) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module", params=("duckdb", "spark"))
def nt_result(request, nt_dump, tmp_path_factory) -> Result:
    """The golden N-Triples dump ingested by each engine in turn."""
    if request.param == "spark":
        request.getfixturevalue("spark")
    return Result(ingest(nt_dump, tmp_path_factory.mktemp("nt_out"),
                         {"engine": {"name": request.param}}, max_malformed_share=0.5))


@pytest.mark.spark
def test_nt_entities_and_names(nt_result):
    ents = nt_result.entities
    # subjects/objects of edges, subjects of literal facts; never the type objects
    assert set(ents) == {"m.01", "m.02", "m.03", "m.04", BOB, "_:b1"}
    assert nt_result.names == {
        "m.01": 'Alice "Al" Smith',  # first English name by line, quotes unescaped
        "m.02": "m.02",  # no name: key
        "m.03": "m.03",  # French name only: filtered, key
        "m.04": "Tabbed",
        BOB: "Bob",  # rdfs:label
        "_:b1": "_:b1",
    }
    alice = ents["m.01"]
    assert alice["aliases"] == ["Ally", "Al\u00e9 \U0001F600"]  # de-duplicated, first-seen order
    assert alice["description"] == "Line one\nline two\\"
    assert alice["attributes"] == [  # literal facts other than names: attributes, de-duplicated
        {"key": "people.person.date_of_birth", "value": "1961-08-04"},
        {"key": "people.person.height_meters", "value": "1.70"},
    ]
    assert all(e["types"] == [] for e in ents.values())
    assert ents["m.02"]["aliases"] == [] and ents["m.02"]["attributes"] == []
    assert ents["m.02"]["description"] is None
    assert nt_result.report["names_missing"] == 3


@pytest.mark.spark
def test_nt_relations_triples_and_types(nt_result):
    assert nt_result.triples == {
        ("m.01", "people.person.place_of_birth", "m.02"),
        ("m.01", FOAF_KNOWS, BOB),
        (BOB, "http://example.org/owns", "_:b1"),
    }
    assert set(nt_result.relation_of.values()) == {
        "people.person.place_of_birth", FOAF_KNOWS, "http://example.org/owns"}
    # type assertions are not edges
    assert nt_result.types == {("m.01", "people.person"), (BOB, "http://example.org/Person")}
    report = nt_result.report
    assert report["format"] == "nt"
    assert report["duplicate_triples_removed"] == 1
    assert report["type_assertions"] == 2
    assert report["filtered_literals"] == 3  # lines 3, 8, 20
    assert report["lines"] == len(NT_LINES) - 3  # minus the blank line and 2 comments
    assert report["skipped_lines"] == 3
    assert_dense_ids(nt_result)


@pytest.mark.spark
def test_nt_quarantine_lines_and_reasons(nt_result, nt_dump):
    rows = nt_result.rows("quarantine")
    assert [r["line"] for r in rows] == sorted(NT_MALFORMED)
    for row in rows:
        assert row["file"] == str(nt_dump.resolve())
        assert NT_MALFORMED[row["line"]] in row["reason"], row
        assert row["text"] == NT_LINES[row["line"] - 1]
    assert nt_result.report["malformed"] == len(NT_MALFORMED)
    assert nt_result.report["malformed_share"] == pytest.approx(len(NT_MALFORMED) / 29, abs=1e-6)
    assert sum(nt_result.report["malformed_by_reason"].values()) == len(NT_MALFORMED)


@pytest.mark.spark
def test_nt_schemas_match_contract(nt_result):
    for table in ("entities", "relations", "triples", "quarantine"):
        got = nt_result.tables[table].schema
        assert got.names == TABLE_SCHEMAS[table].names
        for field in TABLE_SCHEMAS[table]:
            assert got.field(field.name).type.equals(field.type), (table, field.name)
    ta = nt_result.type_assertions.schema
    assert ta.names == ["id", "type"]
    assert ta.field("id").type == pa.int64() and ta.field("type").type == pa.string()


@pytest.mark.spark
def test_nt_languages_config_and_literals_as_edges(engine_config, nt_dump, tmp_path):
    """Untagged and French literals kept when configured; literal facts as edges on request."""
    res = Result(ingest(nt_dump, tmp_path / "out", engine_config, max_malformed_share=0.5,
                        languages=["fr", ""], literals_as_edges=True))
    names = res.names
    assert names["m.01"] == "Alice FR" and names["m.03"] == "Trois"
    assert names[BOB] == BOB  # its only label is English
    assert res.entities["m.01"]["aliases"] == []  # English aliases and the German one dropped
    # English names (lines 2, 4, 17, 32), aliases (5-7), the German alias (8), description (9)
    assert res.report["filtered_literals"] == 9
    # attributes became edges to literal nodes named by their text
    assert ("m.01", "people.person.date_of_birth", '"1961-08-04"') in res.triples
    assert ("m.01", "people.person.height_meters", '"1.70"') in res.triples
    assert names['"1961-08-04"'] == "1961-08-04"
    assert res.entities["m.01"]["attributes"] == []
    assert res.report["triples"] == 5 and res.report["duplicate_triples_removed"] == 2
    assert_dense_ids(res)


# --------------------------------------------------------------------------------------------
# a directory of two files (plain + gzip): names by (file, line), exact lines per file


@pytest.mark.spark
def test_nt_directory_with_gzip_quarantine_per_file(engine_config, tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    part1 = [
        f'{fb("m.0b")} {fb("type.object.name")} "Bee one"@en .',  # 1
        "garbage line",  # 2
        f"{fb('m.0a')} {fb('film.film.directed_by')} {fb('m.0b')} .",  # 3
    ]
    part2 = [
        f'{fb("m.0a")} {fb("type.object.name")} "Ay"@en .',  # 1
        f'{fb("m.0b")} {fb("type.object.name")} "Bee two"@en .',  # 2: file 1 came first
        "",  # 3
        f"{fb('m.0a')} {fb('film.film.directed_by')}",  # 4 two terms
        f"{fb('m.0c')} {fb('film.film.directed_by')} {fb('m.0b')} .",  # 5
        f"{fb('m.0c')} {fb('film.film.directed_by')} <{FB}m.0",  # 6 truncated IRI
    ]
    (dump / "a.nt").write_text("\n".join(part1) + "\n")
    with gzip.open(dump / "b.nt.gz", "wt") as fh:
        fh.write("\n".join(part2) + "\n")
    (dump / "README.txt").write_text("not read\n")
    res = Result(ingest(dump, tmp_path / "out", engine_config, max_malformed_share=0.5))
    assert res.report["format"] == "nt"
    assert [Path(f).name for f in res.report["files"]] == ["a.nt", "b.nt.gz"]
    assert res.quarantine == [
        ("a.nt", 2, "not an N-Triples statement"),
        ("b.nt.gz", 4, "only 2 terms (expected subject predicate object .)"),
        ("b.nt.gz", 6, "unterminated IRI (missing '>')"),
    ]
    assert res.names == {"m.0a": "Ay", "m.0b": "Bee one", "m.0c": "m.0c"}
    assert res.triples == {("m.0a", "film.film.directed_by", "m.0b"),
                           ("m.0c", "film.film.directed_by", "m.0b")}
    assert res.report["lines"] == 8 and res.report["malformed"] == 3


# --------------------------------------------------------------------------------------------
# synthetic generator directory (+ an entities file)


@pytest.mark.spark
def test_synth_directory_matches_manifest(engine_config, tmp_path):
    synth = pytest.importorskip("lokg.pipeline.synth")
    dump = tmp_path / "synth"
    manifest = synth.generate(dump, n_triples=400, seed=3, malformed_rate=0.02, gzip=True,
                              n_questions=5)
    counts = manifest["counts"]
    assert counts["malformed_lines"] > 0
    res = Result(ingest(dump, tmp_path / "out", engine_config, max_malformed_share=0.05))
    report = res.report
    assert report["format"] == "synth"
    assert [Path(f).name for f in report["files"]] == ["kg.nt.gz"]  # kg.tsv is not read
    assert report["triples"] == counts["triples"]
    assert report["entities"] == counts["entities"]
    assert report["relations"] == counts["relations"]
    assert report["type_assertions"] == counts["type_assertions"]
    assert report["malformed"] == counts["malformed_lines"]
    assert report["names_missing"] == 0
    with gzip.open(dump / "kg.nt.gz", "rt") as fh:
        lines = fh.read().split("\n")
    for row in res.rows("quarantine"):
        assert row["text"] == lines[row["line"] - 1]
        assert row["reason"] != "not an N-Triples statement" or "garbage" in row["text"]
    edges = {tuple(line.split("\t")) for line in (dump / "kg.tsv").read_text().splitlines()}
    assert res.triples == edges


@pytest.mark.spark
def test_entities_file_jsonl_and_tsv(engine_config, tmp_path):
    dump = tmp_path / "kg.nt"
    dump.write_text("\n".join([
        f'{fb("m.01")} {fb("type.object.name")} "From dump"@en .',
        f"{fb('m.01')} {fb('r.s.t')} {fb('m.02')} .",
        f"{fb('m.02')} {fb('r.s.t')} {fb('m.03')} .",
        f'{fb("m.01")} {fb("common.topic.alias")} "Dump alias"@en .',
    ]) + "\n")
    efile = tmp_path / "names.jsonl"
    efile.write_text("\n".join([
        json.dumps({"key": "m.01", "name": "From file", "aliases": ["File alias", "Dump alias"]}),
        json.dumps({"key": "m.02", "name": "Two", "aliases": ["Deux"], "description": "second"}),
        "m.03\tThree",
        json.dumps({"key": "m.99", "name": "Not in the graph"}),
        '{"key": "m.02", "name": broken json',
        "",
    ]) + "\n")
    res = Result(ingest(dump, tmp_path / "out", engine_config, entities_file=str(efile),
                        max_malformed_share=0.5))
    ents = res.entities
    assert set(ents) == {"m.01", "m.02", "m.03"}  # the file creates no entities
    assert res.names == {"m.01": "From dump", "m.02": "Two", "m.03": "Three"}
    assert ents["m.01"]["aliases"] == ["Dump alias", "File alias"]
    assert ents["m.02"]["aliases"] == ["Deux"] and ents["m.02"]["description"] == "second"
    assert res.quarantine == [("names.jsonl", 5, "invalid JSON entity record "
                               "(need an object with a non-empty string 'key')")]
    assert res.report["names_missing"] == 0


# --------------------------------------------------------------------------------------------
# tab-separated formats


@pytest.mark.spark
def test_tsv_golden(engine_config, tmp_path):
    dump = tmp_path / "edges.tsv"
    dump.write_text("\n".join([
        "\ufeffa\tlikes\tb",  # 1 (a byte-order mark starts the file)
        "b\tlikes\tc",  # 2
        "a\tlikes\tb",  # 3 duplicate
        "# comment",  # 4
        "c\thates\ta",  # 5
        "only\ttwo",  # 6
        "x\ty\tz\tw",  # 7
        "x\t\tz",  # 8
        "",  # 9
        "c\tlikes\t d ",  # 10 whitespace trimmed
    ]) + "\n", encoding="utf-8")
    res = Result(ingest(dump, tmp_path / "out", engine_config, max_malformed_share=0.5))
    assert res.report["format"] == "tsv"
    assert res.triples == {("a", "likes", "b"), ("b", "likes", "c"), ("c", "hates", "a"),
                           ("c", "likes", "d")}
    assert res.names == {k: k for k in "abcd"}
    assert res.quarantine == [
        ("edges.tsv", 6, "expected 3 tab-separated fields (subject, relation, object), found 2"),
        ("edges.tsv", 7, "expected 3 tab-separated fields (subject, relation, object), found 4"),
        ("edges.tsv", 8, "empty field"),
    ]
    assert res.report["duplicate_triples_removed"] == 1
    assert res.report["lines"] == 8
    assert res.report["names_missing"] == 4
    assert_dense_ids(res)
    assert [e["key"] for e in res.rows("entities")] == ["a", "b", "c", "d"]


def test_a_dump_without_malformed_lines_or_types_writes_both_tables_empty(engine_config,
                                                                         nt_result, tmp_path):
    """With none counted by the parse, the quarantine and the type assertions are written
    without a pass over it: the same tables, empty, with the schemas a dump holding them
    gets (nt_result: malformed lines and type facts)."""
    import pyarrow.parquet as pq

    dump = tmp_path / "edges.tsv"
    dump.write_text("a\tlikes\tb\nb\tlikes\tc\n", encoding="utf-8")
    res = Result(ingest(dump, tmp_path / "out", engine_config))
    assert res.quarantine == [] and res.types == set() and res.report["type_assertions"] == 0
    assert nt_result.quarantine and nt_result.types
    for table in ("quarantine", "type_assertions"):
        schemas = [[(f.name, f.type) for f in pq.ParquetDataset(str(r.outputs[table])).schema]
                   for r in (res, nt_result)]
        assert schemas[0] == schemas[1], table


@pytest.mark.spark
def test_pathquestion_golden(engine_config, tmp_path):
    dump = tmp_path / "pq"
    dump.mkdir()
    (dump / "kb.txt").write_text(
        "john_f_kennedy\tspouse\tjacqueline_kennedy\n"
        "john_f_kennedy\tchildren\tcaroline_kennedy\n"
        "jacqueline_kennedy\tchildren\tcaroline_kennedy\n"
        "john_f_kennedy\tspouse\tjacqueline_kennedy\n"
    )
    (dump / "train.txt").write_text("question\tanswer\tpath\n")  # not part of the KB
    res = Result(ingest(dump, tmp_path / "out", engine_config))
    assert res.report["format"] == "pathquestion"
    assert res.names == {"john_f_kennedy": "john f kennedy",
                         "jacqueline_kennedy": "jacqueline kennedy",
                         "caroline_kennedy": "caroline kennedy"}
    assert res.triples == {("john_f_kennedy", "spouse", "jacqueline_kennedy"),
                           ("john_f_kennedy", "children", "caroline_kennedy"),
                           ("jacqueline_kennedy", "children", "caroline_kennedy")}
    assert res.report["duplicate_triples_removed"] == 1 and res.report["malformed"] == 0


@pytest.mark.spark
def test_metaqa_golden(engine_config, tmp_path):
    dump = tmp_path / "metaqa"
    dump.mkdir()
    (dump / "kb.txt").write_text("\n".join([
        "Kismet|directed_by|William Dieterle",  # 1
        "Kismet|starred_actors|Marlene Dietrich",  # 2
        "Kismet|release_year|1944",  # 3
        "#Horror|has_genre|Horror",  # 4 a title, not a comment
        "Kismet|directed_by|William Dieterle",  # 5 duplicate
        "",  # 6 blank
        "Kismet|has_tags",  # 7 two fields
        "A|b|c|d",  # 8 a name with '|': four fields
        "Kismet||1944",  # 9 empty relation
        " The Mark of Zorro | written_by | Johnston McCulley ",  # 10 trimmed
    ]) + "\n", encoding="utf-8")
    (dump / "qa_test.txt").write_text("what films did [William Dieterle] direct\tKismet\n")
    res = Result(ingest(dump, tmp_path / "out", engine_config, max_malformed_share=0.5))
    assert res.report["format"] == "metaqa"
    assert [Path(f).name for f in res.report["files"]] == ["kb.txt"]  # not the questions
    assert res.triples == {("Kismet", "directed_by", "William Dieterle"),
                           ("Kismet", "starred_actors", "Marlene Dietrich"),
                           ("Kismet", "release_year", "1944"),
                           ("#Horror", "has_genre", "Horror"),
                           ("The Mark of Zorro", "written_by", "Johnston McCulley")}
    assert all(name == key for key, name in res.names.items())  # names are the text as is
    fields = "expected 3 '|'-separated fields (subject, relation, object), found"
    assert res.quarantine == [("kb.txt", 7, f"{fields} 2"), ("kb.txt", 8, f"{fields} 4"),
                              ("kb.txt", 9, "empty field")]
    assert res.report["lines"] == 9 and res.report["skipped_lines"] == 1
    assert res.report["malformed"] == 3 and res.report["malformed_by_reason"] == {
        f"{fields} 2": 1, f"{fields} 4": 1, "empty field": 1}
    assert res.report["duplicate_triples_removed"] == 1
    assert_dense_ids(res)


@pytest.mark.spark
def test_fb15k237_golden(engine_config, tmp_path):
    dump = tmp_path / "fb"
    dump.mkdir()
    (dump / "train.txt").write_text("/m/01\t/people/person/nationality\t/m/02\n"
                                    "/m/03\t/film/film/country\t/m/02\n")
    (dump / "valid.txt").write_text("/m/01\t/people/person/nationality\t/m/02\n")
    (dump / "test.txt").write_text("/m/04\t/tv/tv_program/regular_cast./tv/regular_tv_appearance/"
                                   "actor\t/m/01\n")
    (dump / "entity2name.txt").write_text("/m/01\tJohn Doe\n/m/02\tUnited States\n"
                                          "/m/99\tNot in graph\n/m/04\n/m/03\tA Film\n")
    (dump / "relation2text.txt").write_text("/film/film/country\tfilm country\n")
    res = Result(ingest(dump, tmp_path / "out", engine_config, max_malformed_share=0.2))
    assert res.report["format"] == "fb15k237"
    assert [Path(f).name for f in res.report["files"]] == [
        "train.txt", "valid.txt", "test.txt", "entity2name.txt"]
    assert res.names == {"/m/01": "John Doe", "/m/02": "United States", "/m/03": "A Film",
                         "/m/04": "/m/04"}
    assert res.report["names_missing"] == 1
    assert res.triples == {
        ("/m/01", "/people/person/nationality", "/m/02"),
        ("/m/03", "/film/film/country", "/m/02"),
        ("/m/04", "/tv/tv_program/regular_cast./tv/regular_tv_appearance/actor", "/m/01"),
    }
    assert res.quarantine == [
        ("entity2name.txt", 4, "expected 2 tab-separated fields (key, name), found 1")]
    assert res.report["duplicate_triples_removed"] == 1


# --------------------------------------------------------------------------------------------
# exact line numbers across file splits, determinism of ids


@pytest.fixture(scope="module")
def big_tsv(tmp_path_factory) -> tuple[Path, dict[int, str]]:
    """3000 lines with malformed lines spread through the file; some keys
    beyond ASCII, one past the BMP (UTF-16 would order it before U+FF21; code points after)."""
    path = tmp_path_factory.mktemp("big") / "big.tsv"
    lines, bad = [], {}
    for i in range(1, 3001):
        if i % 97 == 0:
            lines.append(f"broken line {i}")
            bad[i] = lines[-1]
        elif i % 101 == 0:
            lines.append(f"\uff21{i % 7}\tr{i % 13}\t\U0001f600{i % 5}\u00e9")
        else:
            lines.append(f"e{(i * 7919) % 1000}\tr{i % 13}\te{(i * 104729) % 1000}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, bad


@pytest.mark.spark
def test_line_numbers_exact_and_ids_deterministic(engine_config, big_tsv, tmp_path):
    path, bad = big_tsv
    runs = [Result(ingest(path, tmp_path / name, engine_config, max_malformed_share=0.05))
            for name in ("one", "two")]
    for res in runs:
        assert_dense_ids(res)
        assert [(q["line"], q["text"]) for q in res.rows("quarantine")] == sorted(bad.items())
        assert res.report["lines"] == 3000 and res.report["malformed"] == len(bad)
    first, second = runs
    assert first.rows("entities") == second.rows("entities")
    assert first.rows("relations") == second.rows("relations")
    assert first.rows("triples") == second.rows("triples")
    expected = {tuple(line.split("\t")) for i, line in enumerate(
        path.read_text(encoding="utf-8").splitlines(), 1) if i not in bad}
    assert first.triples == expected


# --------------------------------------------------------------------------------------------
# the malformed-share ceiling


@pytest.mark.spark
def test_ceiling_fails_after_writing_quarantine(engine_config, tmp_path):
    from lokg.spark_jobs.ingest_checks import IngestError

    dump = tmp_path / "bad.tsv"
    dump.write_text("a\tr\tb\nnot a triple\nb\tr\tc\n")
    out = tmp_path / "out"
    with pytest.raises(IngestError) as err:
        ingest(dump, out, engine_config)  # default ceiling 1%
    message = str(err.value)
    assert "1 of 3 lines are malformed" in message
    assert "33.3333%" in message and "1.0000%" in message
    assert "ingest.max_malformed_share" in message
    assert str(out / "quarantine.parquet") in message
    rows = read_table(out / "quarantine.parquet", "quarantine").to_pylist()
    assert [(r["line"], r["text"]) for r in rows] == [(2, "not a triple")]
    assert not (out / "triples.parquet").exists()


# --------------------------------------------------------------------------------------------
# format detection (no Spark)


def test_detect_format(tmp_path):
    from lokg.spark_jobs.formats import FormatError, detect_format, resolve

    def make(name: str, files: list[str]) -> Path:
        root = tmp_path / name
        root.mkdir()
        for f in files:
            (root / f).write_text("x\n")
        return root

    assert detect_format(make("fb", ["train.txt", "entity2name.txt"])) == "fb15k237"
    assert detect_format(make("pq", ["kb.txt", "train.txt"])) == "pathquestion"
    assert detect_format(make("pq2", ["kb.txt"]) / "kb.txt") == "pathquestion"
    assert detect_format(make("mq", ["kb.txt", "qa_train.txt"])) == "metaqa"
    assert detect_format(tmp_path / "mq" / "kb.txt") == "metaqa"
    (make("mq2", ["kb.txt"]) / "2-hop").mkdir()
    assert detect_format(tmp_path / "mq2") == "metaqa"
    assert detect_format(make("syn", ["kg.nt.gz", "kg.tsv", "manifest.json"])) == "synth"
    assert detect_format(make("nts", ["a.nt", "b.nt.gz"])) == "nt"
    assert detect_format(make("one", ["x.nt.gz"]) / "x.nt.gz") == "nt"
    assert detect_format(make("tsv", ["edges.tsv"])) == "tsv"
    assert detect_format(tmp_path / "tsv" / "edges.tsv") == "tsv"
    plan = resolve(tmp_path / "syn")
    assert [f.name for f in plan.files] == ["kg.nt.gz"]
    with pytest.raises(FormatError, match="not found"):
        resolve(tmp_path / "missing")
    with pytest.raises(FormatError, match="unknown"):
        resolve(tmp_path / "tsv", "csv")
    with pytest.raises(FormatError, match="kg.nt"):
        resolve(tmp_path / "tsv", "synth")
    with pytest.raises(FormatError, match="MetaQA dump needs kb.txt"):
        resolve(tmp_path / "tsv", "metaqa")
    assert [(s.parser, s.files[0].name) for s in resolve(tmp_path / "mq2").sources] == [
        ("triples_psv", "kb.txt")]


def test_unescape_nt():
    from lokg.spark_jobs.formats import unescape_nt

    assert unescape_nt(r'a\"b\\c\u00e9\U0001F600\n\t') == 'a"b\\c\u00e9\U0001F600\n\t'
    assert unescape_nt(r"\\U0001F600") == "\\U0001F600"  # an escaped backslash, then text
    assert unescape_nt(r"\u12") == r"\u12"  # incomplete escape kept
    assert unescape_nt(None) is None


# --------------------------------------------------------------------------------------------
# real data (../shared/data)


def _distinct_tsv(paths: list[Path]) -> tuple[set, set, set]:
    triples = set()
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                s, r, o = line.split("\t")
                triples.add((s, r, o))
    return (triples, {t[1] for t in triples}, {t[0] for t in triples} | {t[2] for t in triples})


@pytest.mark.spark
@pytest.mark.shared_data
def test_real_pathquestion_pq3h(shared_data, tmp_path):
    kb = shared_data / "pathquestion" / "pq-3h" / "kb.txt"
    if not kb.is_file():
        pytest.skip(f"{kb} missing")
    triples, relations, entities = _distinct_tsv([kb])
    res = Result(ingest(kb, tmp_path / "out"))  # DuckDB
    assert res.report["format"] == "pathquestion"
    assert res.report["triples"] == len(triples)
    assert res.report["relations"] == len(relations)
    assert res.report["entities"] == len(entities)
    assert res.report["malformed"] == 0
    assert res.triples == triples


@pytest.mark.spark
@pytest.mark.shared_data
def test_real_fb15k237(shared_data, tmp_path):
    root = shared_data / "fb15k237"
    if not (root / "train.txt").is_file():
        pytest.skip(f"{root} missing")
    splits = [root / f"{n}.txt" for n in ("train", "valid", "test")]
    triples, relations, entities = _distinct_tsv(splits)
    names = {}
    for line in (root / "entity2name.txt").read_text(encoding="utf-8").splitlines():
        mid, name = line.split("\t", 1)
        names.setdefault(mid, name.strip())
    res = Result(ingest(root, tmp_path / "out"))  # DuckDB
    report = res.report
    assert report["format"] == "fb15k237"
    assert report["triples"] == len(triples)
    assert report["relations"] == len(relations) == 237
    assert report["entities"] == len(entities) == 14541
    assert report["malformed"] == 0
    assert report["names_missing"] == len(entities - set(names))
    assert report["duplicate_triples_removed"] == 272115 + 17535 + 20466 - len(triples)
    got = res.names
    assert all(got[e] == names.get(e, e) for e in entities)
    assert res.triples == triples


# --------------------------------------------------------------------------------------------
# spark-submit (a separate JVM: slow)


@pytest.mark.slow
@pytest.mark.spark
def test_spark_submit_ingest(tmp_path):
    dump = tmp_path / "edges.tsv"
    dump.write_text("a\tr\tb\nb\tr\tc\nbroken\n")
    record = spark_submit("ingest", tmp_path / "store", "b1", dump,
                          "--set", "ingest.max_malformed_share=0.5")
    assert record["report"]["triples"] == 2 and record["report"]["malformed"] == 1
    res = Result(record)
    assert res.triples == {("a", "r", "b"), ("b", "r", "c")}

"""Stage types: each rule on a toy graph with hand-computed types (on both engines: DuckDB and
Spark SQL, the one SQL text), and the ingest → types chain."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lokg.runtime.contract import TABLE_SCHEMAS, read_table, write_table

TA_SCHEMA = pa.schema([("id", pa.int64()), ("type", pa.string())])


def write_inputs(root: Path, n_entities: int, relations: list[str],
                 triples: list[tuple[int, int, int]],
                 assertions: list[tuple[int, str]] = ()) -> dict[str, str]:
    """Ingest-shaped inputs written with pyarrow (one file each, as the contract allows)."""
    root.mkdir(parents=True, exist_ok=True)
    tables = {
        "entities": pa.table({
            "id": pa.array(range(n_entities), pa.int64()),
            "key": [f"e{i}" for i in range(n_entities)],
            "name": [f"Entity {i}" for i in range(n_entities)],
            "aliases": [[f"alias {i}"] for i in range(n_entities)],
            "description": [None] * n_entities,
            "types": [[] for _ in range(n_entities)],
            "attributes": [[{"key": "k", "value": str(i)}] for i in range(n_entities)],
        }),
        "relations": pa.table({"id": pa.array(range(len(relations)), pa.int64()),
                               "name": relations}),
        "triples": pa.table({c: pa.array([t[i] for t in triples], pa.int64())
                             for i, c in enumerate("sro")}),
    }
    paths = {}
    for name, table in tables.items():
        paths[name] = str(root / f"{name}.parquet")
        write_table(name, table, Path(paths[name]))
    paths["type_assertions"] = str(root / "type_assertions.parquet")
    pq.write_table(pa.table({"id": pa.array([a[0] for a in assertions], pa.int64()),
                                     "type": pa.array([a[1] for a in assertions], pa.string())},
                                    schema=TA_SCHEMA), paths["type_assertions"])
    return paths


def run_types(inputs: dict, out: Path, config: dict | None = None
              ) -> tuple[dict[int, list[str]], dict, list[dict]]:
    from lokg.spark_jobs import entity_types as stage

    config = config or {"engine": {"name": "duckdb"}}
    result = stage.run(config, inputs, str(out))
    assert result["report"]["engine"] == config["engine"]["name"]
    path = Path(result["outputs"]["entities"])
    table = read_table(path, "entities")  # contract schema
    assert table.schema.names == TABLE_SCHEMAS["entities"].names
    assert not pq.ParquetDataset(path).schema.field("types").nullable  # [] for untyped
    rows = table.to_pylist()
    return {r["id"]: r["types"] for r in rows}, result["report"], rows


def test_explicit_rule_with_fallbacks(engine_config, tmp_path):
    relations = ["/people/person/nationality", "knows", "film.film.directed_by"]
    triples = [(0, 0, 4), (2, 0, 4), (2, 2, 4), (3, 1, 4)]
    assertions = [(0, "b.type"), (0, "a.type"), (0, "a.type"), (1, "x.y")]
    types, report, rows = run_types(
        write_inputs(tmp_path / "in", 6, relations, triples, assertions), tmp_path / "out",
        engine_config)
    assert types == {
        0: ["a.type", "b.type"],  # explicit wins over its outgoing edge; sorted, distinct
        1: ["x.y"],
        2: ["film.film", "people.person"],  # fallback: domains of its outgoing relations
        3: ["knows"],  # fallback: most frequent outgoing relation (not Freebase-style)
        4: ["~/people/person/nationality"],  # no outgoing edge: most frequent incoming (2 of 4)
        5: [],  # isolated, no assertion
    }
    assert report["rule"] == "explicit"
    assert report["typed_by"] == {"explicit": 2, "domain": 1, "frequent_relation": 1,
                                  "incoming_relation": 1}
    assert report["fallbacks"] == {"domain": 1, "frequent_relation": 1, "incoming_relation": 1}
    assert report["typed_entities"] == 5 and report["untyped_entities"] == 1
    assert report["distinct_types"] == 7
    # everything but types is carried over unchanged, rows in id order
    assert [r["id"] for r in rows] == list(range(6))
    assert rows[3]["name"] == "Entity 3" and rows[3]["aliases"] == ["alias 3"]
    assert rows[3]["attributes"] == [{"key": "k", "value": "3"}]


def test_domain_rule(engine_config, tmp_path):
    relations = ["/people/person/place_of_birth",
                 "/tv/tv_program/regular_cast./tv/regular_tv_appearance/actor",
                 "film.film.directed_by", "knows"]
    triples = [(0, 0, 2), (0, 1, 3), (0, 2, 3), (1, 3, 2), (1, 3, 3)]
    types, report, _ = run_types(write_inputs(tmp_path / "in", 5, relations, triples),
                                 tmp_path / "out", engine_config)
    assert report["rule"] == "domain"  # 3 of 4 relation names are Freebase-style
    assert types == {
        0: ["film.film", "people.person", "tv.tv_program"],  # CVT name: first two segments
        1: ["knows"],  # only a non-Freebase relation out: frequent_relation fallback
        2: ["~/people/person/place_of_birth"],  # incoming tie (1 each): smallest name
        3: ["~/tv/tv_program/regular_cast./tv/regular_tv_appearance/actor"],
        4: [],
    }
    assert report["typed_by"] == {"explicit": 0, "domain": 1, "frequent_relation": 1,
                                  "incoming_relation": 2}
    assert report["untyped_entities"] == 1 and report["freebase_style_relations"] == 3


def test_frequent_relation_rule(engine_config, tmp_path):
    relations = ["/x/y/z", "a", "b", "c", "p.q.r"]  # 2 of 5 Freebase-style: not most
    triples = [
        (0, 1, 1), (0, 1, 2), (0, 2, 3), (0, 0, 1),  # e0: a×2, b, /x/y/z → a
        (1, 1, 3), (1, 2, 3),  # e1: a, b tie → a
        (2, 3, 0), (2, 3, 1), (2, 2, 0), (2, 2, 1),  # e2: c×2, b×2 tie → b
    ]
    types, report, _ = run_types(write_inputs(tmp_path / "in", 5, relations, triples),
                                 tmp_path / "out", engine_config)
    assert report["rule"] == "frequent_relation"
    assert types == {0: ["a"], 1: ["a"], 2: ["b"],
                     3: ["~b"],  # incoming b×2 (from e0, e1), a×1
                     4: []}
    assert report["typed_by"] == {"explicit": 0, "domain": 0, "frequent_relation": 3,
                                  "incoming_relation": 1}
    assert report["fallbacks"] == {"explicit": 0, "domain": 0, "incoming_relation": 1}


def test_relation_domain():
    from lokg.spark_jobs.entity_types import relation_domain

    assert relation_domain("/people/person/place_of_birth") == "people.person"
    assert relation_domain("people.person.place_of_birth") == "people.person"
    assert relation_domain(
        "/tv/tv_program/regular_cast./tv/regular_tv_appearance/actor") == "tv.tv_program"
    assert relation_domain("base.schemastaging.person_extra.net_worth") == "base.schemastaging"
    for name in ("children", "place_of_birth", "/people/person", "a.b",
                 "http://xmlns.com/foaf/0.1/knows", "~x"):
        assert relation_domain(name) is None, name


@pytest.mark.spark
def test_ingest_then_types_explicit_from_nt(spark, tmp_path):
    """The stages chain: ingest's outputs are the entity_types stage's inputs (rdf:type assertions)."""
    from lokg.spark_jobs import ingest

    fb = "http://rdf.freebase.com/ns/"
    dump = tmp_path / "kg.nt"
    dump.write_text("\n".join([
        f"<{fb}m.1> <{fb}type.object.type> <{fb}people.person> .",
        f"<{fb}m.1> <{fb}type.object.type> <{fb}film.actor> .",
        f"<{fb}m.1> <{fb}people.person.nationality> <{fb}m.2> .",
        f"<{fb}m.3> <{fb}film.film.starring> <{fb}m.1> .",
    ]) + "\n")
    staged = ingest.run({"ingest": {}, "engine": {"name": "duckdb"}}, {"dump": str(dump)},
                        str(tmp_path / "ingest"))
    types, report, rows = run_types(staged["outputs"], tmp_path / "types")
    key = {r["id"]: r["key"] for r in rows}
    assert {key[i]: t for i, t in types.items()} == {
        "m.1": ["film.actor", "people.person"],
        "m.2": ["~people.person.nationality"],  # no assertion, no outgoing edge
        "m.3": ["film.film"],  # no assertion: domain of film.film.starring
    }
    assert report["rule"] == "explicit"
    assert report["type_assertions"] == 2


@pytest.mark.slow
@pytest.mark.spark
def test_spark_submit_types(spark, tmp_path):
    """Stage entity_types (spark_jobs/entity_types.py) runs under spark-submit."""
    from lokg.pipeline.config import load_config
    from lokg.runtime.contract import Store
    from lokg.pipeline.driver import run_stage
    from lokg.testing.builds import spark_submit

    dump = tmp_path / "edges.tsv"
    dump.write_text("a\tknows\tb\nb\tknows\tc\na\tlikes\tc\n")
    store = tmp_path / "store"
    run_stage(Store(store), "b1", "ingest", load_config(), str(dump))  # in-process
    record = spark_submit("entity_types", store, "b1", dump)
    assert record["report"]["rule"] == "frequent_relation"
    rows = read_table(Path(record["outputs"]["entities"]), "entities").to_pylist()
    assert {r["key"]: r["types"] for r in rows} == {"a": ["knows"], "b": ["knows"],
                                                   "c": ["~knows"]}

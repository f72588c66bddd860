"""The stages that refresh partially (DESIGN §9), each against a full run on the same final
input: ingest (the change set against the previous build's ingest; ids equal to a full ingest)
and entity_encode (previous vectors reused; the same vectors and ids as a full encode). A small
synthetic dump, edited as a new version would be (pipeline/dump_edit.py edit_synth_dump); expected
changes are computed here with Arrow."""

from __future__ import annotations

from pathlib import Path

import pytest

from lokg.common.stage import PREVIOUS
from lokg.pipeline.config import load_config
from lokg.runtime.contract import read_table
from lokg.pipeline.dump_edit import edit_synth_dump

pytestmark = pytest.mark.spark

CORE = ("entities", "relations", "triples")


def ingest(dump: Path, out: Path, previous: Path | None = None, *overrides: str) -> dict:
    from lokg.spark_jobs import ingest as stage

    inputs = {"dump": str(dump)}
    if previous is not None:
        inputs.update({PREVIOUS + t: str(previous / f"{t}.parquet") for t in CORE})
    config = load_config(None, ["ingest.format=synth", "engine.name=duckdb", *overrides])
    return stage.run(config, inputs, str(out))


def tables(out: Path) -> dict:
    return {t: read_table(out / f"{t}.parquet", t) for t in CORE}


def keyed(out: Path) -> set[tuple[str, str, str]]:
    """The triples by entity key and relation name, computed with Arrow."""
    got = tables(out)
    keys = got["entities"].column("key").to_pylist()
    names = got["relations"].column("name").to_pylist()
    return {(keys[s], names[r], keys[o]) for s, r, o in zip(
        *(got["triples"].column(c).to_pylist() for c in ("s", "r", "o")))}


def part(out: Path, name: str) -> list[tuple]:
    return [tuple(row.values()) for row in read_table(out / "change_set" / name).to_pylist()]


@pytest.fixture(scope="module")
def versions(tmp_path_factory, spark):
    from lokg.pipeline.synth import generate

    root = tmp_path_factory.mktemp("refresh-ingest")
    generate(root / "d1", n_triples=400, seed=3, n_questions=0)
    edit = edit_synth_dump(root / "d1", root / "d2", remove_edges=6, add_edges=4,
                           new_entities=2, drop_entities=1, rename=1, seed=5)
    outs = {"first": ingest(root / "d1", root / "first"),
            "refresh": ingest(root / "d2", root / "refresh", previous=root / "first"),
            "full": ingest(root / "d2", root / "full"),
            "same": ingest(root / "d1", root / "same", previous=root / "first")}
    return root, edit, {name: result["report"] for name, result in outs.items()}


def test_a_refresh_ingest_equals_a_full_ingest_row_for_row(versions):
    root, _, _ = versions
    refreshed, full = tables(root / "refresh"), tables(root / "full")
    for table in CORE:
        assert refreshed[table].equals(full[table]), table


def test_the_change_set_is_the_difference_of_the_two_graphs(versions):
    root, edit, reports = versions
    before, after = keyed(root / "first"), keyed(root / "full")
    assert set(part(root / "refresh", "added_triples")) == after - before != set()
    assert set(part(root / "refresh", "removed_triples")) == before - after != set()
    touched = {r for _, r, _ in (after - before) | (before - after)}
    assert {r for (r,) in part(root / "refresh", "touched_relations")} == touched
    assert [k for (k,) in part(root / "refresh", "added_entities")] == edit["new"]
    assert [k for (k,) in part(root / "refresh", "removed_entities")] == edit["dropped"]
    assert [k for (k,) in part(root / "refresh", "changed_entities")] == edit["renamed"]
    counts = reports["refresh"]["change_set"]
    assert counts == {name: len(part(root / "refresh", name)) for name in counts}


def test_the_change_set_on_spark_equals_duckdbs(versions):
    from lokg.spark_jobs.ingest_change_set import CHANGE_SET_PARTS

    root, _, reports = versions  # the refresh above: on DuckDB
    spark = ingest(root / "d2", root / "refresh-spark", root / "first", "engine.name=spark")
    assert spark["report"]["change_set"] == reports["refresh"]["change_set"]
    for name in CHANGE_SET_PARTS:
        assert part(root / "refresh-spark", name) == part(root / "refresh", name), name


def test_an_unchanged_dump_has_an_empty_change_set_and_the_same_tables(versions):
    root, _, reports = versions
    assert set(reports["same"]["change_set"].values()) == {0}
    first, same = tables(root / "first"), tables(root / "same")
    assert all(first[t].equals(same[t]) for t in CORE)


def test_a_full_ingest_reports_no_change_set_and_writes_empty_parts(versions):
    root, _, reports = versions
    assert reports["full"]["change_set"] is None
    assert part(root / "full", "added_triples") == []


def test_a_reused_ingest_reports_and_writes_an_empty_change_set(versions, tmp_path):
    import shutil

    from lokg.spark_jobs.ingest import on_reuse
    from lokg.spark_jobs.ingest_change_set import CHANGE_SET_PARTS

    root, _, reports = versions
    linked = tmp_path / "change_set"  # the previous refresh's change set, as a reuse links it
    shutil.copytree(root / "refresh" / "change_set", linked)
    report = on_reuse(str(tmp_path), {"change_set": str(linked)}, reports["refresh"])
    assert report["change_set"] == dict.fromkeys(CHANGE_SET_PARTS, 0)
    assert report["triples"] == reports["refresh"]["triples"]
    assert all(part(tmp_path, name) == [] for name in CHANGE_SET_PARTS)



# ---------------------------------------------------------------------------------------------
# entity_encode: unchanged entities keep their vectors, only new or changed ones are encoded

ENCODE = ["entity_encode.encoder=torch", "entity_encode.query_onnx='off'"]  # float32: exact


def renumbered(entities, keep=None, extra=()):
    """An entities table as ingest would number it: rows kept (``keep``: a key predicate) plus
    ``extra`` rows, ids dense in key order."""
    import pyarrow as pa

    rows = [r for r in entities.to_pylist() if keep is None or keep(r["key"])] + list(extra)
    rows.sort(key=lambda r: r["key"])
    for i, row in enumerate(rows):
        row["id"] = i
    return pa.Table.from_pylist(rows, schema=entities.schema)


def encode(entities, out: Path, previous: Path | None = None, overrides=ENCODE) -> dict:
    from lokg.runtime.contract import write_table
    from lokg.training import entity_encode

    write_table("entities", entities, out / "input" / "entities.parquet")
    inputs = {"entities": str(out / "input" / "entities.parquet")}
    if previous is not None:
        inputs.update({PREVIOUS + "entities": str(previous / "input" / "entities.parquet"),
                       **{PREVIOUS + name: str(previous / file) for name, file in (
                           ("entity_vectors", "entity_vectors.npy"),
                           ("entity_ids", "entity_ids.parquet"), ("encoder", "encoder.json"))}})
    return entity_encode.run(load_config(None, overrides), inputs, str(out))


@pytest.fixture(scope="module")
def encoded_base(versions, tmp_path_factory):
    root, _, _ = versions
    base = tables(root / "first")["entities"]
    out = tmp_path_factory.mktemp("encode-base")
    encode(base, out)
    return base, out


def changes(versions, base):
    """add-only, delete-only and mixed (the edited dump's ingest) versions of the entities."""
    root, _, _ = versions
    new = [{**base.slice(0, 1).to_pylist()[0], "key": f"m.zz{i}", "name": f"Added {i}"}
           for i in range(3)]
    keys = base.column("key").to_pylist()
    return {"add-only": renumbered(base, extra=new),
            "delete-only": renumbered(base, keep=lambda k: k not in keys[::9]),
            "mixed": tables(root / "full")["entities"]}


@pytest.mark.parametrize("change", ["add-only", "delete-only", "mixed"])
def test_a_partial_encode_equals_a_full_encode(versions, encoded_base, change, tmp_path):
    import numpy as np

    base, previous = encoded_base
    entities = changes(versions, base)[change]
    full = encode(entities, tmp_path / "full")
    partial = encode(entities, tmp_path / "partial", previous=previous)
    assert read_table(tmp_path / "partial" / "entity_ids.parquet").equals(
        read_table(tmp_path / "full" / "entity_ids.parquet"))
    vectors = [np.load(tmp_path / run / "entity_vectors.npy") for run in ("full", "partial")]
    assert vectors[0].shape == vectors[1].shape
    assert np.abs(vectors[0] - vectors[1]).max() < 1e-6
    old = set(zip(base.column("key").to_pylist(), base.column("name").to_pylist()))
    fresh = sum((k, n) not in old for k, n in zip(entities.column("key").to_pylist(),
                                                  entities.column("name").to_pylist()))
    report = partial["report"]
    assert report["encoded"] == fresh and report["reused_vectors"] == entities.num_rows - fresh
    assert full["report"]["reused_vectors"] is None
    assert (change == "delete-only") == (fresh == 0)


def test_a_partial_encode_reuses_the_export_and_the_unchanged_vectors(versions, tmp_path):
    """The default int8 export: reused as it was, unchanged vectors exactly the previous ones."""
    import numpy as np

    root, _, _ = versions
    base = tables(root / "first")["entities"]
    encode(base, tmp_path / "base", overrides=[])
    entities = changes(versions, base)["add-only"]
    encode(entities, tmp_path / "partial", previous=tmp_path / "base", overrides=[])
    for name in ("query_encoder.onnx", "span_encoder.onnx"):
        export = [(tmp_path / run / name).read_bytes() for run in ("base", "partial")]
        assert export[0] == export[1]
    before, after = (np.load(tmp_path / run / "entity_vectors.npy") for run in ("base", "partial"))
    kept = np.isin(entities.column("key").to_pylist(), base.column("key").to_pylist())
    assert np.array_equal(after[kept], before)  # the base's keys sort before the added m.zz*

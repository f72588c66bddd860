"""Ingest in a refresh (DESIGN §9): the change set against the previous build's ingest, and ids
equal to a full ingest of the same final dump. A small synthetic dump, edited as a new version
would be (tests/helpers.py edit_synth_dump); the expected change is computed here with Arrow."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.stage import PREVIOUS
from runtime.config import load_config
from runtime.contract import read_table
from tests.helpers import edit_synth_dump

pytestmark = pytest.mark.spark

CORE = ("entities", "relations", "triples")


def ingest(dump: Path, out: Path, previous: Path | None = None) -> dict:
    from spark_jobs import ingest as stage

    inputs = {"dump": str(dump)}
    if previous is not None:
        inputs.update({PREVIOUS + t: str(previous / f"{t}.parquet") for t in CORE})
    return stage.run(load_config(None, ["ingest.format=synth"]), inputs, str(out))


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
    from pipeline.synth import generate

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

    from spark_jobs.ingest import CHANGE_SET_PARTS, on_reuse

    root, _, reports = versions
    linked = tmp_path / "change_set"  # the previous refresh's change set, as a reuse links it
    shutil.copytree(root / "refresh" / "change_set", linked)
    report = on_reuse(str(tmp_path), {"change_set": str(linked)}, reports["refresh"])
    assert report["change_set"] == dict.fromkeys(CHANGE_SET_PARTS, 0)
    assert report["triples"] == reports["refresh"]["triples"]
    assert all(part(tmp_path, name) == [] for name in CHANGE_SET_PARTS)

"""Incremental refresh mechanics (pipeline/refresh.py, DESIGN §9): the refresh cache kept at
publish, fingerprints, reuse of unchanged stages, partial stages, ``refresh.mode=full``, and a
crash in the middle of a refresh. Stages are Spark-free stand-ins (the real ones: test_build)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet  # noqa: F401 (pa.parquet)
import pytest

from lokg.pipeline import driver as pipeline
from lokg.pipeline.refresh import content_hash
from lokg.common.stage import PREVIOUS
from lokg.runtime import contract
from lokg.pipeline.config import load_config
from lokg.runtime.contract import Store


class Killed(BaseException):
    """Stands for the SIGKILL of a stage process."""


def write_dump(path: Path, keys: list[str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "keys.json").write_text(json.dumps(keys))
    return path


class FakeStages:
    """``ingest`` (entity keys from the dump's keys.json, a chain of triples) and
    ``entity_types`` (entities copied with a type): enough for a publishable build. Records
    each call's inputs; ``fail`` names a stage that is killed when it runs."""

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        self.fail: str | None = None
        self.pass_on = False  # entity_types passes ingest's entities on (as scos_merge may)
        self.reverse = False  # ingest: the chain of triples the other way; entity_types: rows in reverse
        self.decline = False  # ingest: given the previous outputs, reports it ran in full

    def module(self, name):
        return SimpleNamespace(run=lambda config, inputs, out: self.run(name, inputs, Path(out)))

    def run(self, name, inputs, out):
        self.calls.append((name, dict(inputs)))
        if name == self.fail:
            raise Killed
        if name == "entity_types" and self.pass_on:
            return {"outputs": {"entities": inputs["entities"]}, "report": {}}
        if name == "entity_encode":
            return self.encode(inputs, out)
        if name == "entity_types":
            entities = contract.read_table(Path(inputs["entities"]), "entities")
            typed = entities.set_column(5, "types", pa.array([["t"]] * entities.num_rows,
                                                               pa.list_(pa.string())))
            if self.reverse:  # written in another order, as a Spark rerun may: other bytes
                typed = typed.take(list(range(typed.num_rows))[::-1])
            contract.write_table("entities", typed, out / "entities.parquet")
            return {"outputs": {"entities": str(out / "entities.parquet")}, "report": {}}
        keys = sorted(json.loads(Path(inputs["dump"], "keys.json").read_text()))
        n = len(keys)
        tables = {
            "entities": pa.table({"id": list(range(n)), "key": keys, "name": keys,
                                  "aliases": [[]] * n, "description": [None] * n,
                                  "types": [[]] * n, "attributes": [[]] * n}),
            "relations": pa.table({"id": [0], "name": ["next"]}),
            "triples": pa.table({"s": list(range(n - 1)), "r": [0] * (n - 1),
                                 "o": list(range(1, n))}),
            "quarantine": pa.table({"file": [], "line": [], "reason": [], "text": []}),
        }
        if self.reverse:
            tables["triples"] = tables["triples"].rename_columns(["o", "r", "s"])
        outputs = {}
        for table, data in tables.items():
            contract.write_table(table, data, out / table / "part-00000.parquet")
            outputs[table] = str(out / table)
        for empty in ("type_assertions", "change_set"):
            (out / empty).mkdir()
            outputs[empty] = str(out / empty)
        previous = PREVIOUS + "entities" in inputs  # the change set, as the real one counts it
        changes = {"added_entities": n - 3, "removed_entities": 0} if previous else None
        declined = {"refresh": {"mode": "full", "reason": "test"}} if self.decline else {}
        return {"outputs": outputs, "report": {"entities": n, "change_set": changes, **declined}}


    @staticmethod
    def encode(inputs, out):
        """entity_encode: entity_ids (row → id) and stand-ins for its model files."""
        ids = contract.read_table(Path(inputs["entities"]), "entities").column("id")
        contract.write_table("entity_ids", pa.table({"row": range(len(ids)), "id": ids}),
                             out / "entity_ids.parquet")
        for name in ("entity_vectors.npy", "entity.faiss", "encoder.json"):
            (out / name).write_text(name)
        outputs = {"entity_ids": "entity_ids.parquet", "entity_vectors": "entity_vectors.npy",
                   "entity_index": "entity.faiss", "encoder": "encoder.json"}
        return {"outputs": {k: str(out / v) for k, v in outputs.items()}, "report": {}}


@pytest.fixture
def stages(monkeypatch):
    fake = FakeStages()
    monkeypatch.setattr(pipeline, "_load_module", fake.module)
    return fake


def build(store: Store, build_id: str, dump: Path, *overrides: str, publish: bool = True,
          names: tuple[str, ...] = ("ingest", "entity_types")):
    """``names`` of a build's stages, then (``publish``) its publish; the records."""
    config = load_config(None, list(overrides))
    records = {name: pipeline.run_stage(store, build_id, name, config, str(dump))
               for name in names}
    if publish:
        pipeline.publish_build(store, build_id, config)
    return records


def test_publish_keeps_only_the_latest_build_as_the_refresh_cache(tmp_path, stages):
    store, dump = Store(tmp_path / "store"), write_dump(tmp_path / "dump", ["a", "b", "c"])
    build(store, "b1", dump)
    assert not store.staging_dir("b1").exists()
    assert (store.refresh_dir("b1") / "ingest" / pipeline.STAGE_RECORD).is_file()
    assert store.refresh_base() == "b1"
    build(store, "b2", dump)
    assert sorted(p.name for p in (store.root / contract.REFRESH_DIR).iterdir()) == ["b2"]
    assert store.refresh_base() == "b2"


def test_unchanged_input_reuses_every_stage_and_publishes_the_same_tables(tmp_path, stages):
    store, dump = Store(tmp_path / "store"), write_dump(tmp_path / "dump", ["a", "b", "c"])
    first = build(store, "b1", dump)
    calls = len(stages.calls)
    second = build(store, "b2", dump)
    assert len(stages.calls) == calls  # nothing ran
    for name, record in second.items():
        assert record["refresh"] == "reused" and record["refresh_base"] == "b1"
        assert record["fingerprint"] == first[name]["fingerprint"]
        assert record["hashes"] == first[name]["hashes"]
    one, two = store.build("b1"), store.build("b2", verify=True)
    for table in ("entities", "relations", "triples"):
        assert one.read(table).equals(two.read(table))


def test_reused_outputs_are_hard_links_of_the_cache(tmp_path, stages):
    store, dump = Store(tmp_path / "store"), write_dump(tmp_path / "dump", ["a", "b"])
    build(store, "b1", dump)
    records = build(store, "b2", dump, publish=False)
    staged = Path(records["ingest"]["outputs"]["triples"]) / "part-00000.parquet"
    cached = store.refresh_dir("b1") / "ingest" / "triples" / "part-00000.parquet"
    assert staged.stat().st_ino == cached.stat().st_ino
    assert content_hash(staged.parent) == records["ingest"]["hashes"]["triples"]


def test_an_output_passed_on_from_an_earlier_stage_is_reused_as_this_builds(tmp_path, stages):
    store, dump = Store(tmp_path / "store"), write_dump(tmp_path / "dump", ["a", "b"])
    stages.pass_on = True
    build(store, "b1", dump)
    records = build(store, "b2", dump, publish=False)
    assert records["entity_types"]["refresh"] == "reused"
    assert records["entity_types"]["outputs"]["entities"] == \
        records["ingest"]["outputs"]["entities"] == str(store.staging_dir("b2") / "ingest" /
                                                         "entities")


def test_changed_input_runs_partial_stages_with_the_cached_outputs(tmp_path, stages):
    store = Store(tmp_path / "store")
    build(store, "b1", write_dump(tmp_path / "d1", ["a", "b", "c"]))
    stages.calls.clear()
    records = build(store, "b2", write_dump(tmp_path / "d2", ["a", "c", "d"]))
    assert records["ingest"]["refresh"] == "partial"  # ingest: partial in the registry
    assert records["entity_types"]["refresh"] == "full"  # reuse only: its input changed
    ingest_inputs = dict(stages.calls)["ingest"]
    cached = store.refresh_dir("b1") / "ingest"
    assert ingest_inputs[PREVIOUS + "entities"] == str(cached / "entities")
    assert PREVIOUS + "entities" not in dict(stages.calls)["entity_types"]
    assert store.build("b2").read("entities").column("key").to_pylist() == ["a", "c", "d"]


@pytest.mark.parametrize("decline", [False, True])
def test_a_partial_stage_that_ran_in_full_is_recorded_as_full(tmp_path, stages, decline):
    store = Store(tmp_path / "store")
    build(store, "b1", write_dump(tmp_path / "d1", ["a", "b", "c"]))
    stages.decline = decline
    records = build(store, "b2", write_dump(tmp_path / "d2", ["a", "c", "d"]))
    assert PREVIOUS + "entities" in dict(stages.calls)["ingest"]  # offered either way
    assert records["ingest"]["refresh"] == ("full" if decline else "partial")


def test_a_rerun_writing_the_cached_rows_keeps_their_hash_so_its_readers_are_reused(tmp_path,
                                                                                    stages):
    store, dump = Store(tmp_path / "store"), write_dump(tmp_path / "dump", ["a", "b", "c"])
    names = ("ingest", "entity_types", "entity_encode")
    first = build(store, "b1", dump, names=names)
    stages.reverse, stages.calls[:] = True, []  # new triples, the same entities
    records = build(store, "b2", dump, "ingest.max_malformed_share=0.5", names=names)
    assert [name for name, _ in stages.calls] == ["ingest", "entity_types"]
    assert records["entity_types"]["refresh"] == "full"  # its input triples changed
    assert records["entity_types"]["cut_off"] == ["entities"]
    assert records["entity_types"]["hashes"] == first["entity_types"]["hashes"]
    assert records["entity_encode"]["refresh"] == "reused"
    assert all(record["peak_rss_mb"] > 0 for record in records.values())  # reused ones too
    assert records["ingest"]["hashes"]["triples"] != first["ingest"]["hashes"]["triples"]
    assert store.build("b2").read("entity_ids").equals(store.build("b1").read("entity_ids"))


def test_a_rerun_writing_other_rows_keeps_its_own_hash_and_its_readers_rerun(tmp_path, stages):
    store, names = Store(tmp_path / "store"), ("ingest", "entity_types", "entity_encode")
    build(store, "b1", write_dump(tmp_path / "d1", ["a", "b", "c"]), names=names)
    stages.calls[:] = []
    records = build(store, "b2", write_dump(tmp_path / "d2", ["a", "b", "d"]), names=names)
    assert [name for name, _ in stages.calls] == ["ingest", "entity_types", "entity_encode"]
    assert records["entity_types"]["cut_off"] == []
    assert records["entity_encode"]["refresh"] == "partial"


def test_same_rows_ignores_row_order_and_files_but_not_content(tmp_path):
    from lokg.pipeline.refresh import same_rows

    table = pa.table({"id": [0, 1, 2], "aliases": [["x"], [], ["y", "z"]]})
    contract.write_table("entity_ids", pa.table({"row": [0], "id": [0]}), tmp_path / "o.parquet")
    for name, part in (("one", table), ("split", table.slice(1)), ("split", table.slice(0, 1)),
                       ("other", table.set_column(0, "id", pa.array([0, 1, 3])))):
        (tmp_path / name).mkdir(exist_ok=True)
        pa.parquet.write_table(part, tmp_path / name / f"part-{len(os.listdir(tmp_path / name))}"
                                                        ".parquet")
    shuffled = tmp_path / "shuffled.parquet"
    pa.parquet.write_table(table.take([2, 0, 1]), shuffled)
    assert same_rows(tmp_path / "one", shuffled) and same_rows(tmp_path / "one", tmp_path / "split")
    assert not same_rows(tmp_path / "one", tmp_path / "other")
    assert not same_rows(tmp_path / "one", tmp_path / "o.parquet")  # fewer rows
    (tmp_path / "model.json").write_text("{}")
    assert not same_rows(tmp_path / "model.json", tmp_path / "model.json")  # not a table


def test_row_digest_is_order_free_but_sees_every_cell_and_where_it_is(tmp_path, monkeypatch):
    from lokg.pipeline.refresh import row_digest, same_rows

    table = pa.table({"id": [0, 1, 2, 2], "name": ["a", None, "c", "c"],
                      "score": [0.5, 1.5, float("nan"), float("nan")],
                      "aliases": [["x"], [], None, None],
                      "attributes": [[{"key": "k", "value": "v"}], [], [], []]})
    variants = {  # each differs from the table in one way the digest must see
        "swapped_between_rows": table.set_column(1, "name", pa.array(["c", None, "a", "c"])),
        "null_for_empty": table.set_column(3, "aliases", pa.array([["x"], None, None, None])),
        "list_reordered": table.set_column(3, "aliases", pa.array([["x"], [], [], None])),
        "nested_field": table.set_column(4, "attributes", pa.array(
            [[{"key": "k", "value": "w"}], [], [], []], table.schema.field(4).type)),
        "duplicate_dropped": table.take([0, 1, 2, 1]),
    }
    digest = {}
    for name, part in {"table": table, "reversed": table.take([3, 2, 1, 0]), **variants}.items():
        pa.parquet.write_table(part, tmp_path / f"{name}.parquet", row_group_size=3)
        digest[name] = row_digest([str(tmp_path / f"{name}.parquet")])
    assert digest["table"] == digest["reversed"]
    assert len({digest[name] for name in ("table", *variants)}) == 1 + len(variants)
    monkeypatch.setattr(pa.compute, "sort_indices", None)  # the comparison never sorts
    assert same_rows(tmp_path / "table.parquet", tmp_path / "reversed.parquet")


def test_changed_config_or_refresh_mode_full_runs_in_full(tmp_path, stages):
    store, dump = Store(tmp_path / "store"), write_dump(tmp_path / "dump", ["a", "b"])
    build(store, "b1", dump)
    changed = build(store, "b2", dump, "ingest.max_malformed_share=0.5")
    assert changed["ingest"]["refresh"] == "full"  # not partial: its settings changed
    assert changed["ingest"]["fingerprint"]["inputs"] == \
        build(store, "b3", dump, "refresh.mode=full")["ingest"]["fingerprint"]["inputs"]
    forced = json.loads((store.refresh_dir("b3") / "ingest" / pipeline.STAGE_RECORD).read_text())
    assert forced["refresh"] == "full" and forced["refresh_base"] is None


def test_a_stage_reading_the_store_is_never_reused(tmp_path):
    store = Store(tmp_path / "store")
    inputs = {"store": str(store.root)}
    one = pipeline.input_hashes(store, "b1", "feedback_enrich", inputs)
    assert one != pipeline.input_hashes(store, "b1", "feedback_enrich", inputs)
    assert pipeline._known("feedback_enrich").refresh == "full"


def test_crash_in_the_middle_of_a_refresh_then_a_rerun_completes(tmp_path, stages):
    store = Store(tmp_path / "store")
    build(store, "b1", write_dump(tmp_path / "d1", ["a", "b", "c"]))
    dump = write_dump(tmp_path / "d2", ["a", "b", "c", "d"])
    stages.fail = "entity_types"
    with pytest.raises(Killed):
        build(store, "b2", dump)
    assert store.current_id() == "b1" and store.refresh_base() == "b1"
    store.build("b1", verify=True)
    stages.fail = None
    records = build(store, "b2", dump)  # the rerun: ingest again, then the rest
    assert store.current_id() == "b2" and store.refresh_base() == "b2"
    assert records["entity_types"]["refresh"] == "full"
    assert store.build("b2", verify=True).rows("entities") == 4


def test_publish_retry_after_a_crash_before_caching_moves_the_staging(tmp_path, stages,
                                                                      monkeypatch):
    store, dump = Store(tmp_path / "store"), write_dump(tmp_path / "dump", ["a", "b"])
    build(store, "b1", dump)
    build(store, "b2", dump, publish=False)

    def killed(self, build_id):
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(Store, "keep_for_refresh", killed)
        with pytest.raises(Killed):
            pipeline.publish_build(store, "b2", load_config(None, []))
    assert store.current_id() == "b2" and store.refresh_base() == "b1"
    pipeline.publish_build(store, "b2", load_config(None, []))
    assert store.refresh_base() == "b2" and not store.staging_dir("b2").exists()
    assert os.listdir(store.root / contract.REFRESH_DIR) == ["b2"]


def test_store_show_says_how_each_stage_was_made(tmp_path, stages):
    from click.testing import CliRunner

    from lokg.cli import cli

    store, dump = Store(tmp_path / "store"), write_dump(tmp_path / "dump", ["a", "b"])
    build(store, "b1", dump)
    build(store, "b2", dump)
    shown = {}
    for build_id in ("b1", "b2"):
        result = CliRunner().invoke(cli, ["store", "show", build_id, "--store", str(store.root)])
        assert result.exit_code == 0, result.output
        shown[build_id] = result.output
    def made(output):
        return [line.split()[3] for line in output.splitlines()
                if line.lstrip().startswith("stage ")]

    assert "refresh: full build" in shown["b1"] and made(shown["b1"]) == ["full", "full"]
    assert "refresh: from build b1" in shown["b2"] and made(shown["b2"]) == ["reused", "reused"]


def test_store_show_prints_what_a_refresh_changed(tmp_path, stages):
    from click.testing import CliRunner

    from lokg.cli import cli

    store = Store(tmp_path / "store")
    build(store, "b1", write_dump(tmp_path / "d1", ["a", "b", "c"]))
    build(store, "b2", write_dump(tmp_path / "d2", ["a", "b", "c", "d", "e"]))
    result = CliRunner().invoke(cli, ["store", "show", "--store", str(store.root)])
    assert result.exit_code == 0, result.output
    assert "refresh: from build b1" in result.output
    assert "changes: added entities 2\n" in result.output
    assert store.build("b2").manifest["report"]["refresh"]["changes"]["added_entities"] == 2


@pytest.mark.parametrize("flags, mode", [([], "auto"), (["--full"], "full")])
def test_lokg_build_refreshes_unless_full(tmp_path, monkeypatch, flags, mode):
    from click.testing import CliRunner

    from lokg.cli import cli

    seen = {}

    def staged(store, build_id, name, config, dump):
        seen.update(config["refresh"])
        return {"seconds": 0.0}

    monkeypatch.setattr(pipeline, "run_stage", staged)
    dump = write_dump(tmp_path / "dump", ["a"])
    result = CliRunner().invoke(cli, ["build", "--dump", str(dump), "--store",
                                      str(tmp_path / "store"), "--stage", "ingest",
                                      "--build-id", "b1", *flags])
    assert result.exit_code == 0, result.output
    assert seen == {"mode": mode}


def test_the_cache_of_current_is_preferred_and_the_others_pruned_at_the_next_publish(tmp_path):
    store = Store(tmp_path / "store")
    for build_id in ("b1", "b2"):  # two caches: a crash between caching and pruning
        store.refresh_dir(build_id).mkdir(parents=True)
    (store.root / contract.REFRESH_DIR / ".b0.deleted-1234").mkdir()  # a crash mid-deletion
    (store.root / contract.CURRENT_FILE).write_text("b1\n")
    assert store.refresh_base() == "b1"
    (store.root / contract.CURRENT_FILE).write_text("b9\n")  # rolled back to an uncached build
    assert store.refresh_base() == "b2"
    store.staging_dir("b3").mkdir(parents=True)
    store.keep_for_refresh("b3")
    assert os.listdir(store.root / contract.REFRESH_DIR) == ["b3"]
    assert not store.staging_dir("b3").exists()

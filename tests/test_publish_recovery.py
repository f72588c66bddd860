"""Recovery from killed builds: stage attempts, publish retries, abandoned staging.

Kills are simulated by raising at the point where a SIGKILL would stop the process; what a
killed process leaves on disk is exactly what the raise leaves (nothing cleans up after a
SIGKILL, so the tests never rely on the code's own ``except`` paths for that).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from lokg.pipeline import driver as pipeline
from lokg.pipeline.registry import Stage
from lokg.runtime import contract
from lokg.cli import cli
from lokg.pipeline.config import load_config
from lokg.runtime.contract import Store, StoreError
from lokg.testing.stores import stage_tables as _stage_tables


class Killed(BaseException):
    """Stands for the SIGKILL of a stage or publish process."""


# ---------------------------------------------------------------------------------------------
# run_stage: a stage becomes visible only when finished, in a directory no other attempt uses


def fake_stage(monkeypatch, run, outputs: tuple[str, ...] = ()) -> None:
    """Make ``run`` the implementation of the first stage, reading nothing, writing ``outputs``."""
    real = pipeline._known
    fake = Stage(FIRST, "tests", inputs=(), outputs=outputs)
    monkeypatch.setattr(pipeline, "_load_module", lambda name: SimpleNamespace(run=run))
    monkeypatch.setattr(pipeline, "_known", lambda name: fake if name == FIRST else real(name))


FIRST = "ingest"  # the stage entity_types reads its tables from


def test_killed_stage_leaves_no_stage_directory(tmp_path, monkeypatch):
    store = Store(tmp_path / "store")

    def killed(config, inputs, out_dir):
        Path(out_dir, "part-0.parquet").write_text("half")
        raise Killed

    fake_stage(monkeypatch, killed)
    with pytest.raises(Killed):
        pipeline.run_stage(store, "b1", FIRST, {}, None)
    assert not (store.staging_dir("b1") / FIRST).exists()
    with pytest.raises(pipeline.BuildError, match=f"needs stage '{FIRST}' first"):
        pipeline.collect_inputs(store, "b1", None, "entity_types")


def test_orphan_of_a_killed_attempt_cannot_write_into_the_retry(tmp_path, monkeypatch):
    store = Store(tmp_path / "store")
    attempts: list[Path] = []

    def stage(config, inputs, out_dir):
        attempts.append(Path(out_dir))
        if len(attempts) == 1:  # attempt 1 is "killed" by Airflow but its process lives on
            raise Killed
        Path(out_dir, "entities.parquet").write_text("retry")
        return {"outputs": {"entities": str(Path(out_dir, "entities.parquet")),
                            "dump": "/elsewhere/kg.nt"}}

    fake_stage(monkeypatch, stage, outputs=("entities", "dump"))
    with pytest.raises(Killed):
        pipeline.run_stage(store, "b1", FIRST, {}, None)
    record = pipeline.run_stage(store, "b1", FIRST, {}, None)
    orphan, retry = attempts
    assert orphan != retry
    orphan.mkdir(parents=True, exist_ok=True)  # the orphan goes on writing
    (orphan / "entities.parquet").write_text("orphan")

    final = store.staging_dir("b1") / FIRST
    assert sorted(p.name for p in final.iterdir()) == ["_stage.json", "entities.parquet"]
    assert (final / "entities.parquet").read_text() == "retry"
    # the record names where the outputs are now, not the attempt's working directory
    on_disk = json.loads((final / pipeline.STAGE_RECORD).read_text())
    assert on_disk == record
    assert record["outputs"] == {"entities": str(final / "entities.parquet"),
                                 "dump": "/elsewhere/kg.nt"}
    assert pipeline.stage_records(store, "b1")[FIRST]["outputs"]["entities"] == \
        str(final / "entities.parquet")


def test_rerun_replaces_the_stage_directory_whole(tmp_path, monkeypatch):
    store = Store(tmp_path / "store")
    runs = []

    def stage(config, inputs, out_dir):
        runs.append(out_dir)
        Path(out_dir, f"run{len(runs)}.txt").write_text("x")
        return {"outputs": {}}

    fake_stage(monkeypatch, stage)
    pipeline.run_stage(store, "b1", FIRST, {}, None)
    pipeline.run_stage(store, "b1", FIRST, {}, None)
    assert sorted(p.name for p in store.staging_dir("b1").iterdir()) == [FIRST]
    assert sorted(p.name for p in (store.staging_dir("b1") / FIRST).iterdir()) == \
        ["_stage.json", "run2.txt"]


# ---------------------------------------------------------------------------------------------
# publish: a retry after a kill between the rename and the CURRENT swap finishes the swap


def stage_build(store: Store, build_id: str, n_entities: int = 3) -> None:
    """A staged build as the stages leave it: the core tables and the first stage's record."""
    stage_dir = store.staging_dir(build_id) / FIRST
    tables = _stage_tables(stage_dir, n_entities)
    (stage_dir / pipeline.STAGE_RECORD).write_text(json.dumps(
        {"stage": FIRST, "seconds": 1.0, "report": {},
         "outputs": {name: str(path) for name, path in tables.items()}}))


def kill_before_current_swap(monkeypatch) -> None:
    """The next write of CURRENT is killed: the build directory is renamed, CURRENT not swapped."""
    write = contract.store.write_atomic

    def write_or_die(path, data):
        if path.name == contract.CURRENT_FILE:
            monkeypatch.setattr(contract.store, "write_atomic", write)
            raise Killed
        write(path, data)

    monkeypatch.setattr(contract.store, "write_atomic", write_or_die)


def test_store_publish_retry_finishes_the_swap(tmp_path, monkeypatch):
    store = Store(tmp_path / "store")
    store.publish("b1", _stage_tables(tmp_path / "s1"))
    tables = _stage_tables(tmp_path / "s2")
    kill_before_current_swap(monkeypatch)
    with pytest.raises(Killed):
        store.publish("b2", tables)
    assert store.current_id() == "b1" and store.build_ids() == ["b1", "b2"]

    build = store.publish("b2", tables)
    assert store.current_id() == "b2" == build.build_id
    assert store.build(verify=True).manifest == build.manifest
    assert not list(store.builds_dir.glob(".partial-*"))


def test_store_publish_refuses_other_content_under_a_published_id(tmp_path):
    store = Store(tmp_path / "store")
    store.publish("b1", _stage_tables(tmp_path / "s1"))
    with pytest.raises(StoreError, match=r"b1: build already published with different content "
                                         r"\(tables differ: entities\)"):
        store.publish("b1", _stage_tables(tmp_path / "s2", n_entities=4))
    part = store.builds_dir / "b1" / "triples.parquet" / "part-00000.parquet"
    part.write_bytes(part.read_bytes()[:-1] + b"\0")
    with pytest.raises(StoreError, match="b1: build already published and it does not verify"):
        store.publish("b1", _stage_tables(tmp_path / "s3"))
    assert store.current_id() == "b1"
    assert not list(store.builds_dir.glob(".partial-*"))


def test_lokg_publish_retry_after_kill_publishes_and_cleans_staging(tmp_path, monkeypatch):
    store = Store(tmp_path / "store")
    stage_build(store, "b1")
    args = ["publish", "--store", str(store.root), "--build-id", "b1"]
    kill_before_current_swap(monkeypatch)
    with pytest.raises(Killed):
        CliRunner().invoke(cli, args, catch_exceptions=False)
    assert store.current_id() is None and store.build_ids() == ["b1"]
    assert store.staging_dir("b1").is_dir()

    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert store.current_id() == "b1"
    assert not store.staging_dir("b1").exists()
    assert list((store.root / "staging").iterdir()) == []
    # a retry of a publish that finished but was not reported (staging already gone)
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0, again.output
    assert "build b1" in again.output and store.current_id() == "b1"


def test_publish_build_of_another_staged_build_under_a_published_id_is_refused(tmp_path):
    store = Store(tmp_path / "store")
    config = load_config(None, [])
    stage_build(store, "b1")
    pipeline.publish_build(store, "b1", config)
    stage_build(store, "b1", n_entities=5)
    with pytest.raises(StoreError, match="already published with different content"):
        pipeline.publish_build(store, "b1", config)
    assert store.build("b1", verify=True).rows("entities") == 3


# ---------------------------------------------------------------------------------------------
# lokg store gc: staging of builds nobody will publish


def test_store_gc_removes_only_staging_unchanged_for_the_threshold(tmp_path):
    store = Store(tmp_path / "store")
    for build_id in ("old", "recent", "old-but-writing"):
        stage_dir = store.staging_dir(build_id) / FIRST
        stage_dir.mkdir(parents=True)
        (stage_dir / "part-0.parquet").write_text("x")
    day_ago = time.time() - 24 * 3600
    for build_id in ("old", "old-but-writing"):
        for dirpath, dirnames, filenames in os.walk(store.staging_dir(build_id), topdown=False):
            for name in [*filenames, *dirnames, ""]:
                os.utime(os.path.join(dirpath, name), (day_ago, day_ago))
    (store.staging_dir("old-but-writing") / FIRST / "part-0.parquet").write_text("y")

    result = CliRunner().invoke(cli, ["store", "gc", "--older-than", "12", "--store",
                                      str(store.root)])
    assert result.exit_code == 0, result.output
    assert f"removed {store.staging_dir('old')}" in result.output
    assert "1 staging directory removed" in result.output
    assert sorted(p.name for p in (store.root / "staging").iterdir()) == \
        ["old-but-writing", "recent"]
    missing = CliRunner().invoke(cli, ["store", "gc", "--store", str(tmp_path / "nowhere")])
    assert missing.exit_code != 0 and "store root does not exist" in missing.output

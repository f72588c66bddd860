"""The operator probe's store defects (issue 51): concurrent builds on one store (D2), strays
under builds/ (D5), full and read-only disks (D8), a build rerun after a kill past its CURRENT
swap (D9).

Builds here run one Spark-free stage (``ingest``, writing the core tables): what is tested is
the driver and the store around the stages. Kills are raised where a SIGKILL would stop the
process, as in tests/test_publish_recovery.py.
"""

from __future__ import annotations

import builtins
import errno
import json
import shutil
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from lokg.cli import cli
from lokg.pipeline import driver as pipeline
from lokg.pipeline.config import load_config
from lokg.pipeline.registry import Stage
from lokg.runtime import pins
from lokg.runtime.contract import BUILD_LEASE_FILE, Store, StoreError
from lokg.testing.cli import assert_clean_error
from lokg.testing.stores import stage_tables

CONFIG = load_config(None, [])


class Killed(BaseException):
    """Stands for the SIGKILL of a build process."""


def one_stage_pipeline(monkeypatch, before=None) -> None:
    """``pipeline.build`` runs one stage writing the core tables; ``before(out_dir)`` first."""
    fake = Stage("ingest", "tests", inputs=(), outputs=("entities", "relations", "triples"))

    def run(config, inputs, out_dir):
        if before is not None:
            before(out_dir)
        return {"outputs": {k: str(v) for k, v in stage_tables(Path(out_dir)).items()}}

    monkeypatch.setattr(pipeline, "STAGE_NAMES", ("ingest",))
    monkeypatch.setattr(pipeline, "_known", lambda name: fake)
    monkeypatch.setattr(pipeline, "_load_module", lambda name: SimpleNamespace(run=run))


def dump(tmp_path: Path) -> str:
    path = tmp_path / "kg.tsv"
    path.write_text("a\tr\tb\n")
    return str(path)


def build(tmp_path: Path, store: Path, build_id: str):
    return pipeline.build(dump(tmp_path), str(store), CONFIG, build_id=build_id,
                          log=lambda _: None)


def cli_build(tmp_path: Path, store: Path, build_id: str):
    return CliRunner().invoke(cli, ["build", "--dump", dump(tmp_path), "--store", str(store),
                                    "--build-id", build_id])


# ---------------------------------------------------------------------------------------------
# D2: one build at a time on a store, the second refused at its start


def test_a_second_build_is_refused_at_its_start_and_leaves_nothing(tmp_path, monkeypatch):
    store = tmp_path / "store"
    started, resume = threading.Event(), threading.Event()

    def pause(out_dir):
        if threading.current_thread() is not threading.main_thread():
            started.set()
            assert resume.wait(30)

    one_stage_pipeline(monkeypatch, before=pause)
    build(tmp_path, store, "b0")  # a refresh cache the first build could read
    outcome = {}
    first = threading.Thread(target=lambda: outcome.update(a=build(tmp_path, store, "a")))
    first.start()
    assert started.wait(30)
    result = cli_build(tmp_path, store, "b")
    assert_clean_error(result.output, result.exit_code, 1, str(store), "build b refused",
                       "build a (pid", "is running on this store")
    progress = [line for line in result.output.splitlines() if line.startswith("[")]
    assert len(result.output.strip().splitlines()) == 1 + len(progress), result.output
    assert not Store(store).staging_dir("b").exists()  # refused before any stage
    assert sorted(p.name for p in (store / "refresh").iterdir()) == ["b0"]
    with pytest.raises(StoreError, match="build a .* is running"):
        pipeline.publish_build(Store(store), "b", CONFIG)  # lokg publish: refused as well
    resume.set()
    first.join(30)
    assert outcome["a"].build_id == "a" == Store(store).current_id()
    assert Store(store).build_ids() == ["a", "b0"]
    assert json.loads((store / BUILD_LEASE_FILE).read_text() or "{}") == {}  # released
    assert cli_build(tmp_path, store, "b").exit_code == 0  # once a has ended, b runs
    assert Store(store).current_id() == "b"


def test_a_lease_of_a_dead_build_is_taken_over_and_one_of_another_host_refused(
        tmp_path, monkeypatch, caplog):
    store = tmp_path / "store"
    one_stage_pipeline(monkeypatch)
    store.mkdir()
    lease = store / BUILD_LEASE_FILE
    dead = f"{pins.pin_name().partition('-')[0]}-999999999-abcd"  # this host, no such pid
    lease.write_text(json.dumps({"build_id": "killed", "holder": dead, "since": "then"}))
    with caplog.at_level("WARNING", logger="lokg.store"):
        assert build(tmp_path, store, "b1").build_id == "b1"
    assert "taking over the build lease of build killed (pid 999999999" in caplog.text

    lease.write_text(json.dumps({"build_id": "elsewhere", "holder": "otherhost-42-abcd",
                                 "since": "now"}))
    result = cli_build(tmp_path, store, "b2")
    assert_clean_error(result.output, result.exit_code, 1, "build elsewhere (pid 42 on otherhost",
                       f"delete {lease}")
    assert not Store(store).staging_dir("b2").exists()


# ---------------------------------------------------------------------------------------------
# D9: lokg build --build-id X rerun after a kill just past the CURRENT swap completes


def test_a_build_rerun_after_a_kill_past_the_current_swap_completes(tmp_path, monkeypatch):
    store = tmp_path / "store"
    one_stage_pipeline(monkeypatch)
    build(tmp_path, store, "b0")

    def killed(self, build_id):  # CURRENT swapped, the staging not yet moved to the cache
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(Store, "keep_for_refresh", killed)
        with pytest.raises(Killed):
            build(tmp_path, store, "b1")
    assert Store(store).current_id() == "b1" and Store(store).staging_dir("b1").is_dir()

    result = cli_build(tmp_path, store, "b1")
    assert result.exit_code == 0, result.output
    assert "build b1 is published already; finishing its publish" in result.output
    assert Store(store).current_id() == "b1" and not Store(store).staging_dir("b1").exists()
    assert sorted(p.name for p in (store / "refresh").iterdir()) == ["b1"]
    Store(store).build("b1", verify=True)
    again = cli_build(tmp_path, store, "b1")  # and once more, with nothing left to do
    assert again.exit_code == 0 and Store(store).current_id() == "b1", again.output


# ---------------------------------------------------------------------------------------------
# D5: a symlink or a file under builds/ (or staging/) is skipped by gc with a warning


def test_gc_skips_a_symlink_and_a_file_under_builds_and_later_builds_are_unaffected(
        tmp_path, monkeypatch):
    root = tmp_path / "store"
    store = Store(root)
    for build_id in ("20200101T000000Z-b1", "20200101T000000Z-b2"):
        store.publish(build_id, stage_tables(tmp_path / build_id), keep=5)
    elsewhere = tmp_path / "elsewhere"  # a complete build outside the store
    shutil.copytree(store.builds_dir / "20200101T000000Z-b1", elsewhere)
    link = store.builds_dir / "20200101T000000Z-aaaaaa"
    link.symlink_to(elsewhere)
    (store.builds_dir / ".partial-20200101T000000Z-cccccc").symlink_to(elsewhere)
    (store.builds_dir / "notes.txt").write_text("x")
    (root / "staging").mkdir()
    (root / "staging" / "20200101T000000Z-dddddd").symlink_to(elsewhere)
    before = sorted(p.relative_to(elsewhere) for p in elsewhere.rglob("*"))

    result = CliRunner().invoke(cli, ["store", "gc", "--store", str(root), "--keep", "0",
                                      "--older-than", "0"])
    assert_clean_error(result.output, result.exit_code, 0,
                       f"warning: skipped {link}: not a directory (a symlink)",
                       f"skipped {store.builds_dir / 'notes.txt'}: not a directory (a file)",
                       "skipped", "20200101T000000Z-dddddd", "20200101T000000Z-cccccc",
                       "removed build 20200101T000000Z-b1", "1 build removed")
    assert sorted(p.relative_to(elsewhere) for p in elsewhere.rglob("*")) == before
    assert link.is_symlink() and store.build_ids() == ["20200101T000000Z-b2"]
    assert not [p for p in store.builds_dir.iterdir() if p.name.startswith(".partial-")
                and not p.is_symlink()]

    one_stage_pipeline(monkeypatch)  # later builds publish, retain and cache as ever
    assert build(tmp_path, root, "20200102T000000Z-b3").build_id == "20200102T000000Z-b3"
    assert build(tmp_path, root, "20200103T000000Z-b4").build_id == "20200103T000000Z-b4"
    assert store.current_id() == "20200103T000000Z-b4"
    assert sorted(p.name for p in (root / "refresh").iterdir()) == ["20200103T000000Z-b4"]
    assert link.is_symlink() and elsewhere.is_dir()


# ---------------------------------------------------------------------------------------------
# D8: a read-only store, a full disk: one line naming the store and the path, no traceback


def read_only(monkeypatch, root: Path) -> None:
    """Every open of a file of ``root`` for writing fails as on a read-only mount (EROFS)."""
    real = open

    def guarded(path, mode="r", *args, **kwargs):
        if str(path).startswith(str(root)) and set(mode) & set("wax+"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded)


def assert_one_line(result, *names: str) -> None:
    assert isinstance(result.exception, SystemExit), result.exception
    assert_clean_error(result.output, result.exit_code, 1, *names)
    progress = [line for line in result.output.splitlines() if line.startswith("[")]
    assert len(result.output.strip().splitlines()) == 1 + len(progress), result.output


def test_gc_and_rollback_of_a_read_only_store_are_one_line_errors(tmp_path, monkeypatch):
    root = tmp_path / "store"
    store = Store(root)
    for build_id in ("b1", "b2"):
        store.publish(build_id, stage_tables(tmp_path / build_id))
    (root / "staging" / "old").mkdir(parents=True)
    invoke = CliRunner().invoke
    with monkeypatch.context() as patch:
        read_only(patch, root)
        rollback = invoke(cli, ["store", "rollback", "b1", "--store", str(root)])
        gc = invoke(cli, ["store", "gc", "--store", str(root), "--keep", "0"])
    lock = str(root / ".publish.lock")
    assert_one_line(rollback, f"rollback refused: store {root}: Read-only file system: {lock}")
    assert_one_line(gc, f"gc failed: store {root}: Read-only file system: {lock}")
    with monkeypatch.context() as patch:  # a staging directory it may not delete
        patch.setattr(shutil, "rmtree", lambda path, *a, **k: (_ for _ in ()).throw(
            PermissionError(errno.EACCES, "Permission denied", str(path))))
        denied = invoke(cli, ["store", "gc", "--store", str(root), "--older-than", "0"])
    assert_one_line(denied, f"gc failed: store {root}: Permission denied: {root / 'staging'}")
    assert store.current_id() == "b2" and store.build_ids() == ["b1", "b2"]


@pytest.mark.parametrize("error", [
    OSError(errno.ENOSPC, "No space left on device", "/full/disk/part-0.parquet"),
    OSError("Error writing bytes to file. Detail: [errno 28] No space left on device"),
], ids=["with-path", "pyarrow-without-path"])
def test_a_build_filling_the_disk_is_a_one_line_error_naming_the_store(tmp_path, monkeypatch,
                                                                     error):
    root = tmp_path / "store"

    def full(out_dir):
        raise error

    one_stage_pipeline(monkeypatch, before=full)
    result = cli_build(tmp_path, root, "b1")
    reason = error.strerror or str(error)
    assert_one_line(result, f"build failed: store {root}: {reason}",
                    *([error.filename] if error.filename else []))
    assert json.loads((root / BUILD_LEASE_FILE).read_text() or "{}") == {}  # released
    one_stage_pipeline(monkeypatch)  # space freed: the rerun builds
    assert cli_build(tmp_path, root, "b1").exit_code == 0
    assert Store(root).current_id() == "b1"

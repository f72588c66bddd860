"""Publishers, rollbacks and retention racing each other and readers (issue 21): one writer at a
time, CURRENT only on an existing verified build, pinned builds never deleted."""

from __future__ import annotations

import multiprocessing
import os
import threading
from pathlib import Path

import pytest

from lokg.runtime import pins
from lokg.runtime.contract import DOOMED_FILE, Store, StoreError
from lokg.runtime.query import Runtime
from lokg.testing.stores import make_store
from lokg.testing.stores import publish_stage_tables as _publish
from lokg.testing.stores import stage_tables as _stage_tables


def _assert_current_verifies(store: Store) -> str:
    current = store.current_id()
    store.build(current, verify=True)
    return current


def test_a_publisher_paused_before_its_swap_holds_off_the_other(tmp_path):
    """Item 2's interleaving: A paused between rename and CURRENT swap while B publishes."""
    store = Store(tmp_path / "store")
    _publish(store, tmp_path, "b0")
    paused, resume = threading.Event(), threading.Event()

    def pause(step: str) -> None:
        if step == "renamed":
            paused.set()
            assert resume.wait(30)

    a = threading.Thread(target=_publish, args=(store, tmp_path, "a"),
                         kwargs={"hook": pause, "keep": 0})
    a.start()
    assert paused.wait(30)
    outcome = {}

    def publish_b():
        try:
            _publish(store, tmp_path, "b", keep=0)
            outcome["b"] = "published"
        except StoreError as exc:
            outcome["b"] = str(exc)

    b = threading.Thread(target=publish_b)
    b.start()
    b.join(timeout=1.0)
    assert b.is_alive(), "B finished while A held the store lock"
    assert store.current_id() == "b0"
    resume.set()
    a.join(timeout=30)
    b.join(timeout=30)
    assert "CURRENT moved from b0 to a" in outcome["b"]
    assert _assert_current_verifies(store) == "a"
    assert store.build_ids() == ["a"]  # b0 went to retention (keep=0); b never assembled


def _publish_in_process(root: str, build_id: str, barrier, results) -> None:
    tables = _stage_tables(Path(root).parent / f"stage-{build_id}")
    barrier.wait()
    try:
        Store(root).publish(build_id, tables, keep=0)
        results[build_id] = "ok"
    except StoreError as exc:
        results[build_id] = str(exc)


def test_two_processes_publishing_at_once(tmp_path):
    root = str(tmp_path / "store")
    _publish(Store(root), tmp_path, "b0")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier, results = manager.Barrier(2), manager.dict()
        procs = [ctx.Process(target=_publish_in_process, args=(root, b, barrier, results))
                 for b in ("p1", "p2")]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=120)
        results = dict(results)
    assert all(proc.exitcode == 0 for proc in procs)
    won = sorted(b for b, r in results.items() if r == "ok")
    assert won, results
    for build_id, result in results.items():  # a loser says why, never silently
        assert result == "ok" or "CURRENT moved" in result
    current = _assert_current_verifies(Store(root))
    assert current in won and current in Store(root).build_ids()


def test_an_open_runtime_pins_its_build_against_retention(tmp_path):
    make_store(tmp_path, build_id="b1")
    root = tmp_path / "store"
    runtime = Runtime.open(root)
    make_store(tmp_path, build_id="b2")
    Store(root).collect_garbage(keep=0)
    assert "b1" in Store(root).build_ids()  # pinned: kept although keep=0
    assert runtime.ask("Where is Ada Brook?", llm="none").answers
    runtime.close()
    assert Store(root).collect_garbage(keep=0) == ["b1"]
    assert Store(root).build_ids() == ["b2"]
    assert not pins.pins_dir(root, "b1").exists()


def test_pins_of_dead_processes_and_expired_heartbeats_do_not_protect(tmp_path):
    store = Store(tmp_path / "store")
    for b in ("b1", "b2"):
        _publish(store, tmp_path, b)
    held = pins.pins_dir(store.root, "b1")
    held.mkdir(parents=True)
    dead = held / f"{pins._HOST}-{2 ** 22 + 12345}-dead"  # above pid_max: no such process
    elsewhere = held / "otherhost-1-beat"
    dead.touch()
    elsewhere.touch()
    assert pins.live_pins(store.root, "b1") == [elsewhere]  # the dead one is removed
    old = os.stat(elsewhere).st_mtime - pins.PIN_TTL_S - 1
    os.utime(elsewhere, (old, old))
    assert store.collect_garbage(keep=0) == ["b1"]


def test_a_reader_pinning_a_build_retention_is_deleting_is_refused(tmp_path):
    store = Store(tmp_path / "store")
    _publish(store, tmp_path, "b1")
    _publish(store, tmp_path, "b2")
    (store.builds_dir / "b1" / DOOMED_FILE).touch()  # retention between tombstone and delete
    with pytest.raises(StoreError, match="b1' does not exist"):
        Runtime.open(store.root, build_id="b1")
    assert not pins.live_pins(store.root, "b1")


@pytest.mark.parametrize("bad", ["../../other/builds/b1", "/abs/b1", ".hidden", "", "a b"])
def test_build_ids_that_are_paths_are_refused_everywhere(tmp_path, bad):
    store = Store(tmp_path / "store")
    _publish(store, tmp_path, "b1")
    for action in (lambda: store.rollback(bad), lambda: store.build(bad),
                   lambda: store.publish(bad, _stage_tables(tmp_path / "s"))):
        with pytest.raises(StoreError, match="is not a build id"):
            action()
    (store.root / "CURRENT").write_text(bad + "\n")
    if bad:
        with pytest.raises(StoreError, match="CURRENT.*is not a build id"):
            store.current_id()


def test_negative_keep_is_refused_before_anything_is_deleted(tmp_path):
    store = Store(tmp_path / "store")
    for b in ("b1", "b2", "b3"):
        _publish(store, tmp_path, b)
    with pytest.raises(StoreError, match="keep: -1 must be an integer >= 0"):
        store.collect_garbage(keep=-1)
    with pytest.raises(StoreError, match="keep"):
        _publish(store, tmp_path, "b4", keep=-1)
    assert store.build_ids() == ["b1", "b2", "b3"] and store.current_id() == "b3"


def test_a_held_lock_times_out_naming_its_holder(tmp_path):
    store = Store(tmp_path / "store")
    _publish(store, tmp_path, "b1")
    with store.locked("publish of x"):
        other = Store(store.root)
        with pytest.raises(StoreError, match=r"locked by publish of x \(pid"):
            with other.locked("rollback", timeout=0.2):
                pass


def test_store_gc_keep_runs_retention_around_a_pinned_build(tmp_path):
    from click.testing import CliRunner

    from lokg.runtime.cli import cli

    store = Store(tmp_path / "store")
    for b in ("b1", "b2", "b3"):
        _publish(store, tmp_path, b)
    held = store.pin("b1")
    result = CliRunner().invoke(cli, ["store", "gc", "--keep", "0", "--store", str(store.root)])
    assert result.exit_code == 0, result.output
    assert "removed build b2" in result.output and "1 build removed by retention" in result.output
    assert store.build_ids() == ["b1", "b3"]
    pins.release(held)
    bad = CliRunner().invoke(cli, ["store", "gc", "--keep", "-1", "--store", str(store.root)])
    assert bad.exit_code == 2 and "-1" in bad.output


def test_rollback_and_retention_of_a_missing_store_create_nothing(tmp_path):
    missing = Store(tmp_path / "nowhere")
    for action in (lambda: missing.rollback("b1"), lambda: missing.collect_garbage(keep=1)):
        with pytest.raises(StoreError, match="store root does not exist"):
            action()
    assert not (tmp_path / "nowhere").exists()

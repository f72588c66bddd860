"""The Airflow DAGs, run by Airflow itself from its own venv (.venv-airflow).

* integrity: both DAG files parse without errors and quickly, import nothing heavy, and every
  task has an owner, retries with backoff; lokg_build has one task per pipeline stage in
  ``pipeline.registry.STAGES`` order, training stages on the ``gpu`` queue and pool;
* CI: ``airflow dags test lokg_build`` runs every stage on a tiny synthetic dump, re-running one
  finished task with ``airflow tasks test`` replaces only its own staging directory, and the
  publish gives a build ``lokg store verify`` accepts; the next run, on the dump edited as a
  new version, refreshes from that build (ingest and entity_encode partial) and publishes;
* slow: the DAG killed mid-way and run again — CURRENT never names an incomplete build, the
  resumed run publishes and records the store's Asset event; ``lokg_evaluate``: the publish's
  Asset event triggers it under a real scheduler and the new build passes the floor; a
  deliberately broken build (GAT attention all zero, then the later stages and publish re-run by
  Airflow) is stopped by the same floor and the store rolled back.

Each Airflow command gets a fresh AIRFLOW_HOME (SQLite) built from infra/airflow/env.sh.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lokg.pipeline.registry import STAGE_NAMES, STAGES
from lokg.runtime.config import DEFAULT_BUDGET
from lokg.common.dumps import FORMATS
from lokg.testing.builds import FAST
from lokg.testing.serving import free_port

REPO = Path(__file__).resolve().parents[1]
AIRFLOW_VENV = REPO / ".venv-airflow" / "bin"
LOKG = Path(sys.executable).parent / "lokg"

pytestmark = pytest.mark.skipif(not (AIRFLOW_VENV / "airflow").exists(),
                                reason=".venv-airflow missing (make setup)")

#: The quality floor of the tests: measured H@1 (40 questions, reader none) is 0.10 for a build
#: of this dump with FAST and 0.00 when the GAT attention is all zero.
FLOOR = {"H@1": 0.05}
SEED = 3


def airflow_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment ``infra/airflow/env.sh`` exports, with its own AIRFLOW_HOME in ``home``.

    The caller's AIRFLOW_* variables are dropped first so a developer's Airflow is never touched.
    """
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("AIRFLOW", "LOKG_"))}
    clean["AIRFLOW_HOME"] = str(home)
    proc = subprocess.run(["bash", "-c", "source infra/airflow/env.sh && env -0"], cwd=REPO,
                          env=clean, capture_output=True, check=True, timeout=60)
    env = dict(item.split("=", 1) for item in proc.stdout.decode().split("\0") if "=" in item)
    env.update(LOKG_RETRY_DELAY_S="1", **extra)
    return env


def airflow(env: dict, *args: str, timeout: int = 1200, check: bool = True):
    proc = subprocess.run([str(AIRFLOW_VENV / "airflow"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode:
        raise AssertionError(f"airflow {' '.join(args)} exited {proc.returncode}:\n"
                             f"{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}")
    return proc


# ---------------------------------------------------------------------------------------------
# integrity (no metadata DB needed)

INTEGRITY = r"""
import json, sys, time
from pathlib import Path
# What a DAG processor has loaded before it parses any file: the SDK, the TaskFlow decorators
# and the Spark provider. The measured time is then the DAG file's own.
from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable, Param, chain, dag, task
task.bash
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.dag_processing.dagbag import BundleDagBag

before = set(sys.modules)
folder = Path(sys.argv[1])
bag = BundleDagBag(dag_folder=folder, bundle_path=folder, bundle_name="dags-folder")
heavy = sorted(m for m in set(sys.modules) - before
               if m.split(".")[0] in ("lokg", "pyspark", "torch", "runtime", "spark_jobs",
                                      "training", "evaluation", "pyarrow", "numpy", "pandas"))
from datetime import datetime, timezone
from types import SimpleNamespace
import lokg_build
def build_id(logical, run_id, run_after=datetime(2026, 3, 4, 5, 6, 7, tzinfo=timezone.utc)):
    return lokg_build.build_id_of(SimpleNamespace(logical_date=logical, run_id=run_id,
                                                  run_after=run_after))
jan = datetime(2026, 1, 1, tzinfo=timezone.utc)
print(json.dumps({
    "build_ids": {"jan_a": build_id(jan, "manual__a"), "jan_b": build_id(jan, "manual__b"),
                  "feb": build_id(datetime(2026, 2, 1, tzinfo=timezone.utc), "manual__a"),
                  "asset_a": build_id(None, "asset_triggered__a"),
                  "asset_b": build_id(None, "asset_triggered__b")},
    "import_errors": bag.import_errors, "heavy": heavy,
    "seconds": {Path(s.file).name: s.duration.total_seconds() for s in bag.dagbag_stats},
    "dags": {dag_id: {
        "tags": sorted(d.tags), "max_active_runs": d.max_active_runs,
        "timetable": type(d.timetable).__name__, "params": sorted(d.params.keys()),
        "tasks": [{"id": t.task_id, "type": type(t).__name__, "owner": t.owner,
                   "retries": t.retries, "backoff": t.retry_exponential_backoff,
                   "queue": t.queue, "pool": t.pool, "upstream": sorted(t.upstream_task_ids),
                   "application": getattr(t, "application", None),
                   "spark_binary": getattr(t, "_spark_binary", None)}
                  for t in d.topological_sort()]}
        for dag_id, d in bag.dags.items()},
}))
"""


@pytest.fixture(scope="module")
def integrity(tmp_path_factory) -> dict:
    env = airflow_env(tmp_path_factory.mktemp("airflow-home"))
    proc = subprocess.run([str(AIRFLOW_VENV / "python"), "-c", INTEGRITY, str(REPO / "dags")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_dags_import_quickly_without_errors_or_heavy_modules(integrity):
    assert integrity["import_errors"] == {}
    assert set(integrity["dags"]) == {"lokg_build", "lokg_evaluate"}
    assert integrity["heavy"] == []
    assert set(integrity["seconds"]) == {"lokg_build.py", "lokg_evaluate.py"}
    slow = {f: s for f, s in integrity["seconds"].items() if s >= 2.0}
    assert not slow, f"DAG files took >= 2 s to import: {slow}"


def test_every_task_has_owner_retries_and_backoff(integrity):
    for dag_id, dag in integrity["dags"].items():
        assert dag["tags"] and "lokg" in dag["tags"], dag_id
        assert dag["max_active_runs"] == 1, dag_id
        for t in dag["tasks"]:
            assert t["owner"] == "lokg", (dag_id, t["id"])
            assert t["retries"] >= 2 and t["backoff"] > 0, (dag_id, t["id"])


def test_build_dag_has_one_task_per_stage_in_pipeline_order(integrity):
    dag = integrity["dags"]["lokg_build"]
    assert dag["timetable"] == "AssetOrTimeSchedule"
    assert {"dump", "format", "store", "full", "overrides", "validation_budget"} <= set(dag["params"])
    tasks = {t["id"]: t for t in dag["tasks"]}
    order = ["plan", *STAGE_NAMES, "publish"]
    assert [t["id"] for t in dag["tasks"]] == order
    for before, after in zip(order, order[1:]):
        assert before in tasks[after]["upstream"], f"{after} does not wait for {before}"
    for s in STAGES:
        t = tasks[s.name]
        if s.package == "spark_jobs":
            assert t["type"] == "SparkSubmitOperator"
            assert Path(t["application"]) == REPO / "pipeline" / "stage_launcher.py"
            assert Path(t["spark_binary"]) == REPO / ".venv" / "bin" / "spark-submit"
            assert (t["queue"], t["pool"]) == ("default", "default_pool")
        elif s.package == "training":
            assert (t["queue"], t["pool"]) == ("gpu", "gpu"), s.name
        else:  # the document stages need no GPU
            assert (t["queue"], t["pool"]) == ("default", "default_pool"), s.name


def test_evaluate_dag_is_scheduled_on_the_store_asset(integrity):
    dag = integrity["dags"]["lokg_evaluate"]
    assert dag["timetable"] == "AssetTriggeredTimetable"
    assert [t["id"] for t in dag["tasks"]] == ["target", "evaluate", "gate"]
    assert {"command", "floor", "method"} <= set(dag["params"])


def test_build_id_is_fixed_per_run_and_sorts_by_date(integrity):
    ids = integrity["build_ids"]
    pattern = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$")  # runtime.contract.new_build_id's form
    assert all(pattern.match(b) for b in ids.values()), ids
    # keyed by the logical date when there is one: a second run for that date resumes its build
    assert ids["jan_a"] == ids["jan_b"] and ids["jan_a"].startswith("20260101T000000Z-")
    assert ids["jan_a"] < ids["feb"]
    # runs without one (asset-triggered, manual) are keyed by run id, stamped with run_after
    assert ids["asset_a"] != ids["asset_b"]
    assert ids["asset_a"].startswith("20260304T050607Z-")


def test_stage_table_is_the_registry_imported_without_the_project(tmp_path):
    """The DAGs import pipeline/registry.py itself; it must import nothing (no numpy, no
    runtime) so that the Airflow venv, which has neither, parses the DAGs."""
    code = ("import sys; sys.path.insert(0, 'dags'); import lokg_common as lc; "
            "import lokg_stage_table as r; assert lc.STAGES is r.STAGES; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('lokg', 'numpy')))")
    proc = subprocess.run([str(AIRFLOW_VENV / "python"), "-c", code], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    sys.path.insert(0, str(REPO / "dags"))
    try:
        import lokg_common as lc
    finally:
        sys.path.remove(str(REPO / "dags"))
    kinds = [s.kind for s in lc.STAGES]
    assert (kinds.count("spark"), kinds.count("train"), kinds.count("python")) == (6, 4, 4)
    assert lc.DEFAULT_BUDGET == DEFAULT_BUDGET
    assert lc.FORMATS == FORMATS
    assert lc.current_build(str(tmp_path)) is None
    (tmp_path / "CURRENT").write_text("20260101T000000Z-abcdef\n")
    assert lc.current_build(str(tmp_path)) == "20260101T000000Z-abcdef"


# ---------------------------------------------------------------------------------------------
# lokg_build through `airflow dags test`: the CI run on a tiny dump


def stage_files(staging: Path) -> dict[str, dict[str, tuple[int, int]]]:
    """Stage → {relative file: (size, mtime_ns)} of a build's staging directory."""
    return {d.name: {str(f.relative_to(d)): (f.stat().st_size, f.stat().st_mtime_ns)
                     for f in sorted(d.rglob("*")) if f.is_file()}
            for d in sorted(staging.iterdir()) if d.is_dir()}


def airflow_project(root: Path, **extra: str) -> dict[str, str]:
    """A synthetic dump's Airflow set-up under ``root``: env (store, dump, reports), DB, pool."""
    env = airflow_env(root / "airflow-home", LOKG_STORE=str(root / "store"),
                      LOKG_DUMP=str(root / "dump"), LOKG_REPORTS=str(root / "reports"), **extra)
    subprocess.run(["bash", str(REPO / "infra" / "airflow" / "init.sh")], cwd=REPO, env=env,
                   check=True, capture_output=True, timeout=300)
    return env


def build_conf(root: Path, full: bool = False) -> str:
    """The lokg_build conf; ``full`` rebuilds every stage even though a previous build exists
    (an unchanged dump would otherwise be a refresh that reuses every stage's outputs)."""
    return json.dumps({"dump": str(root / "dump"), "store": str(root / "store"),
                       "format": "synth", "overrides": FAST, "full": full})


def verify(store: Path, build_id: str) -> None:
    proc = subprocess.run([str(LOKG), "store", "verify", build_id, "--store", str(store)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"ok: build {build_id}" in proc.stdout


#: The stage the CI run re-runs on its own: a cheap one with stages before and after it.
RERUN = "transe"
#: JVM flags for the CI run's Spark stages, jobs of seconds on a tiny dump where the JIT's
#: warm-up dominates: the C1 compiler only and the serial GC halve each spark-submit's CPU time.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def quick_spark_properties(root: Path) -> Path:
    """infra/spark/spark-defaults.conf plus QUICK_JVM for the driver (local[2]: it runs all)."""
    path = root / "spark-defaults.conf"
    path.write_text((REPO / "infra" / "spark" / "spark-defaults.conf").read_text()
                    + f"spark.driver.extraJavaOptions        {QUICK_JVM}\n")
    return path


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    """One lokg_build run on a tiny dump, the way CI runs it.

    ``airflow dags test`` runs every stage with the publish held back (marked success), one
    finished task is re-run with ``airflow tasks test``, then ``airflow dags test`` for the same
    date publishes with the stages marked success: the staged build is published as it stands.
    """
    from lokg.pipeline.synth import generate

    root = tmp_path_factory.mktemp("dagci")
    generate(root / "dump", n_triples=300, seed=SEED, n_questions=5)
    env = airflow_project(root, LOKG_SPARK_PROPERTIES=str(quick_spark_properties(root)))
    date, store, conf = "2026-01-01T00:00:00+00:00", root / "store", build_conf(root)
    seconds: dict[str, float] = {}

    started = time.perf_counter()
    airflow(env, "dags", "test", "lokg_build", date, "--conf", conf,
            "--mark-success-pattern", "publish")
    seconds["stages"] = time.perf_counter() - started
    (build_id,) = [p.name for p in (store / "staging").iterdir()]
    before = stage_files(store / "staging" / build_id)

    started = time.perf_counter()
    airflow(env, "tasks", "test", "lokg_build", RERUN, date)
    seconds["rerun"] = time.perf_counter() - started
    after = stage_files(store / "staging" / build_id)

    started = time.perf_counter()
    airflow(env, "dags", "test", "lokg_build", date, "--conf", conf,
            "--mark-success-pattern", "|".join(map(re.escape, STAGE_NAMES)))
    seconds["publish"] = time.perf_counter() - started
    print(f"lokg_build CI run (s): {json.dumps({k: round(v, 1) for k, v in seconds.items()})}")
    return {"store": store, "build_id": build_id, "before": before, "after": after,
            "root": root, "env": env}


def test_dags_test_publishes_a_verified_store(ci_run):
    store, build_id = ci_run["store"], ci_run["build_id"]
    assert (store / "CURRENT").read_text().strip() == build_id
    assert build_id.startswith("20260101T000000Z-")
    verify(store, build_id)
    manifest = json.loads((store / "builds" / build_id / "manifest.json").read_text())
    assert set(manifest["report"]["stages"]) == set(STAGE_NAMES)
    assert manifest["config"]["transe"]["epochs"] == 2
    assert manifest["config"]["ingest"]["format"] == "synth"
    assert any(s["path"].endswith("kg.nt") for s in manifest["sources"])
    assert list((store / "staging").iterdir()) == []  # publish removed the staged build


def test_rerunning_one_task_replaces_only_its_own_output(ci_run):
    before, after = ci_run["before"], ci_run["after"]
    assert set(before) == set(after) == set(STAGE_NAMES)
    assert after[RERUN] != before[RERUN]  # rewritten: new mtimes
    assert set(after[RERUN]) == set(before[RERUN])
    for stage in set(STAGE_NAMES) - {RERUN}:
        assert after[stage] == before[stage], f"re-running {RERUN} touched {stage}"


@pytest.fixture(scope="module")
def ci_refresh(ci_run):
    """The next lokg_build run after the CI run, on its dump edited as a new version would be
    (edges removed and added, a new entity): a refresh from the CI run's build. It runs on a
    copy of that store, whose CURRENT the tests above check."""
    from lokg.pipeline.dump_edit import edit_synth_dump

    root, store = ci_run["root"], ci_run["root"] / "refresh-store"
    shutil.copytree(ci_run["store"], store)
    edit_synth_dump(root / "dump", root / "dump2", remove_edges=4, add_edges=4, new_entities=1,
                    seed=SEED)
    conf = json.dumps({"dump": str(root / "dump2"), "store": str(store), "format": "synth",
                       "overrides": FAST})
    started = time.perf_counter()
    airflow(ci_run["env"], "dags", "test", "lokg_build", "2026-01-02T00:00:00+00:00",
            "--conf", conf)
    print(f"lokg_build CI refresh run: {time.perf_counter() - started:.1f} s")
    return store


def test_the_next_run_refreshes_from_the_previous_build_and_publishes(ci_run, ci_refresh):
    first, store = ci_run["build_id"], ci_refresh
    current = (store / "CURRENT").read_text().strip()
    assert current != first and current.startswith("20260102T000000Z-")
    verify(store, current)
    manifest = json.loads((store / "builds" / current / "manifest.json").read_text())
    refresh = manifest["report"]["refresh"]
    assert refresh["base"] == first
    assert refresh["stages"]["ingest"] == refresh["stages"]["entity_encode"] == "partial"
    assert set(refresh["stages"]) == set(STAGE_NAMES)
    assert (refresh["changes"]["removed_triples"], refresh["changes"]["added_entities"]) == (4, 1)
    shown = subprocess.run([str(LOKG), "store", "show", "--store", str(store)],
                           capture_output=True, text=True, timeout=300)
    assert f"refresh: from build {first}" in shown.stdout, shown.stdout + shown.stderr
    assert "removed triples 4" in shown.stdout


# ---------------------------------------------------------------------------------------------
# lokg_build killed mid-way and run again (slow)


def process_tree(pid: int) -> list[int]:
    """A process and all its descendants, parents first."""
    ps = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True, check=True)
    children: dict[int, list[int]] = {}
    for line in ps.stdout.splitlines():
        child, parent = map(int, line.split())
        children.setdefault(parent, []).append(child)
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop(0))
        todo.extend(children.get(tree[-1], []))
    return tree


def signal_all(pids: list[int], *signals: signal.Signals) -> None:
    for sig in signals:
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass


def kill_tree(pid: int) -> None:
    """SIGKILL a process and all its descendants, as when the worker machine dies.

    Not just the process group: Airflow starts each bash task in a session of its own, which
    would survive a group kill and go on writing into the staging directory.
    """
    signal_all(process_tree(pid), signal.SIGSTOP, signal.SIGKILL)  # stopped first: no forks


class CurrentWatcher(threading.Thread):
    """Polls CURRENT; records every build id it names whose build directory is not complete."""

    def __init__(self, store: Path):
        super().__init__(daemon=True)
        self.store, self.seen, self.incomplete = store, set(), []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            current = self.store / "CURRENT"
            if current.is_file():
                build_id = current.read_text().strip()
                self.seen.add(build_id)
                if not (self.store / "builds" / build_id / "manifest.json").is_file():
                    self.incomplete.append(build_id)
            time.sleep(0.05)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Two builds of one synthetic dump through `airflow dags test lokg_build`.

    Build 1 runs straight through. Build 2 (another logical date) is killed while
    ``transe`` runs, and the DAG is run again for the same date, which works in the same
    staging directory and publishes — with lokg_evaluate unpaused, so that this publish queues
    an Asset-triggered run of it.
    """
    from lokg.pipeline.synth import generate

    root = tmp_path_factory.mktemp("dagtest")
    dump, store = root / "dump", root / "store"
    generate(dump, n_triples=2000, seed=SEED, n_questions=40)
    env = airflow_project(root, LOKG_EVAL_FLOOR=json.dumps(FLOOR))
    conf = build_conf(root, full=True)  # build 2 must run transe, not reuse build 1's
    watcher = CurrentWatcher(store)
    watcher.start()
    timings = {}

    started = time.perf_counter()
    airflow(env, "dags", "test", "lokg_build", "2026-01-01T00:00:00+00:00", "--conf", conf)
    timings["full_run"] = time.perf_counter() - started
    first = (store / "CURRENT").read_text().strip()

    # Build 2: kill `dags test` and every process under it while transe writes.
    date2 = "2026-01-08T00:00:00+00:00"
    proc = subprocess.Popen([str(AIRFLOW_VENV / "airflow"), "dags", "test", "lokg_build", date2,
                             "--conf", conf], cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    staging = store / "staging"
    deadline = time.monotonic() + 1200
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if list(staging.glob("*/.transe.tmp-*")):
                break
            time.sleep(0.5)
    finally:
        kill_tree(proc.pid)
        proc.wait(timeout=60)
    (second,) = [p.name for p in staging.iterdir()]
    killed = {"current": (store / "CURRENT").read_text().strip(),
              "builds": sorted(p.name for p in (store / "builds").iterdir()),
              "staged": sorted(p.name for p in (staging / second).iterdir())}

    # From now on a publish queues an lokg_evaluate run (DAGs are created paused).
    airflow(env, "dags", "unpause", "lokg_evaluate")
    started = time.perf_counter()
    airflow(env, "dags", "test", "lokg_build", date2, "--conf", conf)
    timings["resumed_run"] = time.perf_counter() - started
    watcher.done.set()
    watcher.join()
    print(f"lokg_build timings (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
    return {"root": root, "env": env, "store": store, "dump": dump, "first": first,
            "second": second, "killed": killed, "watcher": watcher}


@pytest.mark.slow
def test_killed_run_never_makes_current_incomplete_and_resumes(built):
    store, first, second = built["store"], built["first"], built["second"]
    killed = built["killed"]
    assert killed["current"] == first and killed["builds"] == [first]
    # stages before transe finished; transe's attempt is only a hidden directory
    before = sorted(STAGE_NAMES[:STAGE_NAMES.index("transe")])
    assert [s for s in killed["staged"] if not s.startswith(".")] == before
    assert [s for s in killed["staged"] if s.startswith(".transe.tmp-")]
    assert built["watcher"].incomplete == []
    assert built["watcher"].seen == {first, second}
    assert (store / "CURRENT").read_text().strip() == second != first
    assert second.startswith("20260108T000000Z-") and first.startswith("20260101T000000Z-")
    for build_id in (first, second):
        verify(store, build_id)


@pytest.mark.slow
def test_publish_emits_the_store_asset_with_the_build_id(built):
    script = ("from airflow.utils.session import create_session\n"
              "from airflow.models.asset import AssetEvent, AssetModel\n"
              "from sqlalchemy import select\n"
              "import json\n"
              "with create_session() as s:\n"
              "    rows = s.execute(select(AssetModel.uri, AssetEvent.extra, AssetEvent.source_task_id)"
              ".join(AssetModel, AssetEvent.asset_id == AssetModel.id)).all()\n"
              "print(json.dumps([list(r) for r in rows]))\n")
    proc = subprocess.run([str(AIRFLOW_VENV / "python"), "-c", script], cwd=REPO,
                          env=built["env"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = json.loads(proc.stdout.strip().splitlines()[-1])
    store_events = [(extra, task) for uri, extra, task in events if uri == "lokg://store/default"]
    assert [e["build_id"] for e, _ in store_events] == [built["first"], built["second"]]
    assert all(task == "publish" for _, task in store_events)
    last = store_events[-1][0]
    assert last["previous_build_id"] == built["first"]
    assert last["store"] == str(built["store"]) and last["dump"] == str(built["dump"])


# ---------------------------------------------------------------------------------------------
# lokg_evaluate: triggered by the Asset under a real scheduler; the floor stops a broken build


def lokg_eval_available() -> bool:
    return subprocess.run([str(LOKG), "eval", "--help"], capture_output=True,
                          timeout=120).returncode == 0


def eval_runs(home: Path) -> list[tuple[str, str, str]]:
    """(run_id, run_type, state) of lokg_evaluate's runs, read from the SQLite metadata DB."""
    import sqlite3

    with sqlite3.connect(home / "airflow.db") as db:
        return db.execute("SELECT run_id, run_type, state FROM dag_run "
                          "WHERE dag_id = 'lokg_evaluate'").fetchall()


@pytest.fixture(scope="module")
def triggered(built):
    """Run the API server and the scheduler until the Asset-triggered lokg_evaluate run ends.

    Started after the builds: a scheduler next to ``airflow dags test`` would also pick up the
    test's lokg_build run.
    """
    if not lokg_eval_available():
        pytest.skip("`lokg eval` is not available yet")
    port = free_port()
    env = {**built["env"], "AIRFLOW__API__PORT": str(port),
           "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/"}
    home = Path(env["AIRFLOW_HOME"])
    procs = [subprocess.Popen([str(AIRFLOW_VENV / "airflow"), *cmd], cwd=REPO, env=env,
                              start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
             for cmd, log in ((["api-server", "--port", str(port)], open(home / "api.log", "w")),
                              (["scheduler"], open(home / "scheduler.log", "w")))]
    try:
        deadline = time.monotonic() + 1500
        while time.monotonic() < deadline:
            runs = [r for r in eval_runs(home) if r[1] == "asset_triggered"]
            if runs and all(state in ("success", "failed") for _, _, state in runs):
                break
            time.sleep(2)
    finally:  # TERM for a clean shutdown, then KILL whatever is left (task processes too)
        trees = [process_tree(proc.pid) for proc in procs]
        for tree in trees:
            signal_all(tree[:1], signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        for tree in trees:
            signal_all(tree, signal.SIGKILL)
        for proc in procs:
            proc.wait(timeout=60)
    return runs


@pytest.mark.slow
def test_publish_triggers_lokg_evaluate_and_the_build_passes(built, triggered):
    assert len(triggered) == 1 and triggered[0][2] == "success", triggered
    summary = built["root"] / "reports" / "eval" / built["second"] / "summary.json"
    scores = json.loads(summary.read_text())["lokg"]
    assert scores["n"] == 40 and scores["H@1"] >= FLOOR["H@1"]
    assert (built["store"] / "CURRENT").read_text().strip() == built["second"]


@pytest.mark.slow
def test_floor_stops_a_build_with_zero_attention(built, triggered):
    """Build 3 runs to gat, its attention is zeroed, then Airflow re-runs the later stages
    and publish; lokg_evaluate on it fails and puts build 2 back."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    env, store = built["env"], built["store"]
    date3 = "2026-01-15T00:00:00+00:00"
    later = [*STAGE_NAMES[STAGE_NAMES.index("gat") + 1:], "publish"]
    airflow(env, "dags", "test", "lokg_build", date3, "--conf",
            build_conf(built["root"], full=True), "--mark-success-pattern", "|".join(later))
    (third,) = [p.name for p in (store / "staging").iterdir() if p.name.startswith("20260115")]
    edges = store / "staging" / third / "gat" / "edges.parquet"
    for part in [edges] if edges.is_file() else sorted(edges.rglob("*.parquet")):
        table = pq.read_table(part)
        i = table.schema.get_field_index("attention")
        field = table.schema.field(i)
        pq.write_table(table.set_column(i, field, pa.array([0.0] * table.num_rows, field.type)),
                       part)
    for task_id in later:
        airflow(env, "tasks", "test", "lokg_build", task_id, date3)
    assert (store / "CURRENT").read_text().strip() == third

    judged = json.dumps({"store": str(store), "build_id": third, "dump": str(built["dump"]),
                         "previous_build_id": built["second"]})
    proc = airflow(env, "dags", "test", "lokg_evaluate", "--conf", judged, check=False)
    assert proc.returncode != 0
    assert f"build {third} is below the quality floor (H@1=0 < 0.05)" in proc.stdout + proc.stderr
    assert f"store rolled back to {built['second']}" in proc.stdout + proc.stderr
    assert (store / "CURRENT").read_text().strip() == built["second"]


# ---------------------------------------------------------------------------------------------
# the scheduled refresh takes the feedback in (slow: two lokg_build runs)


@pytest.mark.slow
def test_refresh_with_feedback_publishes_a_build_answering_an_unanswerable_question(tmp_path):
    """Run 1 builds a synthetic dump with one question-answering edge withheld (stated only
    in its linked documents); the question's sub-question goes into the store's feedback log
    (with a malformed segment beside it); run 2, the next scheduled refresh, publishes a build
    that answers the question, the new edge's lineage naming the feedback record."""
    from lokg.pipeline.synth import generate, labelled_overrides
    from lokg.runtime.contract import Store
    from lokg.runtime.feedback import log_dir, read_log
    from lokg.testing.builds import REFRESH_FAST as REFRESH
    from lokg.testing.builds import answers, withheld_question

    dump, store = tmp_path / "dump", tmp_path / "store"
    generate(dump, n_triples=300, seed=SEED, n_questions=40, withhold=1)
    edge, question = withheld_question(dump)
    env = airflow_project(tmp_path, LOKG_SPARK_PROPERTIES=str(quick_spark_properties(tmp_path)))
    conf = json.dumps({"dump": str(dump), "store": str(store), "format": "synth",
                       "overrides": [*FAST, *REFRESH[1:], *labelled_overrides(dump)]})
    airflow(env, "dags", "test", "lokg_build", "2026-01-04T03:00:00+00:00", "--conf", conf)
    # the runtime's own record of the gap: the chain stop alone (no question passages)
    assert question["answers"][0] not in answers(store, question["question"], feedback_passages=0)
    (logged,) = read_log(log_dir(store)).records
    assert [(m["entity"], m["relation"]) for m in logged["missing"]] == \
        [(edge["s"], edge["relation"])]
    (log_dir(store) / "0000000000000-0-h-1-bad.log").write_bytes(b"torn{")
    airflow(env, "dags", "test", "lokg_build", "2026-01-11T03:00:00+00:00", "--conf", conf)
    assert answers(store, question["question"], feedback_passages=0)[:1] == question["answers"]
    built = Store(store).build()
    stages = built.manifest["report"]["stages"]
    assert stages["feedback_enrich"]["skipped_log_lines"] == 1
    assert stages["ingest"]["feedback_edges_added"] == 1
    (lineage,) = built.read("feedback_lineage").to_pylist()
    assert read_log(log_dir(store)).records == [logged]  # answered now: nothing more logged
    assert (lineage["feedback_id"], lineage["delta_id"]) == \
        (logged["id"], stages["feedback_enrich"]["from_build"])

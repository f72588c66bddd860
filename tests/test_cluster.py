"""infra/cluster.sh: a real Spark standalone cluster on loopback, and the Spark stages on it.

The cluster (one master, two workers) is started from the project venv's pyspark on free ports
in a temporary directory and stopped by process group at the end. The comparison test runs every
Spark stage of a small synthetic build with ``spark-submit`` twice — ``--master local[2]`` and
``--master spark://127.0.0.1:PORT`` — and requires equal row sets for every Parquet output.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.driver import stage_script
from pipeline.registry import STAGES
from tests.test_dags import FAST  # small models, few partitions

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "infra" / "cluster.sh"
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"

pytestmark = pytest.mark.spark


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_cmd(env: dict, action: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(CLUSTER), action], env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A running cluster: (master URL, its env); stopped afterwards, every daemon checked dead."""
    if not SPARK_SUBMIT.exists():
        pytest.skip("spark-submit not found in the project venv")
    env = {**os.environ, "LOKG_CLUSTER_DIR": str(tmp_path_factory.mktemp("cluster")),
           "LOKG_MASTER_PORT": str(free_port()), "LOKG_MASTER_UI_PORT": str(free_port())}
    started = cluster_cmd(env, "start")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield f"spark://127.0.0.1:{env['LOKG_MASTER_PORT']}", env
    finally:
        pids = [int(p.read_text()) for p in Path(env["LOKG_CLUSTER_DIR"], "pids").glob("*.pid")]
        stopped = cluster_cmd(env, "stop", timeout=120)
        assert stopped.returncode == 0, stopped.stderr
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)


def test_cluster_has_a_master_and_two_alive_workers(cluster):
    master, env = cluster
    status = cluster_cmd(env, "status")
    assert status.returncode == 0, status.stdout
    assert f"master {master}" in status.stdout
    assert status.stdout.count("running pid") == 3
    ui = f"http://127.0.0.1:{env['LOKG_MASTER_UI_PORT']}/json/"
    with urllib.request.urlopen(ui, timeout=30) as resp:
        state = json.load(resp)
    assert state["url"] == master and state["status"] == "ALIVE"
    alive = [w for w in state["workers"] if w["state"] == "ALIVE"]
    assert len(alive) == 2 and all(w["host"] == "127.0.0.1" for w in alive)


def test_start_twice_keeps_the_running_daemons(cluster):
    _, env = cluster
    pids = sorted(p.read_text() for p in Path(env["LOKG_CLUSTER_DIR"], "pids").glob("*.pid"))
    again = cluster_cmd(env, "start")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("already running") == 3
    assert sorted(p.read_text() for p in Path(env["LOKG_CLUSTER_DIR"], "pids").glob("*.pid")) == pids


def submit(stage: str, master: str, store: Path, build_id: str, dump: Path, env: dict) -> dict:
    """``spark-submit`` one stage against ``master``, the way lokg_build's tasks do."""
    proc = subprocess.run(
        [str(SPARK_SUBMIT), "--master", master,
         "--properties-file", str(REPO / "infra" / "spark" / "spark-defaults.conf"),
         str(stage_script(stage)), "--store", str(store), "--build-id", build_id,
         "--dump", str(dump), "--set", "ingest.format=synth",
         *[arg for kv in FAST for arg in ("--set", kv)]],
        cwd=store.parent, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"{stage} on {master}:\n{proc.stderr[-4000:]}"
    return json.loads((store / "staging" / build_id / stage / "_stage.json").read_text())


def row_set(path: Path) -> list[str]:
    """A Parquet table (file or Spark dataset directory) as its sorted rows, JSON-encoded."""
    rows = pq.read_table(path).to_pylist()
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def parquet_outputs(record: dict) -> dict[str, Path]:
    out = {}
    for name, path in record["outputs"].items():
        p = Path(path)
        if p.suffix == ".parquet" or (p.is_dir() and any(p.glob("*.parquet"))):
            out[name] = p
    return out


@pytest.mark.slow
def test_spark_stages_on_the_cluster_equal_local(cluster, tmp_path):
    """Every Spark stage gives the same tables on spark:// as on local[2].

    The non-Spark stages run once (local build) and their staging directory is shared with the
    cluster build, so every difference would come from Spark.
    """
    from pipeline.synth import generate

    master, _ = cluster
    dump, store = tmp_path / "dump", tmp_path / "store"
    generate(dump, n_triples=2000, seed=5, n_questions=10)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    compared = []
    for stage, module in ((s.name, s.module) for s in STAGES):
        if module.startswith("spark_jobs."):
            local = submit(stage, "local[2]", store, "local", dump, env)
            remote = submit(stage, master, store, "cluster", dump, env)
            assert set(parquet_outputs(local)) == set(parquet_outputs(remote)), stage
            for name, path in parquet_outputs(local).items():
                other = parquet_outputs(remote)[name]
                assert other != path
                assert row_set(path) == row_set(other), f"{stage}: {name} differs"
                compared.append(f"{stage}.{name}")
        else:
            proc = subprocess.run(
                [sys.executable, "-m", module, "--store", str(store), "--build-id", "local",
                 "--dump", str(dump), "--set", "ingest.format=synth",
                 *[arg for kv in FAST for arg in ("--set", kv)]],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
            assert proc.returncode == 0, f"{stage}:\n{proc.stderr[-4000:]}"
            shutil.copytree(store / "staging" / "local" / stage, store / "staging" / "cluster" / stage)
    spark_stages = [s.name for s in STAGES if s.kind == "spark"]
    assert {c.split(".")[0] for c in compared} == set(spark_stages)
    print(f"equal on {master} and local[2]: {', '.join(compared)}")

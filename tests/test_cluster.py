"""infra/cluster.sh: a real Spark standalone cluster on loopback, and the Spark stages on it.

The cluster (one master, two workers) is started from the project venv's pyspark on free ports
in a temporary directory and stopped by process group at the end. The comparison test runs every
Spark stage of a small synthetic build on its Spark path with ``spark-submit`` twice —
``--master local[2]`` and ``--master spark://127.0.0.1:PORT`` — and requires the same rows in
every Parquet output. ``bench/cluster_equality.py`` (whose helpers these are) does it at scale.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from bench.cluster_equality import (SPARK_SUBMIT, cluster_cmd, cluster_env, parquet_outputs,
                                    submit, table_check)
from bench.common import SPARK_PATHS
from lokg.pipeline.registry import STAGES
from lokg.testing.builds import FAST  # small models, few partitions

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A running cluster: (master URL, its env); stopped afterwards, every daemon checked dead."""
    if not SPARK_SUBMIT.exists():
        pytest.skip("spark-submit not found in the project venv")
    env = cluster_env(tmp_path_factory.mktemp("cluster"))
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


@pytest.mark.slow
def test_spark_stages_on_the_cluster_equal_local(cluster, tmp_path):
    """Every Spark stage, on its Spark path, gives the same tables on spark:// as on local[2].

    The non-Spark stages run once (local build) and their staging directory is shared with the
    cluster build, so every difference would come from Spark.
    """
    from lokg.pipeline.synth import generate

    master, _ = cluster
    dump, store = tmp_path / "dump", tmp_path / "store"
    generate(dump, n_triples=2000, seed=5, n_questions=10)
    args = ["--dump", str(dump), *[a for kv in ("ingest.format=synth", *FAST, *SPARK_PATHS)
                                   for a in ("--set", kv)]]
    compared = []
    for stage, kind in ((s.name, s.kind) for s in STAGES):
        if kind == "spark":
            local = submit(stage, "local[2]", store, "local", args)
            remote = submit(stage, master, store, "cluster", args)
            assert remote["report"].get("path", "spark") == "spark", stage
            tables = parquet_outputs(local["outputs"])
            assert set(tables) == set(parquet_outputs(remote["outputs"])), stage
            for name, path in tables.items():
                other = parquet_outputs(remote["outputs"])[name]
                assert other != path
                assert table_check(other, path)["equal"], f"{stage}: {name} differs"
                compared.append(f"{stage}.{name}")
        else:
            proc = subprocess.run(
                [sys.executable, "-m", "lokg.pipeline.stage_launcher", stage, "--store", str(store),
                 "--build-id", "local", *args],
                cwd=REPO, capture_output=True, text=True, timeout=1800)
            assert proc.returncode == 0, f"{stage}:\n{proc.stderr[-4000:]}"
            shutil.copytree(store / "staging" / "local" / stage, store / "staging" / "cluster" / stage)
    spark_stages = [s.name for s in STAGES if s.kind == "spark"]
    assert {c.split(".")[0] for c in compared} == set(spark_stages)
    print(f"equal on {master} and local[2]: {', '.join(compared)}")

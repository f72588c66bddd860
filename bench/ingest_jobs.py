"""Spark jobs, stages and tasks of one ingest, with each job's seconds and call site.

    python -m bench.ingest_jobs --dump D                       # this tree's ingest, 2 repetitions
    python -m bench.ingest_jobs --dump D --baseline ../old     # and an older checkout's, alternating
    python -m bench.ingest_jobs --dump D --repetitions 1 --plans  # + each query's physical plan

``D`` is a ``pipeline.synth`` directory (another dump: ``--format auto``). One process: the
session (``local[2]``) is started
with the Spark UI on, so that its REST API lists each job with its submission and completion
time and its call site (a line of ``spark_jobs/ingest.py``, or the write that ran it); the
stage's ``run`` is called directly. The first repetition warms the JVM; compare the later ones.
``--baseline DIR``: that checkout's ``spark_jobs/ingest.py`` with its own ``formats.py``
(``bench.common.load_baseline``) runs after this tree's in every repetition. ``--plans``
prints the physical plan of every SQL query the run executed (the REST API's ``sql`` list).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path


def _api(spark, what: str) -> list[dict]:
    sc = spark.sparkContext
    with urllib.request.urlopen(f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/{what}"
                                ) as r:
        return json.load(r)


def _jobs(spark) -> list[dict]:
    return _api(spark, "jobs")


def _plans(spark, after: int) -> list[str]:
    """The physical plans of the SQL queries with an id above ``after``."""
    queries = _api(spark, "sql?details=true&planDescription=true&length=100000")
    return [f"-- query {q['id']} ({q['duration'] / 1000:.1f} s): {q['description'][:80]}\n"
            f"{q['planDescription']}" for q in queries if q["id"] > after]


def _last_query(spark) -> int:
    return max((q["id"] for q in _api(spark, "sql?details=false&length=100000")), default=-1)


def _seconds(job: dict) -> float:
    def at(text: str) -> datetime:
        return datetime.strptime(text.replace("GMT", ""), "%Y-%m-%dT%H:%M:%S.%f")

    return round((at(job["completionTime"]) - at(job["submissionTime"])).total_seconds(), 2)


def measure(spark, run, config: dict, dump: Path, out: Path) -> dict:
    """One ingest by ``run``: wall seconds and the jobs it launched."""
    before, last = {j["jobId"] for j in _jobs(spark)}, _last_query(spark)
    started = time.perf_counter()
    run(config, {"dump": str(dump)}, str(out))
    seconds = round(time.perf_counter() - started, 2)
    jobs = sorted((j for j in _jobs(spark) if j["jobId"] not in before), key=lambda j: j["jobId"])
    return {"seconds": seconds, "jobs": len(jobs),
            "stages": sum(len(j["stageIds"]) for j in jobs),
            "tasks": sum(j["numTasks"] for j in jobs),
            "per_job": [(_seconds(j), len(j["stageIds"]), j["numTasks"],
                         (j.get("description") or j["name"])[:90]) for j in jobs],
            "plans": _plans(spark, last)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dump", type=Path, required=True, help="a pipeline.synth directory")
    parser.add_argument("--format", default="synth", help="ingest.format of --dump (auto, ...)")
    parser.add_argument("--baseline", type=Path, help="a checkout whose ingest also runs")
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--plans", action="store_true", help="print every query's physical plan")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    from bench.common import load_baseline
    from lokg.pipeline.config import load_config
    from lokg.spark_jobs import ingest

    config = load_config(None, ["spark.master=local[2]", f"spark.driver_memory={args.driver_memory}",
                                f"ingest.format={args.format}", "engine.name=spark"])
    spark = (SparkSession.builder.master("local[2]").config("spark.driver.memory", args.driver_memory)
             .config("spark.sql.shuffle.partitions", str(config["spark"]["shuffle_partitions"]))
             .config("spark.ui.enabled", "true").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    runs = {"this tree": ingest.run}
    if args.baseline:
        runs["baseline"] = load_baseline(args.baseline, "ingest").run
    with tempfile.TemporaryDirectory(prefix="lokg-ingest-jobs-") as tmp:
        for rep in range(args.repetitions):
            for name, run in runs.items():
                out = Path(tmp) / "out"
                row = measure(spark, run, config, args.dump, out)
                shutil.rmtree(out)
                print(f"repetition {rep}, {name}: {row['seconds']} s, {row['jobs']} jobs, "
                      f"{row['stages']} stages, {row['tasks']} tasks", flush=True)
                for seconds, stages, tasks, site in row["per_job"]:
                    print(f"    {seconds:7.2f} s  {stages} stages  {tasks:3d} tasks  {site}")
                if args.plans:
                    print("\n".join(row["plans"]))


if __name__ == "__main__":
    main()

"""The Spark stages on the loopback standalone cluster give the tables a local build gave.

    python -m bench.cluster_equality --store S --dump D --work W                  # product paths
    python -m bench.cluster_equality --store S --dump D --work W \\
        --masters local[2]=product,cluster=spark --against first   # Spark forced vs the driver

The reference is a finished build: the one a store's refresh cache keeps (``lokg build`` keeps
its last build's stage directories there, records included). The bench starts the cluster of
``infra/cluster.sh`` (a master and two workers on loopback, in ``W/cluster``), stages every
stage that is not rerun from the cache into a scratch store ``W/store`` (hard links, records
rewritten to point there), and reruns the Spark stages in order with ``spark-submit`` against
each master, as ``lokg_build``'s tasks run them — each rerun stage reading the outputs of the
stages rerun before it. Every Parquet output is compared with the cached one by row digest
(``pipeline.refresh.row_digest``: same schema, same multiset of rows, any order and any split
into files). The exit code is non-zero when a table differs from its reference (``--against``).

``product`` paths leave the engine to the build's resolution from the dump's size, as a build
of that size does; ``spark`` puts every relational stage on Spark SQL (``bench.common.SPARK_PATHS``). Each rerun (``--masters``) has its own, ``--paths``
by default. From the second rerun on, the tables are also compared with the first rerun's:
``--against first`` makes that the verdict, for a build made by older code. Pass the build's
own ``--set`` overrides where they touch a Spark stage; each row says whether the rerun's
config fingerprint is the cached one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from bench.common import PATHS, SPARK_PATHS
from lokg.pipeline.driver import STAGE_RECORD
from lokg.pipeline.refresh import (link_tree, parquet_parts, staged_location,
                             table_difference)
from lokg.pipeline.registry import STAGES
from lokg.pipeline.stage_launcher import SCRIPT
from lokg.testing import REPO
from lokg.testing.serving import free_port

CLUSTER = REPO / "infra" / "cluster.sh"
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
PROPERTIES = REPO / "infra" / "spark" / "spark-defaults.conf"
SPARK_STAGES = tuple(s.name for s in STAGES if s.kind == "spark")


# ============================================================================================
# the cluster and spark-submit


def cluster_cmd(env: dict, action: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(CLUSTER), action], env=env, capture_output=True,
                          text=True, timeout=timeout)


def cluster_env(directory: Path, worker_memory: str = "1g") -> dict:
    """``infra/cluster.sh``'s environment: its own directory and free ports."""
    return {**os.environ, "LOKG_CLUSTER_DIR": str(directory), "LOKG_WORKER_MEMORY": worker_memory,
            "LOKG_MASTER_PORT": str(free_port()), "LOKG_MASTER_UI_PORT": str(free_port())}


@contextmanager
def running_cluster(env: dict):
    """The master URL of a started cluster, stopped on the way out whatever happened."""
    started = cluster_cmd(env, "start")
    try:
        if started.returncode != 0:
            raise RuntimeError(f"infra/cluster.sh start failed:\n{started.stdout}{started.stderr}")
        yield f"spark://127.0.0.1:{env['LOKG_MASTER_PORT']}"
    finally:
        cluster_cmd(env, "stop", timeout=120)


def submit_env() -> dict:
    """The variables ``lokg_build``'s Spark tasks get: this checkout's Python on both sides."""
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1"}


def submit(stage: str, master: str, store: Path, build_id: str, args: list[str],
           conf: tuple[str, ...] = (), timeout: int = 7200) -> dict:
    """``spark-submit`` one stage against ``master`` and return its record. The executors import
    this checkout (``spark.executorEnv.PYTHONPATH``), not whatever the workers' venv installed."""
    settings = [f"spark.executorEnv.PYTHONPATH={REPO}", *conf]
    proc = subprocess.run(
        [str(SPARK_SUBMIT), "--master", master, "--properties-file", str(PROPERTIES),
         *[arg for kv in settings for arg in ("--conf", kv)],
         str(SCRIPT), stage, "--store", str(store), "--build-id", build_id, *args],
        cwd=store.parent, env=submit_env(), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{stage} on {master} failed:\n{proc.stderr[-4000:]}")
    return json.loads((store / "staging" / build_id / stage / STAGE_RECORD).read_text())


# ============================================================================================
# the tables


def parquet_outputs(outputs: dict[str, str]) -> dict[str, Path]:
    """The outputs that are Parquet tables (``pipeline.refresh.parquet_parts``): a
    ``.parquet`` file or a directory of them."""
    return {name: Path(path) for name, path in outputs.items() if parquet_parts(Path(path))}


def table_check(path: Path, reference: Path) -> dict:
    """Rows of both tables and whether they are the same table: the same schema (nullability
    included) and the same multiset of rows (``row_digest``, any order, any split into files);
    if not, the first difference (``pipeline.refresh.table_difference``)."""
    import pyarrow.parquet as pq

    rows = [sum(pq.ParquetFile(f).metadata.num_rows for f in parquet_parts(Path(p)))
            for p in (path, reference)]
    reason = table_difference(path, reference)
    return {"rows": rows[0], "reference_rows": rows[1], "equal": reason is None,
            "differs_in": reason}


# ============================================================================================
# the rerun


def cached_record(cache: Path, stage: str) -> dict:
    path = cache / stage / STAGE_RECORD
    if not path.is_file():
        raise SystemExit(f"{path} missing: the cache holds no finished '{stage}' stage")
    return json.loads(path.read_text())


def at(root: Path, recorded: str, base_id: str) -> Path:
    """Where an output recorded in the cached build lies under ``root`` (the cache, or a
    staging directory): ``<root>/<stage that wrote it>/<path inside its directory>``."""
    found = staged_location(recorded, base_id)
    if found is None:
        raise SystemExit(f"output {recorded} is not under staging/{base_id}/")
    return root / found[0] / found[1]


def stage_from_cache(cache: Path, base_id: str, stage: str, staging: Path) -> None:
    """Hard-link a cached stage into ``staging`` with its record's outputs pointing there."""
    record = cached_record(cache, stage)
    link_tree(cache / stage, staging / stage, skip=(STAGE_RECORD,))
    record["outputs"] = {a: str(at(staging, p, base_id)) for a, p in record["outputs"].items()}
    (staging / stage / STAGE_RECORD).write_text(json.dumps(record))


def rerun(store: Path, cache: Path, base_id: str, master: str, build_id: str, stages: list[str],
          args: list[str], conf: tuple[str, ...], first: str | None = None) -> list[dict]:
    """Rerun ``stages`` on ``master`` over the cache's other stages; one row per rerun stage,
    its tables compared with the cached build's and, given ``first`` (the first rerun's build
    id), with that rerun's."""
    staging = store / "staging" / build_id
    last = max(i for i, s in enumerate(STAGES) if s.name in stages)
    rows = []
    for spec in STAGES[:last + 1]:
        if spec.name not in stages:
            stage_from_cache(cache, base_id, spec.name, staging)
            continue
        started = time.time()
        record = submit(spec.name, master, store, build_id, args, conf)
        row = compared(spec.name, record, cached_record(cache, spec.name), cache, base_id)
        if first is not None:
            earlier = json.loads((store / "staging" / first / spec.name / STAGE_RECORD).read_text())
            theirs = parquet_outputs(earlier["outputs"])
            row["first"] = {name: table_check(path, theirs[name])
                            for name, path in parquet_outputs(record["outputs"]).items()}
        rows.append(row | {"master": master, "wall_s": round(time.time() - started, 1)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def stage_path(stage: str, report: dict) -> str | None:
    """Where the stage's report says it ran: a SQL stage's ``engine`` (duckdb | spark); else (a
    report of older code) scos_merge's ``rewrite`` or the stage's ``path`` (driver | spark)."""
    return report.get("engine") or report.get("rewrite" if stage == "scos_merge" else "path")


def compared(stage: str, record: dict, reference: dict, cache: Path, base_id: str) -> dict:
    fresh, cached = record.get("fingerprint", {}), reference.get("fingerprint", {})
    references = {a: at(cache, p, base_id) for a, p in reference["outputs"].items()}
    return {
        "stage": stage, "path": stage_path(stage, record["report"]),
        "reference_path": stage_path(stage, reference["report"]),
        "seconds": record["seconds"], "reference_seconds": reference.get("seconds"),
        "same_config": fresh.get("config") == cached.get("config"),
        "same_input_bytes": fresh.get("inputs") == cached.get("inputs"),
        "tables": {name: table_check(path, references[name])
                   for name, path in parquet_outputs(record["outputs"]).items()},
    }


# ============================================================================================
# command line


def markdown(rows: list[dict]) -> str:
    """One line per table: rows, and whether it is the cached build's (and the first
    rerun's, from the second rerun on)."""
    def same(check: dict | None) -> str:
        return "" if check is None else "yes" if check["equal"] else f"**no** ({check['differs_in']})"

    lines = ["| stage | master (paths) | path (build's) | table | rows | = build | = first rerun "
             "| stage s (build's) |", "|---|---|---|---|--:|---|---|--:|"]
    for row in rows:
        for name, t in row["tables"].items():
            lines.append(f"| {row['stage']} | {row['master']} ({row['paths']}) | {row['path']} "
                         f"({row['reference_path']}) | {name} | {t['rows']:,} | {same(t)} | "
                         f"{same(row.get('first', {}).get(name))} | "
                         f"{row['seconds']:.1f} ({row['reference_seconds']:.1f}) |")
    return "\n".join(lines)


def masters(spec: str, paths: str) -> list[tuple[str, str]]:
    """``--masters``: (master, paths) of each rerun — ``MASTER[=product|spark]``."""
    out = []
    for item in spec.split(","):
        master, _, own = item.partition("=")
        if (own or paths) not in PATHS:
            raise SystemExit(f"--masters: {item!r}: paths must be one of {PATHS}")
        out.append((master, own or paths))
    return out


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--store", type=Path, required=True, help="store whose refresh cache is the reference")
    p.add_argument("--build", help="cached build id (default: the store's refresh base)")
    p.add_argument("--dump", type=Path, required=True, help="the dump the build read")
    p.add_argument("--work", type=Path, required=True, help="scratch directory (cluster, store)")
    p.add_argument("--masters", default="cluster",
                   help="comma-separated reruns, MASTER[=product|spark]: 'cluster' (started "
                        "here) or a Spark master URL, with its own paths (default --paths)")
    p.add_argument("--stages", default=",".join(SPARK_STAGES), help="Spark stages to rerun")
    p.add_argument("--paths", choices=PATHS, default="product")
    p.add_argument("--against", choices=("build", "first"), default="build",
                   help="what the exit code judges: the cached build's tables, or the first "
                        "rerun's (a build made by older code)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--worker-memory", default="6g", help="each of the two workers")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="spark-submit --conf, repeatable (e.g. spark.executor.memory=5g)")
    p.add_argument("--json", type=Path, help="append the rows here (JSON Lines)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    from lokg.runtime.contract import Store

    args = parse_args(argv)
    stages = args.stages.split(",")
    unknown = set(stages) - set(SPARK_STAGES)
    if unknown:
        raise SystemExit(f"--stages: not Spark stages: {sorted(unknown)} (Spark stages: {SPARK_STAGES})")
    base_id = args.build or Store(args.store).refresh_base()
    if base_id is None:
        raise SystemExit(f"{args.store}: no build in its refresh cache (lokg build keeps one)")
    cache = Store(args.store).refresh_dir(base_id)
    store, reruns, rows = args.work / "store", masters(args.masters, args.paths), []
    with running_cluster(cluster_env(args.work / "cluster", args.worker_memory)) as cluster:
        for i, (master, paths) in enumerate(reruns):
            forced = SPARK_PATHS if paths == "spark" else ()
            stage_args = ["--dump", str(args.dump), *[a for kv in (
                "refresh.mode=full", *forced, *args.overrides) for a in ("--set", kv)]]
            url = cluster if master == "cluster" else master
            rows += [row | {"paths": paths} for row in rerun(
                store, cache, base_id, url, f"rerun-{i}", stages, stage_args, tuple(args.conf),
                first=None if i == 0 else "rerun-0")]
    if args.json:
        with args.json.open("a") as out:
            for row in rows:
                out.write(json.dumps({**row, "build": base_id}) + "\n")
    print(markdown(rows))
    judged = [row["tables"] if args.against == "build" else row.get("first", {}) for row in rows]
    return 0 if all(t["equal"] for tables in judged for t in tables.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

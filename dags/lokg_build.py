"""``lokg_build``: one task per pipeline stage of a dump, then an atomic publish.

Tasks, in ``pipeline.registry.STAGES`` order (a task per stage, named as the stage; the chain is
linear, each stage after the one before it). Every stage task runs the one stage launcher,
``pipeline/stage_launcher.py``, with the stage's name as its first argument:

* ``plan``    — validates the build config (``lokg config``), derives the build id from the DAG
  run and the launcher's argument list of every stage (``lokg publish`` gets the same without
  the stage name);
* Spark stages (``spark_jobs.*``) — ``SparkSubmitOperator`` of the launcher's file on the
  ``spark_default`` connection (master from the connection: ``local[2]`` embedded,
  ``spark://``, ``yarn``, ``k8s://``);
* training stages (``training.*``) — ``python -m lokg.pipeline.stage_launcher <stage>`` on the
  ``gpu`` queue and pool;
* document stages (``text.*``: documents, triple_extract, feedback_enrich, triple_context) —
  ``python -m lokg.pipeline.stage_launcher <stage>`` on the default queue (for a dump of
  triples they write empty tables);
* ``publish`` — ``lokg publish``: validate and publish atomically; with the ``publish_url``
  param (default ``LOKG_PUBLISH_URL``) also ``lokg store push`` the build to that object store
  (``s3://…``: files, manifest, then a conditional write of its CURRENT); then emit the store's
  Asset ``lokg://store/<name>`` with the build id and what it refreshed and changed (the
  report's ``refresh``), which schedules ``lokg_evaluate``.

Refresh: when the store holds a previous build (its refresh cache), every stage whose
inputs, config and code are unchanged reuses that build's outputs and partial stages recompute
only what changed (``pipeline.refresh``); the ``full`` param rebuilds every stage.

Idempotence: the build id is a function of the DAG run (its logical date, else its run id), so a
retry or a re-run of any task replaces the same ``staging/<build_id>/<stage>/``: each attempt
writes a fresh hidden directory and renames it into place when finished, so a killed attempt's
orphans never write into a retry's output. ``lokg publish`` can be retried at any point; nothing
is visible to readers before it swaps ``CURRENT``.

The DAG runs weekly (``LOKG_BUILD_CRON``) and whenever the raw dump's Asset is updated. Each
run is the store's scheduled refresh: its ``feedback_enrich`` task turns the open feedback of the
store's log into a delta from the published build's passages, and ingest takes every delta in
(docs/feedback.md).
"""

from __future__ import annotations

import hashlib
import shlex
from datetime import timezone
from pathlib import Path

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable, Param, chain, dag, task
from airflow.sdk.exceptions import AirflowFailException

import lokg_common as lc

STORE_ASSET = Asset(lc.STORE_ASSET_URI)
DUMP_ASSET = Asset(Path(lc.DUMP).resolve().as_uri())


def build_id_of(dag_run) -> str:
    """``YYYYmmddTHHMMSSZ-<6 hex>`` like ``runtime.contract.new_build_id``, but fixed per run.

    A run with a logical date (scheduled, or ``airflow dags test DAG DATE``) is keyed by that
    date, so re-running the DAG for the same date resumes in the same staging directory; a run
    without one (asset-triggered, manual) is keyed by its run id.
    """
    when = dag_run.logical_date or dag_run.run_after
    key = dag_run.logical_date.isoformat() if dag_run.logical_date else dag_run.run_id
    stamp = when.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{hashlib.sha1(key.encode()).hexdigest()[:6]}"


@task(multiple_outputs=True)
def plan(*, params=None, dag_run=None) -> dict:
    """The build id, the command-line arguments of ``lokg publish`` and, under
    ``argv_<stage>``, the launcher's of each stage: its name, then the same arguments."""
    dump = Path(lc.ROOT, params["dump"]).resolve()
    store = Path(lc.ROOT, params["store"]).resolve()
    if not dump.exists():
        raise AirflowFailException(f"param dump: {dump} does not exist")
    bad = [kv for kv in params["overrides"] if "=" not in kv or kv.startswith("=")]
    if bad:
        raise AirflowFailException(f"param overrides: expected KEY=VALUE items, got {bad}")
    config = ["--set", f"ingest.format={params['format']}"]
    if params["full"]:  # else a refresh from the store's previous build (refresh.mode=auto)
        config += ["--set", "refresh.mode=full"]
    for kv in params["overrides"]:
        config += ["--set", kv]
    if params["config"]:
        config += ["--config", str(Path(lc.ROOT, params["config"]).resolve())]
    try:  # a bad value fails the run here, once, not in every retry of the first stage
        lc.run_logged([lc.LOKG, "config", *config])
    except RuntimeError as exc:
        raise AirflowFailException(f"invalid build config: {exc}") from None
    build_id = build_id_of(dag_run)
    print(f"build {build_id}: dump {dump} -> store {store}")
    args = ["--store", str(store), "--build-id", build_id, "--dump", str(dump), *config]
    return {
        "build_id": build_id,
        "store": str(store),
        "dump": str(dump),
        "args": args,
        **{argv_key(stage.name): [stage.name, *args] for stage in lc.STAGES},
    }


def argv_key(stage: str) -> str:
    """The key of ``plan``'s output holding the launcher's arguments for ``stage``: whole
    lists, since an XCom cannot be spliced into ``SparkSubmitOperator``'s ``application_args``
    when the DAG is parsed."""
    return f"argv_{stage}"


def python_stage(stage: str, *, gpu: bool):
    """A non-Spark stage: ``python -m`` the stage launcher in the project venv, on the GPU
    queue and pool for the training stages (the text stages take the default queue)."""
    placement = {"queue": lc.GPU_QUEUE, "pool": lc.GPU_POOL} if gpu else {}

    @task.bash(task_id=stage, cwd=str(lc.ROOT), env=lc.STAGE_ENV, append_env=True,
               skip_on_exit_code=None, **placement)
    def run_launcher(argv: list[str]) -> str:
        return shlex.join([lc.PYTHON, "-m", lc.LAUNCHER_MODULE, *argv])

    return run_launcher


def spark_stage(stage: str, argv) -> SparkSubmitOperator:
    """A Spark stage: ``spark-submit`` of the stage launcher's file through the project venv's
    pyspark."""
    return SparkSubmitOperator(
        task_id=stage,
        application=lc.LAUNCHER,
        application_args=argv,
        conn_id=lc.SPARK_CONN_ID,
        spark_binary=lc.SPARK_SUBMIT,
        properties_file=lc.SPARK_PROPERTIES,
        env_vars=lc.STAGE_ENV,
        name=f"lokg-{stage}",
    )


@task(outlets=[STORE_ASSET])
def publish(planned: dict, *, params=None, outlet_events=None) -> str:
    """``lokg publish`` the staged build; the Asset event says which build and what it replaced."""
    previous = lc.current_build(planned["store"])
    lc.run_logged([lc.LOKG, "publish", *planned["args"]])
    if params["publish_url"]:  # a retry pushes again: an already pushed build is kept
        lc.run_logged([lc.LOKG, "store", "push", planned["store"], params["publish_url"],
                       "--build-id", planned["build_id"]])
    outlet_events[STORE_ASSET].extra = {
        "build_id": planned["build_id"],
        "store": planned["store"],
        "object_store": params["publish_url"] or None,
        "dump": planned["dump"],
        "previous_build_id": previous if previous != planned["build_id"] else None,
        "validation_budget": params["validation_budget"],
        "refresh": lc.build_refresh(planned["store"], planned["build_id"]),
    }
    return planned["build_id"]


@dag(
    dag_id="lokg_build",
    schedule=AssetOrTimeSchedule(timetable=CronTriggerTimetable(lc.BUILD_CRON, timezone="UTC"),
                                 assets=DUMP_ASSET),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=lc.DEFAULT_ARGS,
    tags=["lokg", "build", "spark", "gpu"],
    doc_md=__doc__,
    params={
        "dump": Param(lc.DUMP, type="string", description="Raw dump: a file or a directory."),
        "format": Param("auto", enum=list(lc.FORMATS), description="Dump format (ingest.format)."),
        "store": Param(lc.STORE, type="string", description="Store root to publish into."),
        "config": Param("", type="string", description="Optional YAML/JSON build config file."),
        "publish_url": Param(lc.PUBLISH_URL, type="string",
                             description="Also push the build to this object store "
                                         "(s3://bucket/prefix); empty: local store only."),
        "full": Param(False, type="boolean",
                      description="Rebuild every stage instead of refreshing from the store's "
                                  "previous build (lokg build --full)."),
        "overrides": Param([], type="array", items={"type": "string"},
                           description="Config overrides KEY=VALUE, e.g. transe.epochs=2."),
        "validation_budget": Param(lc.DEFAULT_BUDGET, type="integer", minimum=1,
                                   description="Token budget of the evaluation smoke queries."),
    },
)
def lokg_build():
    planned = plan()
    tasks = []
    for stage in lc.STAGES:
        argv = planned[argv_key(stage.name)]
        if stage.kind == "spark":
            tasks.append(spark_stage(stage.name, argv))
        else:
            tasks.append(python_stage(stage.name, gpu=stage.kind == "train")(argv))
    chain(planned, *tasks, publish(planned))


lokg_build()

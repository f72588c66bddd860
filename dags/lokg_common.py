"""What the LOKG DAGs share: paths, environment, task defaults (from env variables), helpers.

The DAG files run in the Airflow venv, which has neither the project's dependencies nor pyspark
(the Spark provider's pyspark-client would overwrite pyspark), and the scheduler parses them
often. So this module is plain Python: the stage table comes from ``pipeline/registry.py``,
which imports nothing, and every stage runs in the project venv through a subprocess of the one
stage launcher (``spark-submit pipeline/stage_launcher.py``, ``python -m
lokg.pipeline.stage_launcher``) and ``lokg``.

Every setting has a default for the embedded set-up (``infra/airflow/env.sh``) and an
environment variable for production (docs/OPERATIONS.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from datetime import timedelta
from pathlib import Path

#: The repository checkout the tasks run in (the stage launcher, configs) and its project venv.
ROOT = Path(os.environ.get("LOKG_ROOT") or Path(__file__).resolve().parents[1])
VENV = Path(os.environ.get("LOKG_VENV") or ROOT / ".venv")
PYTHON = str(VENV / "bin" / "python")
LOKG = str(VENV / "bin" / "lokg")
#: pyspark's own spark-submit, so the driver and the executors use the project's pyspark.
SPARK_SUBMIT = os.environ.get("LOKG_SPARK_SUBMIT") or str(VENV / "bin" / "spark-submit")
SPARK_PROPERTIES = os.environ.get("LOKG_SPARK_PROPERTIES") or str(
    ROOT / "infra" / "spark" / "spark-defaults.conf")
SPARK_CONN_ID = os.environ.get("LOKG_SPARK_CONN_ID", "spark_default")

#: Defaults of the DAG params: the raw dump, the store root and where evaluation reports go.
DUMP = os.environ.get("LOKG_DUMP") or str(ROOT / "out" / "airflow" / "dump")
STORE = os.environ.get("LOKG_STORE") or str(ROOT / "out" / "airflow" / "store")
REPORTS = os.environ.get("LOKG_REPORTS") or str(ROOT / "out" / "airflow" / "reports")
#: Where ``publish`` also pushes each published build (``lokg store push``): an object store,
#: s3://bucket/prefix, reached with the worker's AWS_* / LOKG_S3_ENDPOINT environment; empty:
#: the local store only (docs/OPERATIONS.md).
PUBLISH_URL = os.environ.get("LOKG_PUBLISH_URL", "")
#: The store's name in its Asset URI ``lokg://store/<name>`` (Assets are fixed at parse time).
STORE_NAME = os.environ.get("LOKG_STORE_NAME", "default")
STORE_ASSET_URI = f"lokg://store/{STORE_NAME}"
#: What lokg_evaluate runs and the floor it holds a new build to (DAG params' defaults).
EVAL_COMMAND = os.environ.get("LOKG_EVAL_COMMAND", "")
EVAL_FLOOR = json.loads(os.environ.get("LOKG_EVAL_FLOOR", '{"H@1": 0.2}'))
#: The query's default knowledge budget B: ``runtime.config.DEFAULT_BUDGET``, which the DAGs
#: cannot import (no runtime modules in the scheduler); tests/test_dags.py checks they agree.
DEFAULT_BUDGET = 2048
#: The dump formats of ``ingest.format``: ``lokg.common.dumps.FORMATS``, copied for the same reason.
FORMATS = ("auto", "nt", "tsv", "pathquestion", "metaqa", "fb15k237", "synth", "docs")
#: Cron of the scheduled refresh (default: Sundays 03:00 UTC); a new dump also triggers a build.
BUILD_CRON = os.environ.get("LOKG_BUILD_CRON", "0 3 * * 0")

#: Training stages go to this executor queue (Celery/Kubernetes workers on GPU nodes) and pool.
GPU_QUEUE = os.environ.get("LOKG_GPU_QUEUE", "gpu")
GPU_POOL = os.environ.get("LOKG_GPU_POOL", "gpu")

#: Environment of every stage process: the project venv's Python for the Spark driver and
#: workers, and the offline flags (nothing may download at run time).
STAGE_ENV = {
    "PYSPARK_PYTHON": PYTHON,
    "PYSPARK_DRIVER_PYTHON": PYTHON,
    "TIKTOKEN_CACHE_DIR": os.environ.get("TIKTOKEN_CACHE_DIR") or str(ROOT / ".cache" / "tiktoken"),
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    # Spark's log4j2.properties, errors only (spark_jobs/session.py sets the same in-process)
    "SPARK_CONF_DIR": os.environ.get("SPARK_CONF_DIR") or str(ROOT / "spark_jobs" / "conf"),
}

#: Every task: an owner, at least two retries with exponential backoff, a hard time limit.
DEFAULT_ARGS = {
    "owner": "lokg",
    "retries": max(2, int(os.environ.get("LOKG_TASK_RETRIES", "2"))),
    "retry_delay": timedelta(seconds=float(os.environ.get("LOKG_RETRY_DELAY_S", "60"))),
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": timedelta(minutes=30),
    "execution_timeout": timedelta(hours=float(os.environ.get("LOKG_TASK_TIMEOUT_H", "12"))),
}


def _stage_table():
    """The checkout's pipeline/registry.py, loaded from its file: it imports nothing, and the
    Airflow venv has no lokg installed."""
    spec = importlib.util.spec_from_file_location("lokg_stage_table",
                                                  ROOT / "pipeline" / "registry.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its NamedTuple resolves its module by name
    spec.loader.exec_module(module)
    return module


STAGES = _stage_table().STAGES  # the DAGs' one stage table
#: What runs any stage by name: the file spark-submit gets, the module ``python -m`` runs.
LAUNCHER = str(ROOT / "pipeline" / "stage_launcher.py")
LAUNCHER_MODULE = "lokg.pipeline.stage_launcher"


def run_logged(cmd: list[str]) -> None:
    """Run a project command in the checkout with ``STAGE_ENV``, its output going to the task log.

    Raises with the command and the last lines of its output, so the task's failure message
    says what went wrong without opening the log.
    """
    import collections
    import shlex
    import subprocess

    print(f"$ {shlex.join(cmd)}", flush=True)
    tail: collections.deque[str] = collections.deque(maxlen=40)
    with subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **STAGE_ENV}, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        for line in proc.stdout:
            print(line, end="", flush=True)
            tail.append(line)
    if proc.returncode:
        raise RuntimeError(f"{shlex.join(cmd)} exited with {proc.returncode}:\n{''.join(tail)}")


def current_build(store: str) -> str | None:
    """The build id the store's ``CURRENT`` pointer names (docs/ARTEFACTS.md), or None."""
    path = Path(store) / "CURRENT"
    if not path.is_file():
        return None
    return path.read_text(encoding="utf-8").strip() or None


def build_refresh(store: str, build_id: str) -> dict | None:
    """What a published build refreshed from and changed (its report's ``refresh``: base
    build, how each stage was made, the change set's counts), or None."""
    path = Path(store) / "builds" / build_id / "manifest.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8")).get("report", {}).get("refresh")

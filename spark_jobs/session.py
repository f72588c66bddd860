"""One way to obtain the SparkSession, in-process (lokg build, tests) or under spark-submit."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from lokg.runtime.environment import apply_defaults
from lokg.spark_jobs.settings import SparkSettings

#: Holds log4j2.properties (errors only); a user's own SPARK_CONF_DIR wins.
CONF_DIR = Path(__file__).with_name("conf")


def get_spark(config: dict, app_name: str = "lokg") -> SparkSession:
    """Return the active session, or start one from the ``spark`` section of the config.

    Under spark-submit the master and memory come from the submit command, not from the config.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    apply_defaults()  # before the context exists: it fixes the workers' Python at creation
    spark_cfg = SparkSettings.of(config)
    builder = SparkSession.builder.appName(app_name)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        builder = builder.master(os.environ.get("LOKG_SPARK_MASTER", spark_cfg.master))
        builder = builder.config("spark.driver.memory", spark_cfg.driver_memory)
    builder = (
        builder.config("spark.sql.shuffle.partitions", str(spark_cfg.shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    with _quiet_conf_dir():
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel(spark_cfg.log_level)
    if session.sparkContext.master.startswith("local"):
        _quiet_task_failures(session)
    return session


@contextmanager
def _quiet_conf_dir() -> Iterator[None]:
    """``SPARK_CONF_DIR`` = CONF_DIR while the JVM starts (a user's own wins), then as it was:
    processes this one starts later (a standalone cluster's daemons) keep Spark's defaults."""
    if "SPARK_CONF_DIR" in os.environ:
        yield
        return
    os.environ["SPARK_CONF_DIR"] = str(CONF_DIR)
    try:
        yield
    finally:
        os.environ.pop("SPARK_CONF_DIR", None)


def _quiet_task_failures(session: SparkSession) -> None:
    """Silence the executor's and the task set manager's log of a failed task. In local mode
    the failure is raised in this process right after, where the stage turns it into one
    error naming the input (a truncated .gz); the logs only repeat it as a Java stack."""
    jvm = session.sparkContext._jvm
    off = jvm.org.apache.logging.log4j.Level.OFF
    for logger in ("org.apache.spark.executor.Executor",
                   "org.apache.spark.scheduler.TaskSetManager"):
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(logger, off)

"""The Spark session of the stages starts quietly: no JVM start-up warnings in a build's output."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark

START = """
from lokg.spark_jobs.session import get_spark
spark = get_spark({"spark": {"master": "local[1]", "driver_memory": "1g"}}, "quiet-test")
print(spark.range(3).count())
spark.stop()
"""


def test_a_stage_session_prints_no_jvm_warnings_or_profile_notice():
    env = {k: v for k, v in os.environ.items() if k != "SPARK_CONF_DIR"}
    proc = subprocess.run([sys.executable, "-c", START], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "3"
    noise = [line for line in proc.stderr.splitlines()
             if " WARN " in line or "log4j profile" in line or "setLogLevel" in line]
    assert noise == [], "\n".join(noise)

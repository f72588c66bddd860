"""Whole builds in tests: small hyperparameters, a stage run the way Airflow runs it
(spark-submit of the module file), a store asked without a reader."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: Small hyperparameters: a test of a build is about orchestration, not model quality.
FAST = ["transe.epochs=2", "gat.epochs=2", "path_cache.beam_width=8", "path_cache.buckets=4",
        "spark.shuffle_partitions=2"]
#: FAST for a refresh of a synthetic dump whose linked documents answer its withheld edges.
REFRESH_FAST = ["ingest.format=synth", *FAST, "documents.corpus=linked_documents.jsonl",
                "feedback_enrich.backend=precomputed"]


def spark_submit(stage: str, store: Path, build_id: str, dump: Path, *extra: str) -> dict:
    """Run ``spark-submit pipeline/stage_launcher.py <stage>`` from outside the repository; its
    stage record."""
    import pytest

    from lokg.pipeline.stage_launcher import SCRIPT

    submit = Path(sys.executable).parent / "spark-submit"
    if not submit.exists():
        submit = shutil.which("spark-submit")
        if submit is None:
            pytest.skip("spark-submit not found")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run(
        [str(submit), "--master", "local[1]", "--driver-memory", "1g",
         str(SCRIPT), stage,
         "--store", str(store), "--build-id", build_id, "--dump", str(dump), *extra],
        cwd=store.parent, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((store / "staging" / build_id / stage / "_stage.json").read_text())


def withheld_question(dump: Path) -> tuple[dict, dict]:
    """A synthetic dump's first withheld edge and the question it answers."""
    edge = json.loads((dump / "withheld.json").read_text())["edges"][0]
    questions = [json.loads(line) for line in (dump / "questions.jsonl").open()]
    return edge, next(q for q in questions if q["id"] == edge["question"])


def answers(store: Path, question: str, **settings) -> list[str]:
    """The store's answers to ``question`` without a reader (``settings``: Runtime.open's)."""
    from lokg.runtime.query import Runtime

    runtime = Runtime.open(store, **settings)
    try:
        return runtime.ask(question, llm="none").answers
    finally:
        runtime.close()

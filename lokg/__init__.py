"""LOKG: questions over a large knowledge graph answered with at most one LLM call and a hard
token budget.

The one installable namespace. Most subpackages live in the repository's top folders:
``lokg.runtime`` (the query service), ``lokg.pipeline`` (builds and their commands),
``lokg.spark_jobs``, ``lokg.training`` and ``lokg.text`` (the build stages) and
``lokg.evaluation``; this folder holds ``lokg.cli`` (the ``lokg`` command, assembled) and
``lokg.common`` (what the stages and the evaluation share). From the top down, each imports
only those below it: cli, evaluation, pipeline, the stages, common, runtime
(tests/test_architecture.py).
"""

"""LOKG: questions over a large knowledge graph answered with at most one LLM call and a hard
token budget.

The one installable namespace. Its subpackages live in the repository's top folders:
``lokg.runtime`` (the query service), ``lokg.pipeline`` (builds, the CLI), ``lokg.spark_jobs``,
``lokg.training`` and ``lokg.text`` (the build stages) and ``lokg.evaluation``.
"""

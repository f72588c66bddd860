"""LOKG evaluation harness: datasets, the metrics of DESIGN §5, methods and baselines, runs.

``lokg eval`` (``evaluation.cli``) runs methods over a dataset split and writes one JSONL line
per question, ``summary.json``, ``summary.md`` and a plot of accuracy against tokens per
question. Heavy imports (the runtime's encoder, matplotlib) happen only where they are used.
"""

"""LOKG evaluation harness: methods and baselines, runs and reports, over the question sets
and metrics of ``lokg.common`` (the relation_knowledge stage reads them too).

``lokg eval`` (``evaluation.cli``) runs methods over a dataset split and writes one JSONL line
per question, ``summary.json``, ``summary.md`` and a plot of accuracy against tokens per
question. Heavy imports (the runtime's encoder, matplotlib) happen only where they are used.
"""

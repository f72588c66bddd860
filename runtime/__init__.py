"""LOKG runtime: the thin query package and the artefact store contract.

Importing it needs no pyspark, torch or airflow.
"""

__version__ = "0.1.0"

"""The offline side of LOKG: the stage registry, the build driver, the refresh, the synthetic
generator and the build commands of the CLI.

Importing this package imports nothing: ``pipeline.registry`` must stay importable from the
Airflow venv, which has neither the project's dependencies nor pyspark.
"""

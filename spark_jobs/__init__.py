"""PySpark jobs of the offline pipeline; each stage module runs under spark-submit through the
stage launcher (pipeline/stage_launcher.py)."""

"""PySpark jobs of the offline pipeline; each module is one stage and runs under spark-submit."""

"""The triples under φ — (s, φ(r), o), distinct — with numpy on the driver or in Spark: the same
rows and schema either way."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lokg.runtime.contract import TABLE_SCHEMAS, StoreError, read_table, table_files, to_numpy


def triple_count(path: Path) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in table_files(path))


def _unmapped_error(inputs: Mapping, unmapped: int) -> StoreError:
    return StoreError(f"{inputs['triples']}: {unmapped} triples have a relation id missing "
                      f"from {inputs['relations']}")


def rewrite_on_driver(inputs: Mapping, rmap: pa.Table, path: Path) -> None:
    """numpy: each triple's r looked up in φ (sorted ids), the distinct (s, φ(r), o) rows
    written in (s, r, o) order as one file of the contract's schema — the rows and schema
    of the Spark path."""
    triples = read_table(Path(inputs["triples"]), columns=["s", "r", "o"])
    ids, canon = to_numpy(rmap["id"]), to_numpy(rmap["canonical_id"])
    order = np.argsort(ids)
    ids, canon = ids[order], canon[order]
    r = to_numpy(triples["r"])
    at = np.minimum(np.searchsorted(ids, r), max(len(ids) - 1, 0))
    mapped = ids[at] == r if len(ids) else np.zeros(len(r), bool)
    if not mapped.all():
        raise _unmapped_error(inputs, int((~mapped).sum()))
    sro = np.unique(np.column_stack([to_numpy(triples["s"]), canon[at],
                                     to_numpy(triples["o"])]).astype(np.int64), axis=0)
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"s": sro[:, 0], "r": sro[:, 1], "o": sro[:, 2]},
                            schema=TABLE_SCHEMAS["triples"]), path / "part-00000.parquet")


def rewrite_in_spark(config: Mapping, inputs: Mapping, rmap: pa.Table, path: Path) -> None:
    """Spark: triples ⋈ φ on r, project (s, φ(r), o), distinct."""
    from pyspark.sql import functions as F

    from lokg.spark_jobs.session import get_spark

    spark = get_spark(dict(config), "lokg-scos_merge")
    phi = spark.createDataFrame(
        list(zip(rmap.column("id").to_pylist(), rmap.column("canonical_id").to_pylist())),
        "id long, canonical_id long")
    triples = spark.read.parquet(str(inputs["triples"])).select("s", "r", "o")
    unmapped = triples.join(F.broadcast(phi), triples.r == phi.id, "left_anti").count()
    if unmapped:
        raise _unmapped_error(inputs, unmapped)
    rewritten = (triples.join(F.broadcast(phi), triples.r == phi.id)
                 .select("s", F.col("canonical_id").alias("r"), "o").distinct())
    rewritten.write.mode("overwrite").parquet(str(path))

"""The triples under φ — (s, φ(r), o), distinct — as SQL on the build's engine
(spark_jobs/engine.py: DuckDB or Spark SQL, the same text)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa

from lokg.runtime.contract import TABLE_SCHEMAS, StoreError
from lokg.spark_jobs.engine import open_engine

#: Triples whose relation φ does not map
UNMAPPED = "SELECT count(*) AS n FROM triples t LEFT JOIN phi ON t.r = phi.id WHERE phi.id IS NULL"
#: The rewritten triples, distinct
REWRITTEN = ("SELECT DISTINCT t.s, phi.canonical_id AS r, t.o "
             "FROM triples t JOIN phi ON t.r = phi.id")


def rewrite(config: Mapping, inputs: Mapping, rmap: pa.Table, path: Path) -> str:
    """Write the triples of ``inputs["triples"]`` under φ (``rmap``: id → canonical_id) to
    ``path``, in (s, r, o) order, the contract's schema; the engine's name. A StoreError when
    a triple's relation is not in φ (nothing written)."""
    phi = pa.table({"id": rmap["id"].cast(pa.int64()),
                    "canonical_id": rmap["canonical_id"].cast(pa.int64())})
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_engine(dict(config), path.parent) as engine:
        engine.register("triples", inputs["triples"])
        engine.register_arrow("phi", phi)
        unmapped = engine.fetch(UNMAPPED)["n"][0].as_py()
        if unmapped:
            raise StoreError(f"{inputs['triples']}: {unmapped} triples have a relation id "
                             f"missing from {inputs['relations']}")
        engine.write(REWRITTEN, path, order_by=["s", "r", "o"], single_file=False,
                     schema=TABLE_SCHEMAS["triples"])
    return engine.name

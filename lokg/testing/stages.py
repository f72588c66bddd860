"""Toy inputs of single build stages: contract tables of small graphs, the path-cache search
on a synthetic dump, the test Spark settings."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from lokg.runtime.contract import TABLE_SCHEMAS, read_table, write_table
from lokg.runtime.taimr import EdgeGraph, paths_table, top_paths, uniform_edges

#: A small local Spark session's settings for a stage run.
SPARK_CONFIG = {"spark": {"master": "local[2]", "shuffle_partitions": 4}}
#: SPARK_CONFIG with the SQL engine resolved to DuckDB, as a build resolves it (spark_jobs/engine.py)
DUCKDB_CONFIG = {**SPARK_CONFIG, "engine": {"name": "duckdb"}}


def write_inputs(tmp: Path, n_entities: int, n_relations: int, triples) -> dict:
    """Contract tables of a toy graph under ``tmp``; returns the stage inputs."""
    ids = list(range(n_entities))
    tables = {
        "entities": pa.table({"id": ids, "key": [f"k{i}" for i in ids], "name": [f"e{i}" for i in ids],
                              "aliases": [[]] * n_entities, "description": [None] * n_entities,
                              "types": [[]] * n_entities, "attributes": [[]] * n_entities}),
        "relations": pa.table({"id": list(range(n_relations)),
                               "name": [f"r{i}" for i in range(n_relations)]}),
        "triples": pa.table({c: [t[i] for t in triples] for i, c in enumerate("sro")},
                            schema=TABLE_SCHEMAS["triples"]),
    }
    inputs = {}
    for name, table in tables.items():
        inputs[name] = str(tmp / "in" / f"{name}.parquet")
        write_table(name, table, Path(inputs[name]))
    return inputs


#: H of tails (x, x, y): p = (⅔, ⅓), natural log
H_TWO_THIRDS = -(2 / 3) * math.log(2 / 3) - (1 / 3) * math.log(1 / 3)


def write_toy(tmp: Path, types: dict[int, list[str]], relations: list[str],
              triples: list[tuple[int, int, int]], embeddings: np.ndarray | None = None) -> dict:
    """Contract tables for a toy graph under ``tmp``; returns the stage inputs."""
    ids = sorted(types)
    entities = pa.table({
        "id": ids, "key": [f"m.{i}" for i in ids], "name": [f"e{i}" for i in ids],
        "aliases": [[] for _ in ids], "description": [None] * len(ids),
        "types": [types[i] for i in ids], "attributes": [[] for _ in ids],
    })
    rel = pa.table({"id": list(range(len(relations))), "name": relations})
    tri = pa.table({"s": [t[0] for t in triples], "r": [t[1] for t in triples],
                    "o": [t[2] for t in triples]})
    inputs = {}
    for name, table in (("entities", entities), ("relations", rel), ("triples", tri)):
        path = tmp / "in" / f"{name}.parquet"
        write_table(name, table, path)
        inputs[name] = str(path)
    if embeddings is not None:
        path = tmp / "in" / "relation_embeddings.npy"
        np.save(path, np.asarray(embeddings, dtype=np.float32))
        inputs["relation_embeddings"] = str(path)
    return inputs


#: A small path search: the toy graphs' cache in a few seconds.
SEARCH = {"max_hops": 3, "k_top": 4, "beam_width": 8, "lambda_topo": 1.0}


def path_cache_config(engine_config: dict | None = None, **path_cache) -> dict:
    """The toy search (SEARCH, changed by ``path_cache``) on the test Spark settings and
    ``engine_config``'s SQL engine (the ``engine_config`` fixture's; default DuckDB)."""
    return {**SPARK_CONFIG, **(engine_config or {"engine": {"name": "duckdb"}}),
            "path_cache": {**SEARCH, **path_cache}}


def path_cache_inputs(root: Path) -> dict:
    """Under ``root``: a synthetic dump (with questions.jsonl) → entities/relations/triples →
    node_gain (the real stage) and uniform-attention edges: the inputs path_cache gets in a
    build."""
    from lokg.pipeline.synth import generate
    from lokg.spark_jobs import node_gain

    dump = root / "dump"
    generate(dump, n_triples=400, seed=3, n_questions=20)
    assert (dump / "questions.jsonl").stat().st_size > 0
    tsv = pcsv.read_csv(dump / "kg.tsv", read_options=pcsv.ReadOptions(column_names=["s", "r", "o"]),
                        parse_options=pcsv.ParseOptions(delimiter="\t"))
    keys = sorted(set(tsv.column("s").to_pylist()) | set(tsv.column("o").to_pylist()))
    names = sorted(set(tsv.column("r").to_pylist()))
    ent, rel = {k: i for i, k in enumerate(keys)}, {n: i for i, n in enumerate(names)}
    triples = sorted({(ent[s], rel[r], ent[o]) for s, r, o in
                      zip(*(tsv.column(c).to_pylist() for c in "sro"))})
    inputs = write_inputs(root, len(keys) + 3, len(names), triples)  # 3 entities without edges
    entities = read_table(Path(inputs["entities"]), "entities")
    write_table("entities", entities.set_column(1, "key", pa.array(keys + ["x", "y", "z"])),
                Path(inputs["entities"]))
    inputs.update(node_gain.run(DUCKDB_CONFIG, inputs, str(root / "node_gain"))["outputs"])
    inputs["edges"] = str(root / "in" / "edges.parquet")
    write_table("edges", uniform_edges(read_table(Path(inputs["triples"]), "triples")),
                Path(inputs["edges"]))
    return {"inputs": inputs, "dump": dump, "root": root, "keys": keys + ["x", "y", "z"]}


def run_path_cache(inputs: dict, out: Path, engine_config: dict | None = None,
                   **path_cache) -> dict:
    """Stage path_cache on ``inputs`` into ``out``, with
    path_cache_config(engine_config, **path_cache)."""
    from lokg.spark_jobs import path_cache as stage

    return stage.run(path_cache_config(engine_config, **path_cache), inputs, str(out))


def expected_bucket(graph: EdgeGraph, heads, bucket: int, buckets: int) -> pa.Table:
    """Bucket ``bucket`` of ``buckets`` as top_paths gives it, run directly per head."""
    return paths_table(top_paths(graph, h, **SEARCH) for h in sorted(heads) if h % buckets == bucket)

"""Toy stores: a small film graph published complete (core tables, attention, μ, a path
cache), and minimal contract-conforming core tables."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from lokg.runtime import contract, taimr
from lokg.runtime.contract import TABLE_SCHEMAS, Store, write_table

# A small film graph: the 2-hop question "who directed X's sequel" has one right answer.
ENTITIES = [
    ("m.film1", "The Long Road", ["Long Road"], "a 1999 drama film", ["film.film"]),
    ("m.film2", "The Long Road II", [], "its sequel", ["film.film"]),
    ("m.dir1", "Ada Brook", ["A. Brook"], "film director", ["people.person"]),
    ("m.dir2", "Ben Stone", [], "film director", ["people.person"]),
    ("m.city", "Port Ellis", [], "a port city", ["location.city"]),
    ("m.ctry", "Norland", [], "a country", ["location.country"]),
    ("m.lone", "Lonely Island", [], "no facts at all", ["location.island"]),
]
RELATIONS = ["film.film.sequel", "film.film.directed_by", "people.person.place_of_birth",
             "location.city.country"]
TRIPLES = [(0, 0, 1), (0, 1, 2), (1, 1, 3), (2, 2, 4), (3, 2, 4), (4, 3, 5)]


def make_store(root, *, with_cache: bool = True, build_id: str = "toy",
               extra_files: dict | None = None, config: dict | None = None,
               mu: dict[int, float] | None = None) -> Store:
    """Publish a complete toy build: core tables, uniform attention, μ = 1 (or ``mu``'s, by
    entity id), a path cache (and ``extra_files``, build path → source file; ``config``, the
    build's recorded config)."""
    staging = root / "src"
    staging.mkdir(parents=True, exist_ok=True)
    entities = pa.table({
        "id": list(range(len(ENTITIES))), "key": [e[0] for e in ENTITIES],
        "name": [e[1] for e in ENTITIES], "aliases": [e[2] for e in ENTITIES],
        "description": [e[3] for e in ENTITIES], "types": [e[4] for e in ENTITIES],
        "attributes": [[] for _ in ENTITIES]}, schema=TABLE_SCHEMAS["entities"])
    relations = pa.table({"id": list(range(len(RELATIONS))), "name": RELATIONS})
    triples = pa.table({c: [t[i] for t in TRIPLES] for i, c in enumerate("sro")})
    edges = taimr.uniform_edges(triples)
    node_gain = pa.table({"id": list(range(len(ENTITIES))), "deg_in": [1] * len(ENTITIES),
                          "in_relations": [1] * len(ENTITIES),
                          "mu": [(mu or {}).get(i, 1.0) for i in range(len(ENTITIES))]})
    tables = {"entities": entities, "relations": relations, "triples": triples,
              "edges": edges, "node_gain": node_gain}
    paths = {}
    for name, table in tables.items():
        write_table(name, table, staging / f"{name}.parquet")
        paths[name] = staging / f"{name}.parquet"
    info = {"config": config or {}, "report": {"stages": {}}}
    if with_cache:
        graph = taimr.EdgeGraph.from_tables(edges, node_gain)
        cache = staging / "path_cache"
        cache.mkdir(exist_ok=True)
        buckets = 2
        per_head = [taimr.top_paths(graph, h) for h in range(len(ENTITIES) - 1)]  # not "lone"
        for b in range(buckets):
            write_table("path_cache", taimr.paths_table([p for p in per_head if p.head % buckets == b]),
                        cache / f"bucket-{b:05d}.parquet")
        paths["path_cache"] = cache
        info["report"]["stages"]["path_cache"] = {"buckets": buckets}
    store = Store(root / "store")
    store.publish(build_id, paths, info=info, extra_files=extra_files)
    return store



def stage_tables(tmp: Path, n_entities: int = 3) -> dict[str, Path]:
    """Contract-conforming core tables written with pyarrow (a Spark-free stand-in for stages)."""
    entities = pa.table({
        "id": list(range(n_entities)),
        "key": [f"m.{i}" for i in range(n_entities)],
        "name": [f"Entity {i}" for i in range(n_entities)],
        "aliases": [[] for _ in range(n_entities)],
        "description": [None] * n_entities,
        "types": [["people.person"]] * n_entities,
        "attributes": [[] for _ in range(n_entities)],
    })
    relations = pa.table({"id": [0], "name": ["people.person.spouse"]})
    triples = pa.table({"s": [0, 1], "r": [0, 0], "o": [1, 2]})
    paths = {}
    for name, table in (("entities", entities), ("relations", relations), ("triples", triples)):
        # triples as a Spark-style dataset directory, the others as single files
        path = tmp / (f"{name}.parquet/part-00000.parquet" if name == "triples" else f"{name}.parquet")
        contract.write_table(name, table, path)
        paths[name] = tmp / f"{name}.parquet"
    return paths


def publish_stage_tables(store: Store, tmp: Path, build_id: str, **kw) -> contract.Build:
    """Publish ``stage_tables`` (staged under ``tmp``) as build ``build_id``."""
    stage = tmp / f"stage-{build_id}"
    return store.publish(build_id, stage_tables(stage), **kw)

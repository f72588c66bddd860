"""path_cache (SQL on DuckDB and Spark; runtime.taimr): bucket files equal top_paths run
directly, per head."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lokg.runtime.contract import TABLE_SCHEMAS, read_table, write_table
from lokg.common.stage import StageError
from lokg.runtime.taimr import EdgeGraph, paths_table, top_paths, uniform_edges
from lokg.testing.stages import DUCKDB_CONFIG
from lokg.testing.stages import SPARK_CONFIG as CONFIG
from lokg.testing.stages import SEARCH, expected_bucket
from lokg.testing.stages import run_path_cache as run_stage


@pytest.fixture(scope="module")
def built(graph_inputs):
    return run_stage(graph_inputs["inputs"], graph_inputs["root"] / "cache", buckets=4)


def test_buckets_equal_top_paths_run_directly(graph_inputs, engine_config, tmp_path):
    built = run_stage(graph_inputs["inputs"], tmp_path / "cache", engine_config, buckets=4)
    inputs = graph_inputs["inputs"]
    graph = EdgeGraph.from_paths(inputs["edges"], inputs["node_gain"])
    heads = np.flatnonzero(graph.out_degree() > 0).tolist()
    assert len(heads) == graph.n_nodes - 3
    cache = Path(built["outputs"]["path_cache"])
    assert sorted(p.name for p in cache.iterdir()) == [f"bucket-{b:05d}.parquet" for b in range(4)]
    total = 0
    for b in range(4):
        got = pq.read_table(cache / f"bucket-{b:05d}.parquet")
        assert got.schema.names == TABLE_SCHEMAS["path_cache"].names
        assert got.cast(TABLE_SCHEMAS["path_cache"]).equals(expected_bucket(graph, heads, b, 4))
        total += got.num_rows
    report = built["report"]
    assert report["buckets"] == 4 and report["heads"] == len(heads)
    assert report["paths"] == total and report["heads_with_paths"] == len(heads)
    assert report["mean_paths_per_head"] == pytest.approx(total / len(heads), abs=1e-3)
    assert sum(report["paths_by_hops"].values()) == total and set(report["paths_by_hops"]) == {"1", "2", "3"}
    assert read_table(cache, "path_cache").num_rows == total  # the directory reads as one table
    assert report["engine"] == engine_config["engine"]["name"]


def test_rows_are_sorted_by_head_first_relation_direction_rank(built):
    cache = Path(built["outputs"]["path_cache"])
    for f in sorted(cache.iterdir()):
        t = pq.read_table(f)
        key = list(zip(t.column("head").to_pylist(),
                       pc.list_element(t.column("relations"), 0).to_pylist(),
                       pc.list_element(t.column("inverses"), 0).to_pylist(),
                       t.column("rank").to_pylist()))
        assert key == sorted(key) and len(set(key)) == len(key)
        assert {h % 4 for h in t.column("head").to_pylist()} == {int(f.stem[-5:])}


def test_the_cache_is_built_from_the_graph_alone(graph_inputs, built, tmp_path):
    """With the dump (and its questions.jsonl) among the inputs the output is the same as
    without it, and no Python code of the stage opens a file of the dump."""
    dump = str(graph_inputs["dump"].resolve())
    opened: list[str] = []

    def audit(event, args):
        if event == "open" and isinstance(args[0], (str, Path)) and str(args[0]).startswith(dump):
            opened.append(str(args[0]))

    sys.addaudithook(audit)  # hooks cannot be removed; this one only records paths under dump
    result = run_stage({**graph_inputs["inputs"], "dump": dump}, tmp_path / "with_dump", buckets=4)
    assert opened == []
    for b in range(4):
        name = f"bucket-{b:05d}.parquet"
        with_dump = pq.read_table(Path(result["outputs"]["path_cache"]) / name)
        assert with_dump.equals(pq.read_table(Path(built["outputs"]["path_cache"]) / name))
    assert not any(pa.types.is_string(f.type) for f in with_dump.schema)


def test_hot_set_heads_and_empty_buckets(graph_inputs, engine_config, tmp_path):
    keys = graph_inputs["keys"]
    hot = tmp_path / "hot.txt"
    hot.write_text(f"{keys[10]}\n\n  {keys[3]}  \n{keys[-1]}\n")  # blank line; last has no edges
    result = run_stage(graph_inputs["inputs"], tmp_path / "out", engine_config, buckets=7,
                       heads=str(hot))
    inputs = graph_inputs["inputs"]
    graph = EdgeGraph.from_paths(inputs["edges"], inputs["node_gain"])
    cache = Path(result["outputs"]["path_cache"])
    assert len(list(cache.iterdir())) == 7
    for b in range(7):
        got = pq.read_table(cache / f"bucket-{b:05d}.parquet").cast(TABLE_SCHEMAS["path_cache"])
        assert got.equals(expected_bucket(graph, [10, 3], b, 7))
    report = result["report"]
    assert report["heads"] == 3 and report["heads_with_paths"] == 2
    assert report["head_source"] == str(hot)


def test_unknown_hot_key_names_the_file_and_line(graph_inputs, engine_config, tmp_path):
    hot = tmp_path / "hot.txt"
    hot.write_text(f"{graph_inputs['keys'][0]}\nm.nope\n")
    with pytest.raises(StageError, match=r"hot\.txt: unknown entity keys \(line 2: 'm\.nope'\)"):
        run_stage(graph_inputs["inputs"], tmp_path / "out", engine_config, heads=str(hot))
    with pytest.raises(StageError, match="cannot read"):
        run_stage(graph_inputs["inputs"], tmp_path / "out", heads=str(tmp_path / "missing.txt"))


def test_bad_settings_and_inputs_are_refused(graph_inputs, tmp_path):
    with pytest.raises(StageError, match=r"path_cache\.buckets: 0 is out of range"):
        run_stage(graph_inputs["inputs"], tmp_path / "out", buckets=0)
    with pytest.raises(StageError, match=r"path_cache\.lambda_topo: 'x' has the wrong type"):
        run_stage(graph_inputs["inputs"], tmp_path / "out", lambda_topo="x")
    inputs = {k: v for k, v in graph_inputs["inputs"].items() if k != "edges"}
    with pytest.raises(StageError, match="needs input 'edges'"):
        run_stage(inputs, tmp_path / "out")


def _changed_graph(old: dict, root: Path, drop: int, moved_edge: int) -> dict:
    """``old``'s inputs with ``drop`` quiet triples removed (node_gain rerun, uniform α) and
    the α of edge ``moved_edge`` multiplied by 50: a retrained α on one edge only."""
    from lokg.spark_jobs import node_gain

    triples = read_table(Path(old["triples"]), "triples")
    s, o = triples["s"].to_numpy(), triples["o"].to_numpy()
    degree = np.bincount(np.concatenate([s, o]))
    quiet = np.argsort(np.where((degree[s] > 1) & (degree[o] > 1), degree[s] + degree[o], 1 << 30),
                       kind="stable")  # the triples of the least connected ends first
    new = {**old, "triples": str(root / "in" / "triples.parquet"),
           "edges": str(root / "in" / "edges.parquet")}
    write_table("triples", triples.take(np.setdiff1d(np.arange(len(s)), quiet[:drop])),
                Path(new["triples"]))
    new.update(node_gain.run(DUCKDB_CONFIG, new, str(root / "node_gain"))["outputs"])
    edges = uniform_edges(read_table(Path(new["triples"]), "triples"))
    moved = edges.column("attention").to_numpy().copy()
    moved[moved_edge] *= 50
    write_table("edges", edges.set_column(4, "attention", pa.array(moved)), Path(new["edges"]))
    return new


def assert_same_buckets(one: dict, other: dict, buckets: int = 4) -> None:
    """Two path_cache results hold the same bucket files, row for row."""
    for b in range(buckets):
        got, want = (pq.read_table(Path(r["outputs"]["path_cache"]) / f"bucket-{b:05d}.parquet")
                     for r in (one, other))
        assert got.equals(want), b


def _heads_within(graph: EdgeGraph, nodes: set, hops: int) -> set:
    reached = set(nodes)
    for _ in range(hops):
        reached |= {int(v) for u in reached for v in graph.targets[graph.indptr[u]:graph.indptr[u + 1]]}
    return reached


def test_a_refresh_searches_the_heads_near_a_change_and_equals_a_full_run(graph_inputs, built,
                                                                         engine_config, tmp_path,
                                                                         monkeypatch):
    """A triple removed and one α moved: the heads within max_hops − 1 hops of a changed
    node are searched anew, the others copied, and every bucket equals a full run's row for
    row. Some head two hops from every changed node gets other paths here (checked with
    top_paths directly), so a touched set walked one hop back instead of two fails."""
    from lokg.common.stage import PREVIOUS
    from lokg.spark_jobs import path_cache as stage

    monkeypatch.setattr(stage, "PARTIAL_MAX_SHARE", 1.0)  # partial however many are touched
    old = graph_inputs["inputs"]
    new = _changed_graph(old, tmp_path, drop=1, moved_edge=91)  # 91: see the assert below
    graphs = [EdgeGraph.from_paths(i["edges"], i["node_gain"]) for i in (old, new)]
    weights = [{u: sorted(zip(g.targets[g.indptr[u]:g.indptr[u + 1]].tolist(),
                              g.log_alpha[g.indptr[u]:g.indptr[u + 1]].tolist(),
                              g.log_mu[g.targets[g.indptr[u]:g.indptr[u + 1]]].tolist()))
                for u in range(g.n_nodes)} for g in graphs]
    changed = {u for u in weights[0] if weights[0][u] != weights[1][u]}
    heads = np.flatnonzero(graphs[1].out_degree() > 0).tolist()
    moved_paths = {h for h in heads if paths_table([top_paths(graphs[0], h, **SEARCH)]).to_pylist()
                   != paths_table([top_paths(graphs[1], h, **SEARCH)]).to_pylist()}
    assert moved_paths - _heads_within(graphs[1], changed, 1)  # the test can tell 1 hop from 2

    previous = {PREVIOUS + name: path for name, path in
                (*((n, old[n]) for n in ("edges", "node_gain", "entities")),
                 ("path_cache", built["outputs"]["path_cache"]))}
    partial = run_stage({**new, **previous}, tmp_path / "partial", engine_config, buckets=4)
    full = run_stage(new, tmp_path / "full", engine_config, buckets=4)
    assert_same_buckets(partial, full)
    near = _heads_within(graphs[1], changed, 2) & set(heads)
    assert partial["report"]["refresh"] == {"mode": "partial", "searched": len(near),
                                            "copied": len(heads) - len(near), "ids_moved": 0}
    assert len(heads) > len(near) and full["report"]["refresh"]["mode"] == "full"


def test_a_refresh_of_unchanged_edges_copies_every_head(graph_inputs, built, engine_config,
                                                        tmp_path):
    from lokg.common.stage import PREVIOUS

    inputs = graph_inputs["inputs"]
    previous = {PREVIOUS + n: inputs[n] for n in ("edges", "node_gain", "entities")}
    previous[PREVIOUS + "path_cache"] = built["outputs"]["path_cache"]
    again = run_stage({**inputs, **previous}, tmp_path / "again", engine_config, buckets=4)
    assert again["report"]["refresh"] == {"mode": "partial", "searched": 0,
                                          "copied": built["report"]["heads"], "ids_moved": 0}
    assert_same_buckets(again, built)


def _without_entity(old: dict, root: Path, gone: int) -> dict:
    """``old``'s inputs with entity ``gone`` and its triples removed, renumbered as ingest
    numbers (rank in key order: every id above it one lower), node_gain rerun, uniform α."""
    from lokg.spark_jobs import node_gain

    entities = read_table(Path(old["entities"]), "entities")
    kept = entities.filter(pc.not_equal(entities["id"], gone))
    new_id = np.cumsum(entities["id"].to_numpy() != gone) - 1  # old id → new (sorted by key)
    triples = read_table(Path(old["triples"]), "triples")
    s, r, o = (triples[c].to_numpy() for c in ("s", "r", "o"))
    live = (s != gone) & (o != gone)
    new = {**old, **{n: str(root / "in" / f"{n}.parquet") for n in ("entities", "triples", "edges")}}
    write_table("entities", kept.set_column(0, "id", pa.array(new_id[kept["id"].to_numpy()])),
                Path(new["entities"]))
    write_table("triples", pa.table({"s": new_id[s[live]], "r": r[live], "o": new_id[o[live]]},
                                    schema=TABLE_SCHEMAS["triples"]), Path(new["triples"]))
    new.update(node_gain.run(DUCKDB_CONFIG, new, str(root / "node_gain"))["outputs"])
    write_table("edges", uniform_edges(read_table(Path(new["triples"]), "triples")),
                Path(new["edges"]))
    return new


def test_a_refresh_that_shifts_the_ids_moves_the_copied_rows_and_equals_a_full_run(
        graph_inputs, built, engine_config, tmp_path, monkeypatch):
    """An entity with a low id removed: every id above it shifts down, so each copied row's
    head, nodes and bucket move — copied as they were, the buckets differ from a full run's."""
    from lokg.common.stage import PREVIOUS
    from lokg.spark_jobs import path_cache as stage

    monkeypatch.setattr(stage, "PARTIAL_MAX_SHARE", 1.0)  # partial however many are touched
    old = graph_inputs["inputs"]
    graph = EdgeGraph.from_paths(old["edges"], old["node_gain"])
    gone = int(np.flatnonzero(graph.out_degree() == 2)[0])  # a quiet entity with a low id
    new = _without_entity(old, tmp_path, gone)
    previous = {PREVIOUS + n: old[n] for n in ("edges", "node_gain", "entities")}
    previous[PREVIOUS + "path_cache"] = built["outputs"]["path_cache"]
    partial = run_stage({**new, **previous}, tmp_path / "partial", engine_config, buckets=4)
    full = run_stage(new, tmp_path / "full", engine_config, buckets=4)
    assert_same_buckets(partial, full)
    refresh = partial["report"]["refresh"]
    n_entities = read_table(Path(old["entities"]), columns=["id"]).num_rows
    assert refresh["mode"] == "partial" and refresh["ids_moved"] == n_entities - 1 - gone
    assert refresh["copied"] > 0 and refresh["searched"] > 0

"""path_cache for a hot set (issue 17 item 6): heads chosen by degree, μ or a query log, sized by
a share or a count; the runtime computes the other (cold) heads at query time, with the same
paths a cache of every head would have given."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from lokg.common.stage import StageError
from lokg.runtime.contract import TABLE_SCHEMAS, Store, read_table
from lokg.runtime.taimr import EdgeGraph
from lokg.testing.stages import expected_bucket
from lokg.testing.stages import path_cache_config as config
from lokg.testing.stages import run_path_cache as run_stage

BUCKETS = 4


def select(inputs: dict, engine_config: dict, **path_cache) -> tuple[list[int], dict, int]:
    """The stage's head selection alone, on the engine of ``engine_config``: (heads in id
    order, report facts, all heads)."""
    from lokg.spark_jobs import path_cache as stage
    from lokg.spark_jobs.engine import open_engine
    from lokg.spark_jobs.path_cache_heads import select_heads

    conf = config(engine_config, **path_cache)
    cfg = stage.settings(conf)
    with open_engine(conf) as engine:
        for name in ("edges", "node_gain", "entities"):
            engine.register(name, inputs[name])
        info, heads_all = select_heads(engine, cfg)
        heads = sorted(engine.fetch("SELECT head FROM heads").column("head").to_pylist())
    return heads, info, heads_all


def ranked(score: dict[int, float]) -> list[int]:
    """Heads by score, highest first, ties to the smaller id: the order the stage promises."""
    return sorted(score, key=lambda h: (-score[h], h))


@pytest.fixture(scope="module")
def degree(graph_inputs) -> dict[int, int]:
    """Out-degree in edges (inverses included) of every entity that has an out-edge."""
    s = read_table(Path(graph_inputs["inputs"]["edges"]), "edges").column("s").to_numpy()
    counts = np.bincount(s)
    return {int(h): int(counts[h]) for h in np.flatnonzero(counts)}


def test_degree_top_heads_exactly_with_ties_to_the_smaller_id(graph_inputs, degree, engine_config):
    order = ranked(degree)
    # a cut inside a run of equal degrees, so the tie-break decides who is in
    n = next(i for i in range(5, len(order)) if degree[order[i - 1]] == degree[order[i]])
    heads, info, heads_all = select(graph_inputs["inputs"], engine_config,
                                    heads="degree", hot_count=n)
    assert heads_all == len(degree) == len(graph_inputs["keys"]) - 3
    assert heads == sorted(order[:n])
    assert info["hot_set"] == {"selector": "degree", "share": None, "count": n, "requested": n}
    assert info["head_source"] == f"top {n:,} heads by out-degree in edges"


@pytest.mark.parametrize("share", [0.05, 0.1, 1 / 3, 1.0])
def test_a_share_of_all_heads_rounds_up(graph_inputs, degree, engine_config, share):
    heads, info, heads_all = select(graph_inputs["inputs"], engine_config,
                                    heads="degree", hot_share=share)
    n = math.ceil(share * heads_all - 1e-9)
    assert len(heads) == info["hot_set"]["requested"] == n and heads == sorted(ranked(degree)[:n])


def test_a_count_above_all_heads_takes_them_all(graph_inputs, degree, engine_config):
    heads, info, _ = select(graph_inputs["inputs"], engine_config,
                            heads="degree", hot_count=10 ** 9)
    assert heads == sorted(degree) and info["hot_set"]["requested"] == len(degree)


def test_mu_top_heads_exactly(graph_inputs, degree, engine_config):
    gain = read_table(Path(graph_inputs["inputs"]["node_gain"]), "node_gain").to_pydict()
    mu = {i: m for i, m in zip(gain["id"], gain["mu"]) if i in degree}  # heads only
    assert len(set(mu.values())) < len(mu)  # ties exist
    heads, info, _ = select(graph_inputs["inputs"], engine_config,
                            heads="mu", hot_share=0.2)
    assert heads == sorted(ranked(mu)[: math.ceil(0.2 * len(degree) - 1e-9)])
    assert info["head_source"].endswith("heads by node gain mu")


def test_query_log_counts_answers_linking_each_head(graph_inputs, engine_config, tmp_path):
    keys = graph_inputs["keys"]  # keys[i] is entity i; the last three have no edges
    log = tmp_path / "log"
    (log / "run" / "lokg").mkdir(parents=True)
    answers = [  # the Answer JSON (/v1/ask) carries linked[].key
        {"question": "q", "linked": [{"key": keys[7], "id": 7}, {"key": keys[7]}]},  # once
        {"linked": [{"key": keys[7]}, {"key": keys[2]}]},
        {"linked": [{"key": keys[40]}, {"key": "m.gone"}]},  # a key of another build
        {"linked": [{"key": keys[-1]}]},  # an entity without out-edges: never a head
        {"linked": []},
    ]
    evals = [{"id": "1", "details": {"linked": [{"key": keys[2]}, {"key": keys[5]}]}},
             {"id": "2", "details": {"linked": [{"key": keys[5]}]}}]  # lokg eval's records
    (log / "answers.jsonl").write_text("\n".join(map(json.dumps, answers)) + "\nnot json\n")
    (log / "run" / "lokg" / "predictions.jsonl").write_text("\n".join(map(json.dumps, evals)))
    # counts: 7 → 2, 2 → 2, 5 → 2, 40 → 1; ties to the smaller id: 2, 5, 7, then 40
    for n, expected in ((3, [2, 5, 7]), (4, [2, 5, 7, 40]), (50, [2, 5, 7, 40])):
        heads, info, _ = select(graph_inputs["inputs"], engine_config,
                                heads="query_log", hot_count=n,
                                query_log=str(log))
        assert heads == expected
    hot = info["hot_set"]
    assert (hot["log_lines"], hot["log_answers"], hot["log_unknown_keys"]) == (8, 6, 1)
    assert hot["requested"] == 50  # the log names fewer heads: the rest stay cold
    one, _, _ = select(graph_inputs["inputs"], engine_config,
                       heads="query_log", hot_count=2,
                       query_log=str(log / "answers.jsonl"))  # a single file
    assert one == [2, 7]
    indented = tmp_path / "indented.json"  # `lokg query --json` prints one answer over many lines
    indented.write_text(json.dumps(answers[0], indent=2))
    with pytest.raises(StageError, match=r"indented\.json: no line of its \d+ is an answer with "
                                         r"linked entities \(expected JSON lines"):
        select(graph_inputs["inputs"], engine_config,
               heads="query_log", hot_count=2, query_log=str(indented))


def test_the_stage_caches_exactly_the_hot_set_and_reports_it(graph_inputs, degree,
                                                             engine_config, tmp_path):
    inputs = graph_inputs["inputs"]
    result = run_stage(inputs, tmp_path / "out", engine_config, buckets=BUCKETS, heads="degree",
                       hot_share=0.25)
    hot = ranked(degree)[: math.ceil(0.25 * len(degree))]
    graph = EdgeGraph.from_paths(inputs["edges"], inputs["node_gain"])
    cache = Path(result["outputs"]["path_cache"])
    for b in range(BUCKETS):
        got = pq.read_table(cache / f"bucket-{b:05d}.parquet").cast(TABLE_SCHEMAS["path_cache"])
        assert got.equals(expected_bucket(graph, hot, b, BUCKETS))
    report = result["report"]
    assert (report["heads"], report["heads_all"]) == (len(hot), len(degree))
    assert report["heads_share"] == pytest.approx(len(hot) / len(degree), abs=1e-6)
    assert report["head_source"] == f"top 0.25 of {len(degree):,} heads by out-degree in edges"
    assert report["bytes"] == sum(f.stat().st_size for f in cache.iterdir())
    assert report["engine"] == engine_config["engine"]["name"]
    assert "search" in report["step_seconds"]


@pytest.mark.parametrize("path_cache,says", [
    ({"heads": "degree"}, "path_cache.heads: 'degree' needs the hot set's size"),
    ({"heads": "mu", "hot_share": 0.1, "hot_count": 5}, "are both set (set one of the two)"),
    ({"heads": "degree", "hot_share": 0}, "path_cache.hot_share: 0 is out of range"),
    ({"heads": "degree", "hot_share": 1.01}, "path_cache.hot_share: 1.01 is out of range"),
    ({"heads": "degree", "hot_count": 0}, "path_cache.hot_count: 0 is out of range"),
    ({"heads": "degree", "hot_count": True}, "path_cache.hot_count: True has the wrong type"),
    ({"heads": "all", "hot_share": 0.5}, "path_cache.hot_share: 0.5 applies only to "
                                         "path_cache.heads degree | mu | query_log"),
    ({"heads": "query_log", "hot_count": 5}, "path_cache.heads: 'query_log' needs "
                                             "path_cache.query_log"),
    ({"heads": "degree", "hot_count": 5, "query_log": "x.jsonl"},
     "path_cache.query_log: 'x.jsonl' applies only to path_cache.heads=query_log"),
    ({"heads": "query_log", "hot_count": 5, "query_log": "/nonexistent/log"},
     "path_cache.query_log: /nonexistent/log does not exist"),
])
def test_bad_hot_set_settings_are_refused_naming_key_and_value(graph_inputs, tmp_path,
                                                                path_cache, says):
    with pytest.raises(StageError) as err:
        run_stage(graph_inputs["inputs"], tmp_path / "out", **path_cache)
    assert says in str(err.value)


# ------------------------------------------------------------------- the runtime's cold heads

def publish(inputs: dict, result: dict, root: Path):
    """A store of the graph and this path_cache; its Runtime."""
    from lokg.runtime.query import Runtime

    tables = {n: Path(inputs[n])
              for n in ("entities", "relations", "triples", "edges", "node_gain")}
    tables["path_cache"] = Path(result["outputs"]["path_cache"])
    info = {"config": config(None, buckets=BUCKETS),
            "report": {"stages": {"path_cache": result["report"]}}}
    Store(root).publish("b1", tables, info=info)
    return Runtime.open(root)


@pytest.fixture(scope="module")
def runtimes(graph_inputs, degree, tmp_path_factory):
    root = tmp_path_factory.mktemp("hot_rt")
    inputs = graph_inputs["inputs"]
    everything = run_stage(inputs, root / "all", buckets=BUCKETS)
    hot = run_stage(inputs, root / "hot", buckets=BUCKETS, heads="degree", hot_share=0.1)
    return publish(inputs, everything, root / "s_all"), publish(inputs, hot, root / "s_hot")


def test_a_cold_head_gets_the_paths_a_full_cache_has(runtimes, degree):
    full, partial = runtimes
    hot = set(ranked(degree)[: math.ceil(0.1 * len(degree))])
    cold = [h for h in sorted(degree) if h not in hot]
    for head in [*sorted(hot)[:3], *cold[:10]]:
        cached, source = full.paths(head)
        got, got_source = partial.paths(head)
        assert source == "cache" and got_source == ("cache" if head in hot else "computed")
        assert got == cached
    assert partial.paths(len(degree))[0] == []  # an entity without edges: computed, no paths


def test_a_question_on_a_cold_head_answers_as_with_every_head_cached(runtimes, degree,
                                                                      graph_inputs):
    full, partial = runtimes
    hot = set(ranked(degree)[: math.ceil(0.1 * len(degree))])
    head = next(h for h in ranked(degree) if h not in hot)  # the best-connected cold head
    key = graph_inputs["keys"][head]
    a_full = full.ask("what is related to it?", entities=[key])
    a_part = partial.ask("what is related to it?", entities=[key])
    assert a_full.encoding["paths"] == {head: "cache"}
    assert a_part.encoding["paths"] == {head: "computed"}
    assert a_part.answers == a_full.answers and a_part.candidates == a_full.candidates
    assert a_part.triples == a_full.triples

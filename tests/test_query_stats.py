"""σ* and H(O|R) computed once per build (runtime/query_stats.py) and read back at open."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from lokg.runtime import ittc
from lokg.runtime.contract import Build, StoreError
from lokg.runtime.query import Runtime
from lokg.runtime.query_stats import QUERY_STATS_FILE, query_stats
from lokg.testing.stores import RELATIONS, TRIPLES, make_store

QUESTION = "Who directed the sequel of The Long Road?"


def tail_entropies_by_hand(triples: list[tuple[int, int, int]], n_relations: int) -> list[float]:
    """H(O|R=r) in bits, counted tail by tail."""
    out = []
    for r in range(n_relations):
        tails = Counter(o for _, rel, o in triples if rel == r)
        total = sum(tails.values())
        out.append(-sum(c / total * math.log2(c / total) for c in tails.values()))
    return out


def test_query_stats_are_what_open_computed():
    rng = np.random.default_rng(0)
    rows = sorted({tuple(t) for t in rng.integers(0, [40, 6, 40], size=(500, 3)).tolist()})
    rows += [(0, 7, 1)]  # relation 6 has no triple (H = 0), 7 a single one
    table = pa.table({c: [t[i] for t in rows] for i, c in enumerate("sro")})
    stats = query_stats(table, 8)
    assert stats["component_order"] == list(ittc.component_order(np.array(rows)))
    assert stats["tail_entropy_bits"] == pytest.approx(tail_entropies_by_hand(rows, 8), abs=1e-12)
    assert json.loads(json.dumps(stats)) == stats  # the stats file holds them exactly


def stats_store(tmp_path, stats: dict):
    tmp_path.mkdir()
    path = tmp_path / "query_stats.json"
    path.write_text(json.dumps(stats))
    make_store(tmp_path, extra_files={QUERY_STATS_FILE: path})
    return tmp_path / "store"


def test_open_takes_the_stats_from_the_build_and_leaves_the_triples_unread(tmp_path,
                                                                           monkeypatch):
    make_store(tmp_path / "older")  # a build published before the stats file: computed at open
    computed = Runtime.open(tmp_path / "older" / "store")
    table = pa.table({c: [t[i] for t in TRIPLES] for i, c in enumerate("sro")})
    store = stats_store(tmp_path / "new", query_stats(table, len(RELATIONS)))
    read, real_read = [], Build.read
    monkeypatch.setattr(Build, "read", lambda self, name, columns=None:
                        read.append(name) or real_read(self, name, columns))
    rt = Runtime.open(store)
    assert "triples" not in read and read  # edges and node_gain stand in for the triples
    assert rt.order == computed.order
    np.testing.assert_array_equal(rt.tail_entropy, computed.tail_entropy)
    assert {**rt.ask(QUESTION).to_dict(), "timings": None} == \
        {**computed.ask(QUESTION).to_dict(), "timings": None}


def test_the_stats_file_is_authoritative_and_checked(tmp_path):
    planted = {"component_order": ["o", "s", "r"], "tail_entropy_bits": [0.5] * len(RELATIONS)}
    rt = Runtime.open(stats_store(tmp_path / "planted", planted))
    assert rt.order == ("o", "s", "r") and rt.tail_entropy.tolist() == [0.5] * len(RELATIONS)
    assert rt.ask(QUESTION).encoding["order"] == ["o", "s", "r"]
    short = {**planted, "tail_entropy_bits": [0.5]}
    with pytest.raises(StoreError, match="query_stats.json"):
        Runtime.open(stats_store(tmp_path / "short", short))

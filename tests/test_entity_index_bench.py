"""bench/entity_index.py: its queries sit at the asked cosine to their entity, its recall counts
the exact neighbours an index finds, and a run builds the stage's HNSW index and reports it."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("faiss")

from bench.common import noisy_queries, recall  # noqa: E402
from bench.entity_index import main  # noqa: E402


def unit_rows(n: int, dim: int = 64, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_queries_are_unit_vectors_at_the_asked_cosine_to_their_entity():
    vectors = unit_rows(2000, dim=384)
    queries = noisy_queries(vectors, 500, 0.8, seed=1)
    np.testing.assert_allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-5)
    best = (queries @ vectors.T).max(axis=1)
    assert abs(float(best.mean()) - 0.8) < 0.02


def test_recall_counts_the_exact_top_k_found_and_the_same_first_hit():
    exact = np.array([[1, 2, 3], [4, 5, 6]])
    found = np.array([[1, 3, 9], [5, 4, 6]])
    assert recall(found, exact) == {"recall_at_k": round((2 / 3 + 1) / 2, 4), "recall_at_1": 0.5}


def test_a_run_reports_each_configured_build(tmp_path, capsys):
    np.save(tmp_path / "v.npy", unit_rows(1500))
    main(["--vectors", str(tmp_path / "v.npy"), "--rows", "1000", "--config", "1:40",
          "--config", "2:16", "--queries", "100", "--k", "5"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["threads"], r["ef_construction"], r["rows"]) for r in rows] == [(1, 40, 1000),
                                                                               (2, 16, 1000)]
    assert all(r["recall_at_1"] >= 0.95 and 0 < r["recall_at_k"] <= 1 for r in rows)

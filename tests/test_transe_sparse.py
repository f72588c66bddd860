"""The sparse CPU trainer of stage transe (training/transe_sparse.py, ``transe.trainer=sparse``).

Tiny graphs, a few seconds each: it learns (loss falls, a duplicated relation ends closer than
an unrelated one, an inverse points the other way), its row-wise Adam is SparseAdam's update,
the per-relation sample and the convergence stop do what the config says, and a seed fixes the
result.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")

from lokg.pipeline.config import DEFAULTS  # noqa: E402
from lokg.runtime.contract import write_table  # noqa: E402
from lokg.training import transe  # noqa: E402
from lokg.training.transe import TransEError  # noqa: E402
from lokg.training.transe_sparse import LossPlateau, RelationStrata, RowAdam, train_sparse  # noqa: E402

COPY_A, COPY_B, INVERSE, OTHER = 0, 1, 2, 3


def toy_graph() -> np.ndarray:
    """0 and 1 hold the same (s, o) pairs, 2 holds them reversed, 3 is unrelated (acyclic)."""
    pairs = sorted({(s, 20 + s) for s in range(20)} | {(s, 20 + (s + 7) % 20) for s in range(20)})
    other = sorted({(40 + i, i) for i in range(20)} | {(40 + i, (i + 3) % 20) for i in range(20)})
    rows = [(s, r, o) for r in (COPY_A, COPY_B) for s, o in pairs]
    rows += [(o, INVERSE, s) for s, o in pairs] + [(s, OTHER, o) for s, o in other]
    return np.array(rows, dtype=np.int64)


def cfg(**overrides) -> dict:
    out = dict(DEFAULTS["transe"])
    out.update({"trainer": "sparse", "device": "cpu", "dim": 16, "batch_size": 32,
                "learning_rate": 0.05, "epochs": 40, "tolerance": 0.0,
                "min_steps": 0, "loss_patience": 0})
    out.update(overrides)
    return out


def train(**overrides):
    return train_sparse(toy_graph(), 60, 4, cfg(**overrides), torch.device("cpu"), lambda m: None)


def cos(a, b) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def trained():
    return train()


def test_it_learns(trained):
    losses, rel = trained.losses, trained.relation.numpy()
    assert len(losses) == 40 and trained.triples_seen == 40 * len(toy_graph())
    assert np.mean(losses[-5:]) < 0.3 * losses[0]
    assert cos(rel[COPY_A], rel[COPY_B]) > cos(rel[COPY_A], rel[OTHER]) + 0.5
    assert cos(rel[COPY_A], rel[COPY_B]) > cos(rel[COPY_B], rel[OTHER]) + 0.5
    # TransE puts an inverse at -r: anti-aligned, more so than to the unrelated relation (which
    # shares the inverse's tail entities, so it is not orthogonal to it)
    assert cos(rel[COPY_A], rel[INVERSE]) < -0.5
    assert abs(cos(rel[COPY_A], rel[INVERSE])) > abs(cos(rel[INVERSE], rel[OTHER])) + 0.1
    # entities stay on the unit sphere (TransE's constraint)
    np.testing.assert_allclose(np.linalg.norm(trained.entity.numpy(), axis=1), 1.0, rtol=1e-5)


def test_same_seed_same_vectors_other_seed_other_vectors(trained):
    np.testing.assert_array_equal(train().relation.numpy(), trained.relation.numpy())
    assert not np.allclose(train(seed=1).relation.numpy(), trained.relation.numpy())


def test_row_adam_is_sparse_adams_update():
    """The written-out update against torch.optim.SparseAdam on the same sparse gradients."""
    gen = torch.Generator().manual_seed(0)
    start = torch.randn(10, 4, generator=gen)
    emb = torch.nn.Embedding.from_pretrained(start.clone(), freeze=False, sparse=True)
    reference = torch.optim.SparseAdam(list(emb.parameters()), lr=0.1)
    ours = RowAdam(start.clone(), lr=0.1, unit=False)
    for idx in (torch.tensor([1, 3, 4]), torch.tensor([3, 7]), torch.tensor([0, 1, 3])):
        grad = torch.randn(len(idx), 4, generator=gen)
        reference.zero_grad()
        (emb(idx) * grad).sum().backward()
        reference.step()
        ours.step(idx, ours.table[idx], grad)
    torch.testing.assert_close(ours.weight, emb.weight.detach())


def test_relation_sample_caps_each_relation_and_draws_anew():
    relations = np.array([0] * 50 + [1] * 3 + [2] * 20)
    strata = RelationStrata(relations, cap=10)
    gen = torch.Generator().manual_seed(0)
    first, second = strata.epoch(gen), strata.epoch(gen)
    for picked in (first, second):
        assert len(set(picked.tolist())) == len(picked) == 10 + 3 + 10
        assert np.bincount(relations[picked.numpy()]).tolist() == [10, 3, 10]
    assert set(first.tolist()) != set(second.tolist())
    assert sorted(RelationStrata(relations, cap=None).epoch(gen).tolist()) == list(range(73))


def test_tolerance_stops_training_once_relations_settle():
    loose = train(tolerance=0.2)
    assert loose.converged and 1 < len(loose.losses) < 40
    assert loose.changes[-1] < 0.2 <= min(loose.changes[1:-1], default=1.0)
    never = train(tolerance=0.0, epochs=5)
    assert not never.converged and len(never.losses) == 5 and len(never.changes) == 5


def test_min_steps_holds_the_stop_until_enough_batches_ran():
    """160 triples in batches of 32: 5 steps an epoch, so 100 steps are 20 epochs at least."""
    early = train(tolerance=0.2)
    held = train(tolerance=0.2, min_steps=100)
    assert len(early.losses) < 20
    assert held.converged and len(held.losses) >= 20


def test_loss_plateau_stops_training_once_the_loss_is_flat():
    """A tolerance no epoch's loss gain reaches stops after ``patience`` epochs; the step
    floor holds it as it holds the relation rule."""
    full = train()
    flat = train(loss_tolerance=0.99, loss_patience=3)
    assert flat.converged and len(flat.losses) == 4  # epoch 1 sets the best, 3 more are flat
    assert flat.losses == full.losses[:4]
    held = train(loss_tolerance=0.99, loss_patience=3, min_steps=100)
    assert held.converged and len(held.losses) == 20
    assert not full.converged and len(full.losses) == 40


def test_loss_plateau_waits_for_a_gain_of_loss_tolerance():
    plateau = LossPlateau(tolerance=0.1, patience=2)
    assert [plateau.flat(x) for x in (1.0, 0.95, 0.85, 0.80, 0.79)] == [
        False, False, False, False, True]  # 0.85 is the last 10 % gain
    assert not any(LossPlateau(0.1, 0).flat(x) for x in (1.0, 1.0, 1.0))


def write_inputs(root: Path) -> dict[str, str]:
    names = {0: "copy_a", 1: "copy_b", 2: "inverse", 3: "other", 4: "unseen"}
    write_table("relations", pa.table({"id": list(names), "name": list(names.values())}),
                root / "relations.parquet")
    g = toy_graph()
    write_table("triples", pa.table({"s": g[:, 0], "r": g[:, 1], "o": g[:, 2]}),
                root / "triples.parquet")
    return {"triples": str(root / "triples.parquet"), "relations": str(root / "relations.parquet")}


def test_stage_run_dir_describes_the_sparse_run(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = transe.run({"transe": cfg(epochs=6, tolerance=0.0)}, write_inputs(tmp_path), str(out))
    report, run_dir = result["report"], Path(result["outputs"]["transe_run"])
    assert report["trainer"] == "sparse" and report["epochs"] == 6 and not report["converged"]
    emb = np.load(result["outputs"]["relation_embeddings"])
    assert emb.shape == (5, 16) and not emb[4].any() and report["unseen_relations"] == 1
    config = json.loads((run_dir / "config.json").read_text())
    assert config["trainer"] == "sparse" and config["transe"]["relation_sample"] == 50000
    losses = json.loads((run_dir / "losses.json").read_text())
    assert len(losses["losses"]) == len(losses["relation_change"]) == 6
    assert json.loads((run_dir / "timing.json").read_text())["epochs"] == 6
    saved = torch.load(run_dir / "trained_model.pt")
    np.testing.assert_array_equal(saved["relation_embeddings"].numpy()[:4], emb[:4])
    assert saved["entity_embeddings"].shape == (60, 16)


@pytest.mark.parametrize("override, message", [
    ({"trainer": "dgl"}, "transe.trainer: 'dgl' is not one of the choices"),
    ({"tolerance": 2}, "transe.tolerance: 2 is out of range"),
    ({"relation_sample": 0}, "transe.relation_sample: 0 is out of range"),
    ({"loss_patience": -1}, "transe.loss_patience: -1 is out of range"),
])
def test_bad_settings_are_refused_by_name(override, message):
    with pytest.raises(TransEError, match=message):
        transe.transe_config({"transe": override})


def test_evaluate_needs_pykeen(tmp_path):
    with pytest.raises(TransEError, match="transe.evaluate needs transe.trainer=pykeen"):
        transe.run({"transe": cfg(evaluate=True)}, write_inputs(tmp_path), str(tmp_path))


def test_auto_is_pykeen_on_cuda_and_sparse_on_cpu():
    assert transe.trainer_for({"trainer": "auto"}, torch.device("cpu")) == "sparse"
    assert transe.trainer_for({"trainer": "auto"}, torch.device("cuda")) == "pykeen"
    assert transe.trainer_for({"trainer": "pykeen"}, torch.device("cpu")) == "pykeen"

"""Stage transe (training/transe.py) with ``transe.trainer=pykeen``: embeddings indexed by our ids.

The sparse CPU trainer (the CPU default) has its own file, tests/test_transe_sparse.py.

Tiny graphs and few epochs: the whole file runs in well under a minute on 2 cores (most of it is
importing PyKEEN once). Device-parametrised in the style of PyG's tests: CPU always, CUDA when
the installed torch sees one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pykeen")

from lokg.pipeline.config import DEFAULTS  # noqa: E402
from lokg.runtime.contract import write_table  # noqa: E402
from lokg.common.stage import torch_threads  # noqa: E402
from lokg.runtime.encoder import resolve_device  # noqa: E402
from lokg.training import transe  # noqa: E402
from lokg.common.neighbours import nearest_relations  # noqa: E402
from lokg.training.transe import TransEError  # noqa: E402

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="no CUDA device")),
]

# Relation ids deliberately NOT in sorted-label order: PyKEEN's from_labeled_triples would map
# "10" -> 0, "2" -> 1, "alpha" -> 2, "zeta" -> 3, so any label-based mapping permutes the rows.
RELATION_NAMES = {0: "zeta", 1: "10", 2: "2", 3: "alpha"}
COPY_A, UNSEEN, COPY_B, OTHER = 0, 1, 2, 3
N_ENTITIES = 60


def toy_graph() -> list[tuple[int, int, int]]:
    """Relations 0 and 2 hold exactly the same (s, o) pairs; 3 is unrelated; 1 has no triple.

    Acyclic and bipartite on purpose (TransE cannot represent cycles, which leaves the direction
    of a cyclic relation's vector to chance): the copies map entities 0-19 to 20-39, the
    unrelated relation maps 40-59 to 0-19.
    """
    copy_pairs = {(s, 20 + s) for s in range(20)} | {(s, 20 + (s + 7) % 20) for s in range(20)}
    other_pairs = {(40 + i, i) for i in range(20)} | {(40 + i, (i + 3) % 20) for i in range(20)}
    triples = [(s, COPY_A, o) for s, o in sorted(copy_pairs)]
    triples += [(s, COPY_B, o) for s, o in sorted(copy_pairs)]
    triples += [(s, OTHER, o) for s, o in sorted(other_pairs)]
    return triples


def write_inputs(root: Path) -> dict[str, str]:
    # relations table rows in a shuffled order too: the stage must index by the id column
    ids = [3, 0, 2, 1]
    write_table("relations", pa.table({"id": ids, "name": [RELATION_NAMES[i] for i in ids]}),
                root / "relations.parquet")
    s, r, o = zip(*toy_graph())
    write_table("triples", pa.table({"s": list(s), "r": list(r), "o": list(o)}),
                root / "triples.parquet")
    return {"triples": str(root / "triples.parquet"), "relations": str(root / "relations.parquet")}


def config(**transe_overrides) -> dict:
    cfg = {"transe": dict(DEFAULTS["transe"])}
    cfg["transe"].update({"trainer": "pykeen", "epochs": 30, "batch_size": 32,
                          "learning_rate": 0.05, "dim": 16, "device": "cpu"})
    cfg["transe"].update(transe_overrides)
    return cfg


def run_stage(tmp: Path, **overrides) -> tuple[dict, Path]:
    inputs = write_inputs(tmp / "in")
    out = tmp / "out"
    out.mkdir(parents=True)
    return transe.run(config(**overrides), inputs, str(out)), out


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One CPU run of the stage, shared by the checks that only read its outputs."""
    return run_stage(tmp_path_factory.mktemp("transe"))


# --------------------------------------------------------------------------------------------
# the stage


@pytest.mark.parametrize("device", DEVICES)
def test_stage_outputs_and_run_dir(tmp_path, device):
    result, out = run_stage(tmp_path, device=device, epochs=3)
    outputs, report = result["outputs"], result["report"]
    assert set(outputs) == {"relation_embeddings", "transe_run"}
    emb = np.load(outputs["relation_embeddings"])
    assert emb.dtype == np.float32 and emb.shape == (4, 16)

    run_dir = Path(outputs["transe_run"])
    assert run_dir == out / "transe"
    for name in ("config.json", "losses.json", "timing.json", "trained_model.pkl",
                 "relation_to_id.tsv"):
        assert (run_dir / name).is_file(), name
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["seed"] == 0 and cfg["transe"]["seed"] == 0
    assert cfg["device"].startswith(device)
    assert cfg["transe"]["dim"] == 16 and cfg["transe"]["epochs"] == 3
    assert cfg["versions"]["pykeen"] and cfg["versions"]["torch"] == torch.__version__
    assert len(json.loads((run_dir / "losses.json").read_text())["losses"]) == 3
    timing = json.loads((run_dir / "timing.json").read_text())
    assert timing["seconds"] > 0 and timing["triples_per_second"] > 0
    assert (run_dir / "relation_to_id.tsv").read_text().splitlines()[1:] == [
        f"{i}\t{RELATION_NAMES[i]}" for i in range(4)]

    for key in ("epochs", "dim", "device", "seconds", "final_loss", "triples"):
        assert key in report, key
    assert report["epochs"] == 3 and report["dim"] == 16 and report["triples"] == len(toy_graph())
    assert report["device"].startswith(device)

    # the saved model is PyKEEN's, on CPU, and its relation rows are ours (row i = id i)
    model = torch.load(run_dir / "trained_model.pkl", weights_only=False)
    with torch.no_grad():
        saved = model.relation_representations[0](indices=None).numpy()
    for r in (COPY_A, COPY_B, OTHER):
        np.testing.assert_allclose(saved[r], emb[r], rtol=1e-6)


def test_rows_are_indexed_by_our_relation_ids(trained):
    result, _ = trained
    emb = np.load(result["outputs"]["relation_embeddings"])
    # relation 1 ("10") has no triple: zero row and a warning naming it
    assert not emb[UNSEEN].any()
    assert all(np.linalg.norm(emb[r]) > 0 for r in (COPY_A, COPY_B, OTHER))
    assert result["report"]["unseen_relations"] == 1
    assert any("1 (10)" in w for w in result["report"]["warnings"])


def test_copied_relations_end_up_closer_than_an_unrelated_one(trained):
    result, _ = trained
    emb = np.load(result["outputs"]["relation_embeddings"])
    assert cos(emb[COPY_A], emb[COPY_B]) > cos(emb[COPY_A], emb[OTHER]) + 0.2
    assert cos(emb[COPY_A], emb[COPY_B]) > cos(emb[COPY_B], emb[OTHER]) + 0.2
    first = nearest_relations(emb, 1)
    assert (COPY_A, COPY_B) in {(i, j) for i, j, _ in first}
    assert (COPY_B, COPY_A) in {(i, j) for i, j, _ in first}


def test_losses_decrease(trained):
    _, out = trained
    losses = json.loads((out / "transe" / "losses.json").read_text())["losses"]
    assert len(losses) == 30 and all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0]
    assert np.mean(losses[-5:]) < np.mean(losses[:5])


def test_seed_reproducible(trained, tmp_path):
    result, _ = trained
    emb0 = np.load(result["outputs"]["relation_embeddings"])
    again, _ = run_stage(tmp_path / "same")
    np.testing.assert_array_equal(np.load(again["outputs"]["relation_embeddings"]), emb0)
    other, out = run_stage(tmp_path / "other", seed=1)
    emb1 = np.load(other["outputs"]["relation_embeddings"])
    assert not np.allclose(emb1, emb0)
    assert json.loads((out / "transe" / "config.json").read_text())["seed"] == 1


def test_held_out_eval_on_nations(tmp_path):
    """Optional quick link-prediction eval on PyKEEN's bundled Nations (ships in the wheel)."""
    from pykeen.datasets import Nations

    tf = Nations().training
    mapped = tf.mapped_triples.numpy()
    root = tmp_path / "in"
    id_to_rel = {i: n for n, i in tf.relation_to_id.items()}
    write_table("relations", pa.table({"id": list(id_to_rel), "name": list(id_to_rel.values())}),
                root / "relations.parquet")
    write_table("triples", pa.table({"s": mapped[:, 0], "r": mapped[:, 1], "o": mapped[:, 2]}),
                root / "triples.parquet")
    out = tmp_path / "out"
    out.mkdir()
    result = transe.run(config(epochs=2, batch_size=256, evaluate=True),
                        {"triples": str(root / "triples.parquet"),
                         "relations": str(root / "relations.parquet")}, str(out))
    ev = result["report"]["eval"]
    assert ev["test_triples"] == pytest.approx(0.05 * len(mapped), abs=2)
    assert result["report"]["triples"] == len(mapped) - ev["test_triples"]
    assert 0.0 < ev["mrr"] <= 1.0 and 0.0 <= ev["hits_at_10"] <= 1.0
    assert (out / "transe" / "results.json").is_file()


def test_bad_inputs_and_config(tmp_path):
    with pytest.raises(TransEError, match="unknown config key"):
        transe.transe_config({"transe": {"dims": 3}})
    with pytest.raises(TransEError, match="device"):
        transe.transe_config({"transe": {"device": "tpu"}})
    with pytest.raises(TransEError, match="needs input 'triples'"):
        transe.run(config(), {"relations": "x"}, str(tmp_path))
    if not torch.cuda.is_available():
        with pytest.raises(TransEError, match="transe.device='cuda'.*no CUDA"):
            resolve_device("cuda", setting="transe.device", error=TransEError)
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")


def test_torch_threads_are_restored_after_the_block_even_on_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError), torch_threads(before + 1):
        assert torch.get_num_threads() == before + 1
        raise RuntimeError("stage failed")
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before


def test_config_defaults_follow_the_design():
    assert DEFAULTS["transe"]["dim"] == 64 and DEFAULTS["transe"]["epochs"] == 100


# --------------------------------------------------------------------------------------------
# nearest_relations


def test_nearest_relations_hand_made():
    emb = np.array([
        [1.0, 0.0, 0.0],  # 0
        [0.9, 0.1, 0.0],  # 1: nearest to 0
        [0.0, 1.0, 0.0],  # 2
        [0.0, 0.0, 0.0],  # 3: untrained, excluded both ways
        [-1.0, 0.0, 0.0],  # 4: opposite of 0
        [0.1, 1.0, 0.0],  # 5: nearest to 2
    ], dtype=np.float32)
    one = nearest_relations(emb, 1)
    assert [(i, j) for i, j, _ in one] == [(0, 1), (1, 0), (2, 5), (4, 2), (5, 2)]
    assert one[0][2] == pytest.approx(0.9 / np.hypot(0.9, 0.1))
    # ties (4 is orthogonal to 2 and 5 is almost) resolve deterministically; self never appears
    two = nearest_relations(emb, 2)
    assert all(i != j for i, j, _ in two)
    assert [j for i, j, _ in two if i == 0] == [1, 5]
    sims = [c for i, _, c in two if i == 0]
    assert sims == sorted(sims, reverse=True)
    # k larger than the vocabulary: every other non-zero relation, once
    every = nearest_relations(emb, 100)
    assert len(every) == 5 * 4 and 3 not in {x for i, j, _ in every for x in (i, j)}
    assert nearest_relations(emb, 0) == []
    assert nearest_relations(np.zeros((3, 2)), 2) == []
    # blockwise computation gives the same answer
    assert nearest_relations(emb, 2, block=2) == two

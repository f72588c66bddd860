"""Stage ``transe``: TransE relation embeddings with PyKEEN.

Inputs (contract tables written by ``ingest``):

* ``triples``   — ``triples(s, r, o)`` with integer ids;
* ``relations`` — ``relations(id, name)``; the relation vocabulary R₀ = ids 0..R-1;
* ``entities``  — ``entities(id, key)``: read only by a refresh's warm start.

Refresh (``previous:`` inputs: same code and settings, changed triples; pipeline/refresh.py).
The sparse trainer starts from the previous build's entity and relation vectors
(``transe/trained_model.pt``), carried over by entity key and relation name
(training/warm_start.py: new keys get the usual initialisation, removed ones are dropped), and
trains at most ``transe.refresh_epochs`` epochs (the stopping rules below still apply). A
refresh without those parameters (PyKEEN trainer, ``refresh_epochs`` 0) trains from scratch;
the report's ``refresh`` says warm or cold and why.

Outputs in ``out_dir``:

* ``relation_embeddings.npy`` — float32 ``[num_relations, dim]``; **row i is relation id i** of
  the ``relations`` table. A relation that has no triple (PyKEEN never sees it) gets a zero row
  and a report warning — a random, untrained vector would produce meaningless cosine neighbours.
* ``transe/`` — a self-describing PyKEEN-style run directory: ``config.json`` (hyperparameters,
  seed, device, library versions, graph sizes), ``losses.json`` (per-epoch loss),
  ``timing.json`` (seconds, triples/s), ``trained_model.pkl`` (the whole PyKEEN model, saved on
  CPU with ``torch.save`` exactly as PyKEEN's ``save_to_directory`` does; load it with
  ``torch.load(path, weights_only=False)``), ``relation_to_id.tsv`` (id, name) and, with
  ``evaluate``, ``results.json`` (link-prediction metrics on the held-out share).

Id mapping. The PyKEEN triples factory is built with ``CoreTriplesFactory.create`` from our
integer arrays, so PyKEEN's entity/relation indices *are* our ids — there is no label sorting
(``TriplesFactory.from_labeled_triples`` sorts labels as strings, which silently permutes ids).

Why not ``pykeen.pipeline.pipeline``: it always runs a final rank-based evaluation over a testing
factory, which is slow (every test triple is scored against every entity) and which this stage
does not need. We use the very same components the pipeline wires together — ``TransE``,
``SLCWATrainingLoop`` (sLCWA, basic negative sampler), ``MarginRankingLoss`` (TransE's default),
Adam — and run ``RankBasedEvaluator`` only when ``transe.evaluate`` is set.

``gc.freeze()`` is called around training: PyKEEN calls ``gc.collect()`` after every epoch, and
with a large heap (PyKEEN + torch + pyarrow imported) that full collection otherwise dominates
small runs.
"""

from __future__ import annotations

import gc
import json
import platform
import sys
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lokg.common.stage import StageError, previous_inputs, torch_threads

from lokg.runtime.contract import StoreError, read_table
from lokg.runtime.encoder import resolve_device
from lokg.training.settings import TranseSettings
from lokg.training.warm_start import (cold, match_by_key, next_reference, reference_loss,
                                 refresh_epochs, stop_loss, warm)

STAGE = "transe"



class TransEError(StageError):
    """Bad input or configuration for the TransE stage; the message names the cause."""


# --------------------------------------------------------------------------------------------
# helpers usable without torch


def transe_config(config: Mapping) -> TranseSettings:
    """The ``transe`` section of a build config, completed by its defaults and checked."""
    return TranseSettings.of(config, TransEError)


def load_graph(triples_path: str | Path, relations_path: str | Path
               ) -> tuple[np.ndarray, list[str], int]:
    """(mapped triples int64 [n, 3] in s, r, o order; relation names by id; num_entities)."""
    rel = read_table(Path(relations_path), "relations")
    rel_ids = rel.column("id").to_numpy()
    num_relations = int(rel_ids.max()) + 1 if len(rel_ids) else 0
    if len(rel_ids) and (rel_ids.min() < 0 or len(np.unique(rel_ids)) != len(rel_ids)):
        raise StoreError(f"{relations_path}: relation ids must be distinct and >= 0")
    names = [f"<unnamed {i}>" for i in range(num_relations)]
    for i, name in zip(rel_ids.tolist(), rel.column("name").to_pylist()):
        names[i] = name
    tri = read_table(Path(triples_path), "triples")
    mapped = np.stack([tri.column(c).to_numpy() for c in ("s", "r", "o")], axis=1).astype(np.int64)
    if len(mapped):
        if mapped.min() < 0:
            raise StoreError(f"{triples_path}: negative ids in triples")
        if mapped[:, 1].max() >= num_relations:
            raise StoreError(f"{triples_path}: relation id {int(mapped[:, 1].max())} is not in "
                             f"{relations_path} (ids < {num_relations})")
    num_entities = int(mapped[:, [0, 2]].max()) + 1 if len(mapped) else 0
    return mapped, names, num_entities


# --------------------------------------------------------------------------------------------
# training (imports torch / PyKEEN lazily)


@dataclass
class TrainResult:
    embeddings: np.ndarray  # float32 [num_relations, dim], zero rows for unseen relations
    losses: list[float]
    seconds: float
    device: str
    model: object  # the PyKEEN model (on CPU), or the sparse trainer's embedding tensors
    unseen_relations: list[int]
    triples: int  # triples trained on
    epochs: int  # epochs run
    triples_seen: int  # triples drawn over all epochs (relation_sample caps each epoch)
    converged: bool | None = None  # relation vectors settled below transe.tolerance (sparse)
    relation_changes: list[float] = field(default_factory=list)  # per epoch (sparse trainer)
    metrics: dict = field(default_factory=dict)
    hyperparameters: dict = field(default_factory=dict)
    eval_loss: dict = field(default_factory=dict)  # sparse: before (with a stop bound), after


def trainer_for(cfg: Mapping, device) -> str:
    """``transe.trainer`` resolved: ``auto`` = PyKEEN on CUDA, the sparse torch loop on CPU."""
    if cfg["trainer"] != "auto":
        return str(cfg["trainer"])
    return "pykeen" if device.type == "cuda" else "sparse"


def transe_device(cfg: Mapping):
    """The torch device ``transe.device`` names (auto: CUDA when torch sees one)."""
    import torch

    return torch.device(resolve_device(str(cfg["device"]), setting="transe.device",
                                       error=TransEError))


def train_transe(mapped: np.ndarray, num_entities: int, num_relations: int, cfg: Mapping,
                 log=lambda msg: print(msg, file=sys.stderr), start=None,
                 stop: float | None = None) -> TrainResult:
    """Train TransE on id triples (our ids = PyKEEN ids) and return relation embeddings by id;
    ``start``: a warm start's rows (``warm_start_rows``; the sparse trainer only), ``stop``:
    no epoch while their eval loss is at most this (``training.warm_start.stop_loss``)."""
    if len(mapped) == 0:
        raise TransEError("transe: the triples table is empty")
    seed = int(cfg["seed"])
    device = transe_device(cfg)
    sparse = trainer_for(cfg, device) == "sparse"
    if start is not None and not sparse:
        raise TransEError("transe: a warm start needs transe.trainer=sparse")
    with torch_threads(cfg.get("threads")):
        if sparse:
            return _train_sparse(mapped, num_entities, num_relations, cfg, device, log, start,
                                 stop)
        return _train_pykeen(mapped, num_entities, num_relations, cfg, seed, device, log)


def warm_start_rows(inputs: Mapping[str, str], cfg: Mapping, num_entities: int,
                    num_relations: int) -> tuple[dict | None, dict]:
    """In a refresh: the previous build's entity and relation vectors for the keys this build
    still has (``training.warm_start``), and the report entry saying warm; else None and the
    entry saying cold and why."""
    import torch

    if not int(cfg["refresh_epochs"]):
        return None, cold("transe.refresh_epochs is 0")
    previous = previous_inputs(inputs, "entities", "relations", "transe_run")
    if previous is None or "entities" not in inputs:
        return None, cold("no previous build's entities, relations and transe run (full build)")
    if trainer_for(cfg, transe_device(cfg)) != "sparse":
        return None, cold("a warm start needs the sparse trainer (this run: pykeen)")
    model_file = previous["transe_run"] / "trained_model.pt"
    if not model_file.is_file():
        return None, cold(f"the previous build has no sparse-trainer parameters ({model_file})")
    saved = torch.load(model_file, weights_only=True)
    ent, rel = saved["entity_embeddings"], saved["relation_embeddings"]
    if ent.shape[1] != int(cfg["dim"]):
        return None, cold(f"the previous vectors have dim {ent.shape[1]}, "
                          f"transe.dim is {cfg['dim']}")
    entities = match_by_key(inputs["entities"], previous["entities"], "key", num_entities,
                            len(ent))
    relations = match_by_key(inputs["relations"], previous["relations"], "name", num_relations,
                             len(rel))
    start = {"entity": (entities.current, ent[entities.previous]),
             "relation": (relations.current, rel[relations.previous])}
    return start, warm(refresh_epochs(cfg), entities=entities, relations=relations)


def _train_sparse(mapped, num_entities, num_relations, cfg, device, log, start, stop
                  ) -> TrainResult:
    """The CPU-scale trainer (training/transe_sparse.py) wrapped in the stage's result."""
    import torch

    from lokg.training.transe_sparse import train_sparse

    if cfg["evaluate"]:
        raise TransEError("transe.evaluate needs transe.trainer=pykeen (its rank-based evaluator)")
    started = time.perf_counter()
    run = train_sparse(mapped, num_entities, num_relations, cfg, device, log, start, stop)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - started
    emb = run.relation.cpu().numpy().astype(np.float32)
    unseen = np.flatnonzero(np.bincount(mapped[:, 1], minlength=num_relations) == 0)
    emb[unseen] = 0.0
    return TrainResult(
        embeddings=emb, losses=run.losses, seconds=seconds, device=str(device),
        model={"entity_embeddings": run.entity.cpu(), "relation_embeddings": run.relation.cpu()},
        unseen_relations=[int(i) for i in unseen], triples=len(mapped),
        epochs=len(run.losses), triples_seen=run.triples_seen, converged=run.converged,
        relation_changes=run.changes,
        eval_loss={"before": run.eval_before, "after": run.eval_after},
        hyperparameters={
            "model": "TransE", "trainer": "sparse", "training_loop": "sLCWA",
            "negative_sampler": "basic (head or tail)", "loss": "MarginRankingLoss",
            "optimizer": "SparseAdam update on the rows a batch touches",
            "batch_size_used": int(cfg["batch_size"]), "num_entities": int(num_entities),
            "num_relations": int(num_relations), "torch_threads": torch.get_num_threads(),
        },
    )


def _train_pykeen(mapped, num_entities, num_relations, cfg, seed, device, log) -> TrainResult:
    """PyKEEN's TransE and sLCWA loop (the CUDA trainer), with its rank-based held-out metrics
    when ``transe.evaluate`` asks for them."""
    import torch
    from pykeen.triples import CoreTriplesFactory
    from pykeen.utils import set_random_seed

    set_random_seed(seed)
    factory = CoreTriplesFactory.create(torch.as_tensor(mapped, dtype=torch.long),
                                        num_entities=num_entities, num_relations=num_relations)
    training, testing = factory, None
    if cfg["evaluate"]:
        share = float(cfg["eval_share"])
        # PyKEEN's split keeps every entity and relation of the test part in the training part
        training, testing = factory.split([1.0 - share, share], random_state=seed)
        set_random_seed(seed)
    model, loop = _pykeen_model_and_loop(training, cfg, seed, device)
    batch_size = min(int(cfg["batch_size"]), training.num_triples)
    started = time.perf_counter()
    losses = _pykeen_fit(loop, training, int(cfg["epochs"]), batch_size, device)
    seconds = time.perf_counter() - started
    metrics = {} if testing is None else _held_out_metrics(model, training, testing, log)
    return _pykeen_result(model.cpu(), training, num_entities, num_relations, batch_size,
                          losses, seconds, device, metrics)


def _pykeen_model_and_loop(training, cfg: Mapping, seed: int, device):
    from pykeen.losses import MarginRankingLoss
    from pykeen.models import TransE
    from pykeen.training import SLCWATrainingLoop

    model = TransE(
        triples_factory=training,
        embedding_dim=int(cfg["dim"]),
        scoring_fct_norm=int(cfg["scoring_norm"]),
        loss=MarginRankingLoss(margin=float(cfg["margin"])),
        random_seed=seed,
    ).to(device)
    loop = SLCWATrainingLoop(
        model=model,
        triples_factory=training,
        optimizer="adam",
        optimizer_kwargs={"lr": float(cfg["learning_rate"])},
        negative_sampler="basic",
        negative_sampler_kwargs={"num_negs_per_pos": int(cfg["negatives"])},
        # PyKEEN's batch/sub-batch probing only means something on a GPU (on CPU it runs extra
        # probe batches before training and warns); keep it where it can avoid an OOM
        automatic_memory_optimization=device.type == "cuda",
    )
    return model, loop


def _pykeen_fit(loop, training, epochs: int, batch_size: int, device) -> list[float]:
    """The loop's losses per epoch; the heap frozen meanwhile (PyKEEN's many small tensors make
    the cyclic collector's passes dominate otherwise)."""
    import torch

    gc.collect()
    gc.freeze()
    try:
        with warnings.catch_warnings():
            # PyKEEN 1.11 passes its own deprecated shuffle= argument internally
            warnings.filterwarnings("ignore", message="Training instances are always shuffled")
            losses = loop.train(triples_factory=training, num_epochs=epochs,
                                batch_size=batch_size, use_tqdm=False, use_tqdm_batch=False,
                                pin_memory=device.type == "cuda")
    finally:
        gc.unfreeze()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return [float(x) for x in (losses or [])]


def _held_out_metrics(model, training, testing, log) -> dict:
    from pykeen.evaluation import RankBasedEvaluator

    started = time.perf_counter()
    results = RankBasedEvaluator().evaluate(
        model=model, mapped_triples=testing.mapped_triples,
        additional_filter_triples=[training.mapped_triples],
        batch_size=256, use_tqdm=False)
    metrics = {
        "test_triples": int(testing.num_triples),
        "mrr": float(results.get_metric("both.realistic.inverse_harmonic_mean_rank")),
        "hits_at_1": float(results.get_metric("both.realistic.hits_at_1")),
        "hits_at_10": float(results.get_metric("both.realistic.hits_at_10")),
        "seconds": round(time.perf_counter() - started, 3),
    }
    log(f"transe: held-out eval {metrics}")
    return metrics


def _pykeen_result(model, training, num_entities, num_relations, batch_size, losses, seconds,
                   device, metrics) -> TrainResult:
    """Relation vectors by id (relations without a training triple zeroed) in the result."""
    import torch

    with torch.no_grad():
        emb = model.relation_representations[0](indices=None).detach().numpy().astype(np.float32)
    counts = np.bincount(training.mapped_triples[:, 1].numpy(), minlength=num_relations)
    unseen = np.flatnonzero(counts == 0)
    emb = np.ascontiguousarray(emb.reshape(num_relations, -1))
    emb[unseen] = 0.0
    return TrainResult(
        embeddings=emb, losses=losses, seconds=seconds, device=str(device), model=model,
        unseen_relations=[int(i) for i in unseen], triples=int(training.num_triples),
        epochs=len(losses), triples_seen=int(training.num_triples) * len(losses),
        metrics=metrics,
        hyperparameters={
            "model": "TransE", "trainer": "pykeen", "training_loop": "sLCWA",
            "negative_sampler": "basic",
            "loss": "MarginRankingLoss", "optimizer": "Adam", "batch_size_used": batch_size,
            "num_entities": int(num_entities), "num_relations": int(num_relations),
            "torch_threads": torch.get_num_threads(),
        },
    )


# --------------------------------------------------------------------------------------------
# the stage


def _versions() -> dict:
    import pykeen.version
    import torch

    return {"python": platform.python_version(), "numpy": np.__version__,
            "torch": torch.__version__, "pykeen": pykeen.version.get_version(),
            "cuda": torch.version.cuda}


def _write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _unseen_warning(result: TrainResult, names: list[str]) -> list[str]:
    """The report warning naming relations without a triple (they get zero rows)."""
    if not result.unseen_relations:
        return []
    shown = ", ".join(f"{i} ({names[i]})" for i in result.unseen_relations[:10])
    more = len(result.unseen_relations) - 10
    msg = (f"{len(result.unseen_relations)} relation(s) have no training triple and get a zero "
           f"embedding: {shown}" + (f" and {more} more" if more > 0 else ""))
    print(f"WARNING transe: {msg}", file=sys.stderr)
    return [msg]


def _timing(result: TrainResult) -> dict:
    """timing.json: epochs run and throughput over the triples actually drawn."""
    rate = result.triples_seen / result.seconds if result.seconds > 0 else None
    return {"seconds": round(result.seconds, 3), "epochs": result.epochs,
            "triples": result.triples, "triples_seen": result.triples_seen,
            "seconds_per_epoch": round(result.seconds / max(result.epochs, 1), 4),
            "triples_per_second": round(rate, 1) if rate else None}


def _write_run_dir(run_dir: Path, cfg: Mapping, result: TrainResult, names: list[str],
                   refresh: dict, reference: float | None) -> None:
    """The self-describing run directory: config + versions, losses, timing, model, ids."""
    import torch

    sparse = result.hyperparameters["trainer"] == "sparse"
    _write_json(run_dir / "config.json", {
        "stage": STAGE, "transe": cfg, "seed": int(cfg["seed"]), "device": result.device,
        "refresh": refresh,
        **result.hyperparameters, "triples": result.triples,
        "unseen_relations": result.unseen_relations,
        "embedding_rows": "row i of relation_embeddings.npy = relations.id i",
        "versions": _versions(),
    })
    _write_json(run_dir / "losses.json", {
        "loss": result.hyperparameters["loss"], "per": "epoch", "losses": result.losses,
        **({"relation_change": result.relation_changes, "converged": result.converged,
            "eval": {**result.eval_loss, "reference": reference}} if sparse else {})})
    _write_json(run_dir / "timing.json", _timing(result))
    if result.metrics:
        _write_json(run_dir / "results.json", result.metrics)
    with open(run_dir / "relation_to_id.tsv", "w", encoding="utf-8") as fh:
        fh.write("id\tname\n")
        fh.writelines(f"{i}\t{n}\n" for i, n in enumerate(names))
    # PyKEEN: the whole model (torch.load(..., weights_only=False)); sparse: the two tensors
    model_file = "trained_model.pt" if sparse else "trained_model.pkl"
    torch.save(result.model, run_dir / model_file)


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    """Stage entry point: train TransE on ``inputs['triples']``, write embeddings + run dir."""
    cfg = transe_config(config)
    for name in ("triples", "relations"):
        if name not in inputs:
            raise TransEError(f"transe needs input '{name}' (run ingest first)")
    out = Path(out_dir)
    run_dir = out / "transe"
    run_dir.mkdir(parents=True, exist_ok=True)

    mapped, names, num_entities = load_graph(inputs["triples"], inputs["relations"])
    start, refresh = warm_start_rows(inputs, cfg, num_entities, len(names))
    epochs = {"epochs": refresh["epochs"]} if start is not None else {}
    reference = (reference_loss(previous_inputs(inputs, "transe_run")["transe_run"], "eval")
                 if start is not None else None)
    stop = stop_loss(cfg, reference)
    result = train_transe(mapped, num_entities, len(names), {**cfg, **epochs}, start=start,
                          stop=stop)
    reference = next_reference(refresh, stop, bool(result.epochs), "eval_loss",
                               result.eval_loss.get("before"), result.eval_loss.get("after"),
                               reference)
    emb_path = out / "relation_embeddings.npy"
    np.save(emb_path, result.embeddings)
    _write_run_dir(run_dir, cfg, result, names, refresh, reference)
    timing = _timing(result)
    report = {
        "refresh": refresh,
        "trainer": result.hyperparameters["trainer"], "epochs": result.epochs,
        "converged": result.converged, "dim": int(cfg["dim"]), "seed": int(cfg["seed"]),
        "device": result.device, "batch_size": result.hyperparameters["batch_size_used"],
        "seconds": timing["seconds"], "triples_per_second": timing["triples_per_second"],
        "final_loss": result.losses[-1] if result.losses else None,
        "triples": result.triples, "relations": len(names), "entities": num_entities,
        "unseen_relations": len(result.unseen_relations),
        "warnings": _unseen_warning(result, names),
    }
    if result.metrics:
        report["eval"] = result.metrics
    return {"outputs": {"relation_embeddings": str(emb_path), "transe_run": str(run_dir)},
            "report": report}

"""Stage ``gat``: relation-aware graph attention → per-edge α for TAIMR.

The walk graph and its inputs (``training.gat_inputs``), the gold paths (``training.gat_gold``),
the model (``training.gat_model``) and its training (``training.gat_train``,
``training.gat_sampler``) live beside this module, which reads the settings, warm-starts a
refresh and writes the run.

Refresh (``previous:`` inputs: same code and settings, changed input data; pipeline/refresh.py).
The model starts from the previous build's ``gat/model.pt``: the layers (not indexed by entity
or relation) as they were, ``relation_diag`` rows carried over by canonical relation name (a new
relation gets the usual ones; training/warm_start.py), and trains ``gat.refresh_epochs`` epochs
(at most ``gat.epochs``) at ``gat.refresh_learning_rate``: Adam's state starts afresh, and at
the full rate its first steps undo much of the previous training. Before those epochs the
previous parameters are scored on this build's graph (the fixed-negative eval link loss); when
that is within ``gat.refresh_loss_margin`` of the loss of the last build that trained
(``losses.json`` ``eval_link.reference``, ``reference_loss``), the epochs are skipped and α is
that one forward pass — the previous model re-inferred on the new graph and inputs (the report's
``refresh``: ``epochs`` 0, ``stopped`` with both losses). Without those parameters, or when they
do not fit (another encoder width), it trains from scratch; the report's ``refresh`` says warm
or cold and why.

Memory (``build.memory_gb``). The graph is 13 bytes an edge (int32 ids where they fit), built
a block of source nodes at a time, each block sorted on its own within its share of the budget
(``gat_inputs.Graph.from_triples``; the same graph as one sort); the sampler adds 4 bytes an
edge (its shuffled order, reshuffled a block at a time) and the training pass 8 a triple (the
forward edge ids and their shuffled pass). The entity vectors stay in their memory-mapped
``entity_vectors.npy`` and are read a block's nodes at a time (``gat_inputs.NodeFeatures``), as
the layer outputs are from disk (``gat_rows.gather``: a bounded group of rows under each
mapping, so the mapped pages of a file of any size never pile up in the process). A sampled
training step is checked against its share of the budget before each hop is drawn and runs in
halves of its batch when it does not fit, so a sample past the share is never built
(``gat_train``); the α export runs in blocks of source nodes sized by the budget, each with its
full out-neighbourhood (exact), its layer outputs and α on disk under ``.gat-scratch/``
(removed after the run) and ``edges.parquet`` written a block at a time. What still grows with
the dump, beside the budget: those ~21 bytes an edge and 24 a node (CSR offsets, the sampler's
node map, the feature rows' index), and the export block of a hub: a node's whole
out-neighbourhood is one block (its softmax is exact), so a node of out-degree d takes ~3 kB
× d, whatever the budget (the synthetic dumps' largest hub has 359k edges at 10⁷ triples).

Run directory ``gat/``: config.json (settings, seed, device, sizes, versions, objective),
losses.json (per epoch: link, path; and ``eval_link``: the fixed-negative link loss before and
after training, which the next refresh compares with), model.pt (state_dict), timing.json.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lokg.common.resources import BuildSettings
from lokg.common.stage import Laps, StageError, previous_inputs, torch_threads
from lokg.runtime.contract import TABLE_SCHEMAS, read_table, write_table
from lokg.runtime.encoder import resolve_device
from lokg.runtime.taimr import uniform_edges
from lokg.training.settings import GatSettings
from lokg.training.gat_gold import gold_edges, parse_questions, resolve_paths
from lokg.training.gat_inputs import (Graph, NodeFeatures, build_block_edges, read_triples,
                                      relation_vectors)
from lokg.training.gat_model import build_model
from lokg.training.gat_train import TrainResult, fit
from lokg.training.warm_start import (cold, match_by_key, next_reference, reference_loss,
                                 refresh_epochs, stop_loss, warm)

STAGE = "gat"
SPLIT_NAMES = ("dev", "test", "valid", "validation")  # never trained on
WRITE_ROWS = 1 << 20  # edges per written block of the edges table


def settings(config: Mapping) -> GatSettings:
    """The ``gat`` section, checked (unknown keys and bad values name themselves)."""
    return GatSettings.of(config, StageError)


def train(graph: Graph, x, rel_np: np.ndarray, gold: np.ndarray, cfg: Mapping,
          log=lambda msg: print(msg, file=sys.stderr), state: dict | None = None,
          scratch: Path | None = None, memory_gb: float | None = None) -> TrainResult:
    """Train the GAT (full batch or sampled subgraphs) and return α before/after and losses;
    ``x``: node features (``NodeFeatures`` or an array); ``state``: parameters to start from (a
    refresh's warm start, ``warm_start_state``); ``scratch``, ``memory_gb``: ``gat_train.fit``."""
    import torch

    device = torch.device(resolve_device(str(cfg["device"]), setting=f"{STAGE}.device",
                                         error=StageError))
    with torch_threads(cfg.get("threads")):
        return fit(graph, x, rel_np, gold, cfg, device, lambda msg: log(f"{STAGE}: {msg}"),
                   state, scratch, memory_gb)


def warm_start_state(inputs: Mapping[str, str], cfg: Mapping, fresh: Mapping) -> tuple[
        dict | None, dict]:
    """In a refresh: the previous build's parameters for a model whose fresh state_dict is
    ``fresh`` (``relation_diag`` rows carried over by canonical relation name, new relations
    keeping their fresh rows), and the report entry saying warm; else None and the entry
    saying cold and why. The layers are not indexed by entity or relation: taken as they are."""
    import torch

    if not int(cfg["refresh_epochs"]):
        return None, cold(f"{STAGE}.refresh_epochs is 0")
    previous = previous_inputs(inputs, "relations", "gat_run")
    model_file = previous["gat_run"] / "model.pt" if previous else None
    if model_file is None or not model_file.is_file():
        return None, cold("no previous build's relations and GAT parameters (full build, or "
                          "a previous gat.uniform run)")
    saved = torch.load(model_file, weights_only=True)
    diag = "relation_diag"
    changed = sorted(k for k in fresh if k != diag and (
        k not in saved or saved[k].shape != fresh[k].shape))
    if changed or set(saved) != set(fresh) or saved[diag].shape[1] != fresh[diag].shape[1]:
        return None, cold(f"the previous parameters do not fit this model ({changed or 'keys'} "
                          f"differ: another encoder or layer settings)")
    relations = match_by_key(inputs["relations"], previous["relations"], "name",
                             len(fresh[diag]), len(saved[diag]))
    state = {**saved, diag: fresh[diag].clone()}
    state[diag][torch.as_tensor(relations.current)] = saved[diag][relations.previous]
    return state, warm(refresh_epochs(cfg), relations=relations)


def _versions() -> dict:
    import torch
    import torch_geometric

    return {"python": platform.python_version(), "numpy": np.__version__,
            "torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
            "cuda": torch.version.cuda}


def _write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _mean(values: np.ndarray) -> float | None:
    return round(float(values.mean()), 6) if len(values) else None


def _first_last(values: list) -> dict:
    return {"first": values[0], "last": values[-1]} if values and values[0] is not None else {}


def load_gold(cfg: Mapping, inputs: Mapping[str, str], graph: Graph) -> tuple[np.ndarray, dict]:
    """Gold-path edge ids from ``gat.questions`` (empty without it) and counts for the report."""
    if not cfg["questions"]:
        return np.zeros(0, dtype=np.int64), {}
    path = Path(str(cfg["questions"]))
    if path.stem.lower() in SPLIT_NAMES:
        raise StageError(f"{STAGE}.questions={path}: a {path.stem} split; the path term trains "
                         f"on training questions only")
    raw = parse_questions(path)
    paths, unknown = resolve_paths(raw, inputs["entities"], inputs["relation_map"])
    gold, missed = gold_edges(paths, graph)
    stats = {"file": str(path), "lines": raw.lines, "distinct_paths": len(raw.paths),
             "unknown_key_or_relation": unknown, "no_walk": missed, "gold_edges": len(gold)}
    if not len(gold):
        print(f"WARNING {STAGE}: {path} gives no gold-path edge in this graph {stats}",
              file=sys.stderr)
    return gold, stats


def _check_inputs(cfg: Mapping, inputs: Mapping[str, str]) -> None:
    needed = ["triples", "relations"] + ([] if cfg["uniform"] else
                                         ["relation_map", "relation_embeddings", "entity_vectors",
                                          "entity_ids"])
    if cfg["questions"]:
        needed += ["entities", "relation_map"]
    missing = sorted({n for n in needed if n not in inputs})
    if missing:
        raise StageError(f"{STAGE} needs inputs {missing} (have {sorted(inputs)})")


def _read_graph(inputs: Mapping[str, str], memory_gb: float) -> tuple[int, Graph, int]:
    """The triple count, their graph (inverses added, built in blocks sized by ``memory_gb``)
    and the relation count; refused when the triples are empty or name a relation the relations
    table lacks."""
    triples = read_triples(inputs["triples"])
    if not len(triples):
        raise StageError(f"{inputs['triples']}: the triples table is empty")
    relation_ids = read_table(Path(inputs["relations"]), "relations").column("id").to_numpy()
    num_relations = int(relation_ids.max()) + 1
    if triples[:, 1].max() >= num_relations:
        raise StageError(f"{inputs['triples']}: relation id {int(triples[:, 1].max())} is not in "
                         f"{inputs['relations']}")
    num_nodes = int(max(triples[:, 0].max(), triples[:, 2].max())) + 1
    return len(triples), Graph.from_triples(triples, num_nodes, build_block_edges(memory_gb)), \
        num_relations


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    """Stage entry point: train the GAT (or the uniform ablation); write edges + run dir."""
    cfg = settings(config)
    _check_inputs(cfg, inputs)
    out = Path(out_dir)
    run_dir = out / "gat"
    run_dir.mkdir(parents=True, exist_ok=True)
    lap = Laps()
    memory_gb = BuildSettings.of(config, StageError).memory_gb
    n_triples, graph, num_relations = _read_graph(inputs, memory_gb)
    gold, gold_stats = load_gold(cfg, inputs, graph)
    lap("read_graph")

    report: dict = {"nodes": graph.num_nodes, "edges": graph.num_edges, "triples": n_triples,
                    "relations": num_relations, "uniform": bool(cfg["uniform"])}
    if gold_stats:
        report["questions"] = gold_stats
        report["gold_attention_uniform"] = _mean(1.0 / graph.out_degree()[graph.src[gold]])
    run_config = {"stage": STAGE, "gat": cfg, "seed": int(cfg["seed"]), "nodes": graph.num_nodes,
                  "edges": graph.num_edges, "relations": num_relations, "versions": _versions()}
    if cfg["uniform"]:
        timing = _write_uniform(inputs, run_config, report, out, lap)
    else:
        scratch = out / ".gat-scratch"  # α and layer outputs on disk while they are written
        try:
            timing = _train_and_write(cfg, inputs, graph, gold, run_config, report, out, lap,
                                      memory_gb, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    _write_json(run_dir / "timing.json", {"step_seconds": lap.seconds, **timing})
    report["step_seconds"] = lap.seconds
    return {"outputs": {"edges": str(out / "edges.parquet"), "gat_run": str(run_dir)},
            "report": report}


def _write_uniform(inputs: Mapping[str, str], run_config: dict, report: dict, out: Path,
                   lap: Laps) -> dict:
    """The ablation: α = 1/out-degree, no model."""
    report.update(refresh=cold(f"{STAGE}.uniform: no model to train"), device=None)
    tri = read_table(Path(inputs["triples"]), "triples")
    write_table("edges", uniform_edges(tri), out / "edges.parquet")
    _write_json(out / "gat" / "config.json", {**run_config, "objective": "none (uniform "
                                              "ablation: α = 1/out-degree)", "device": None})
    lap("write")
    return {}


def _train_and_write(cfg: Mapping, inputs: Mapping[str, str], graph: Graph, gold: np.ndarray,
                     run_config: dict, report: dict, out: Path, lap: Laps, memory_gb: float,
                     scratch: Path) -> dict:
    """Train (warm from the previous build in a refresh), write the edges with α and the
    self-describing run directory; the report gains the losses. Returns the epoch timings."""
    x = NodeFeatures(inputs["entity_vectors"], inputs["entity_ids"], graph.num_nodes)
    rel_vec = relation_vectors(inputs["relation_embeddings"], inputs["relation_map"],
                               run_config["relations"])
    state, report["refresh"] = warm_start_state(
        inputs, cfg, build_model(x.shape[1], rel_vec.shape[1], len(rel_vec), cfg).state_dict())
    lap("read_features")
    reference = (reference_loss(previous_inputs(inputs, "gat_run")["gat_run"], "eval_link")
                 if state is not None else None)
    warm_cfg = {"epochs": report["refresh"]["epochs"],
                "learning_rate": cfg["refresh_learning_rate"],
                "stop_loss": stop_loss(cfg, reference)} if state is not None else {}
    result = train(graph, x, rel_vec, gold, {**cfg, **warm_cfg}, state=state, scratch=scratch,
                   memory_gb=memory_gb)
    lap("train")
    reference = next_reference(report["refresh"], warm_cfg.get("stop_loss"), bool(result.link),
                               "eval_link_loss", result.eval_link_before,
                               result.eval_link_after, reference)

    write_edges(graph, result.attention.read, out / "edges.parquet")
    _write_run(out / "gat", result, run_config, report["refresh"], x.shape[1], rel_vec.shape[1],
               reference)
    lap("write")
    report.update(_trained_report(result, gold, bool(report.get("questions"))))
    return {"epoch_seconds": result.epoch_seconds}


def write_edges(graph: Graph, attention, path: Path) -> None:
    """The ``edges`` table, ``WRITE_ROWS`` edges at a time: the graph's columns and
    ``attention(e0, e1)``, the α of edges e0..e1-1."""
    schema = TABLE_SCHEMAS["edges"]
    with pq.ParquetWriter(path, schema) as writer:
        for e0 in range(0, graph.num_edges, WRITE_ROWS):
            e1 = min(e0 + WRITE_ROWS, graph.num_edges)
            writer.write_table(pa.table({
                "s": graph.src[e0:e1], "r": graph.rel[e0:e1], "o": graph.dst[e0:e1],
                "inverse": graph.inverse[e0:e1], "attention": attention(e0, e1)}).cast(schema))


def _write_run(run_dir: Path, result: TrainResult, run_config: dict, refresh: dict,
               node_dim: int, relation_dim: int, reference: float | None) -> None:
    """The self-describing run directory: model.pt, config.json and losses.json."""
    import torch

    torch.save(result.model.state_dict(), run_dir / "model.pt")
    _write_json(run_dir / "config.json", {
        **run_config, "device": result.device, "mode": result.mode, "refresh": refresh,
        "node_dim": int(node_dim), "relation_dim": int(relation_dim),
        "output_dim": int(result.model.out_dim),
        "objective": ("BCE link prediction (DistMult on z, corrupted tails) + path_weight * "
                      "(-mean log alpha over gold-path edges)"),
    })
    _write_json(run_dir / "losses.json", {
        "per": "epoch", "link": result.link, "path": result.path,
        "eval_link": {"before": result.eval_link_before, "after": result.eval_link_after,
                      "reference": reference}})


def _trained_report(result: TrainResult, gold: np.ndarray, with_gold: bool) -> dict:
    report = {
        "device": result.device, "mode": result.mode, "epochs": len(result.link),
        "link_loss": _first_last(result.link), "path_loss": _first_last(result.path),
        "eval_link_loss": {"before": round(result.eval_link_before, 6),
                           "after": round(result.eval_link_after, 6)},
        "seconds_per_epoch": (round(float(np.mean(result.epoch_seconds)), 4)
                              if result.epoch_seconds else None),
    }
    if with_gold:
        report["gold_attention"] = {"before": _mean(result.attention_before[gold]),
                                    "after": _mean(result.attention[gold])}
    return report

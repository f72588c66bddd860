"""Which stopping signal could end the sparse TransE trainer? Per-epoch signals.

    python -m bench.transe_stop_signals --ingest STORE/refresh/BUILD/ingest --epochs 60 \\
        [--halve-on-plateau 5] [--json out.json]

Trains ``training/transe_sparse.py``'s loop on an ingest's ``triples``/``relations`` with the
stage's defaults (one torch thread), its own stops switched off, and prints per epoch what a
stop rule could watch: the loss, the mean relation turn (the stage's ``transe.tolerance``
signal), the share of the relations' k-nearest-neighbour pairs (k = ``relation_stats.
transe_neighbours``, what relation_stats proposes from TransE) that changed since the epoch
before, the mean |Δ cos| over all relation pairs (what SCOS's cosine term reads), and the share
of "strong" pairs (cos ≥ 0.5) that changed. ``--halve-on-plateau P`` halves the learning rate
whenever the loss has not fallen 1 % below its best for P epochs, and stops once the turn is
below ``transe.tolerance`` after a halving: the learning-rate-decay variant.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


class Geometry:
    """The relations' pair structure at the last epoch, to diff the next one against."""

    def __init__(self, k: int):
        self.k, self.pairs, self.cos, self.strong = k, None, None, None

    def update(self, emb: np.ndarray) -> dict:
        from lokg.common.neighbours import nearest_relations

        pairs = {(min(i, j), max(i, j)) for i, j, _ in nearest_relations(emb, self.k)}
        unit = emb[np.linalg.norm(emb, axis=1) > 0]
        unit = unit / np.linalg.norm(unit, axis=1, keepdims=True)
        cos = (unit @ unit.T)[np.triu_indices(len(unit), 1)]
        strong = set(np.flatnonzero(cos >= 0.5).tolist())
        out = {"knn_changed": _changed(self.pairs, pairs), "strong_pairs": len(strong),
               "strong_changed": _changed(self.strong, strong),
               "mean_abs_dcos": None if self.cos is None
               else round(float(np.abs(cos - self.cos).mean()), 5)}
        self.pairs, self.cos, self.strong = pairs, cos, strong
        return out


def _changed(before: set | None, after: set) -> float | None:
    """Share of the union that is in only one of the two sets."""
    return None if before is None else round(len(before ^ after) / max(1, len(before | after)), 4)


def train(ingest: Path, epochs: int, halve_patience: int, log) -> list[dict]:
    """Epoch rows of the signals; the loop is the stage's (same batches, same updates)."""
    import torch

    from lokg.pipeline.config import load_config
    from lokg.training import transe_sparse as ts
    from lokg.training.transe import load_graph, transe_config

    torch.set_num_threads(1)
    config = load_config(None, [])
    cfg, k = transe_config(config), int(config["relation_stats"]["transe_neighbours"])
    mapped, names, n_ent = load_graph(ingest / "triples.parquet", ingest / "relations.parquet")
    loop = ts._Loop(n_ent, len(names), cfg, torch.device("cpu"))
    triples, batch = torch.as_tensor(mapped), int(cfg["batch_size"])
    strata = ts.RelationStrata(mapped[:, 1], cfg["relation_sample"])
    seen = torch.as_tensor(np.bincount(mapped[:, 1], minlength=len(names)) > 0)
    geometry, plateau, halved = Geometry(k), ts.LossPlateau(0.01, halve_patience), 0
    prev, rows, started = loop.rel.weight.clone(), [], time.process_time()
    for epoch in range(1, epochs + 1):
        order = strata.epoch(loop.gen)
        loss = sum(loop.step(triples[order[i:i + batch]]) * len(order[i:i + batch])
                   for i in range(0, len(order), batch)) / len(order)
        now = loop.rel.weight.clone()
        emb = now.numpy().copy()
        emb[~seen.numpy()] = 0.0
        rows.append({"epoch": epoch, "loss": round(loss, 5), "lr": loop.rel.lr,
                     "turn": round(ts.relation_change(prev, now, seen), 5),
                     **geometry.update(emb), "cpu_s": round(time.process_time() - started, 1)})
        prev = now
        log(json.dumps(rows[-1]))
        if halve_patience and plateau.flat(loss):
            loop.ent.lr, loop.rel.lr, halved = loop.ent.lr / 2, loop.rel.lr / 2, halved + 1
            plateau = ts.LossPlateau(0.01, halve_patience)
        if halved and rows[-1]["turn"] < float(cfg["tolerance"]):
            break
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ingest", type=Path, required=True,
                        help="a staged or cached ingest stage directory (triples, relations)")
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--halve-on-plateau", type=int, default=0, metavar="PATIENCE")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = train(args.ingest, args.epochs, args.halve_on_plateau, print)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

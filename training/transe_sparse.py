"""TransE in a small torch loop with sparse entity updates — the CPU trainer of stage ``transe``.

Why not PyKEEN on CPU at scale: PyKEEN's TransE keeps entity embeddings in a dense parameter, so
Adam updates (and the unit-norm constraint rewrites) *every* entity row at every batch; at 10⁶
triples (≈ 167k entities) that made 100 epochs take hours. Here the scoring is the same as
PyKEEN's TransE (``-‖h + r − t‖_p``, margin ranking loss, entities kept at unit L2 norm, one
head-or-tail corrupted negative per positive as PyKEEN's basic sampler does), but

* a batch updates only the entity and relation rows it touches, with SparseAdam's update
  (``RowAdam``), and re-normalises only those entity rows;
* each epoch may take a capped random sample per relation (``transe.relation_sample``), so a
  huge relation does not dominate the epoch and a rare one is seen in every epoch in full;
* training stops once the relation vectors — the stage's only downstream product — stop
  turning: the mean ``1 − cos(r_prev, r_now)`` over relations between two epochs falls below
  ``transe.tolerance`` (``transe.epochs`` is then the upper bound), but not before
  ``transe.min_steps`` optimiser steps: a small graph takes few steps an epoch, so its relation
  vectors barely turn between epochs long before they have learned anything (20k synthetic
  triples, 3 batches an epoch, "settled" after 2 epochs and SCOS then merged none of the planted
  synonyms). Adam never settles exactly:
  at lr 0.01 the change levels off near 0.005 after ≈ 10 epochs on 10⁵ synthetic triples, but
  near 0.02–0.04 on FB15k-237 and 0.04 on 10⁷ triples (more batches per epoch; measured), where
  that tolerance is not reached;
* so training also stops once the epoch loss has not fallen ``transe.loss_tolerance``
  (relative) below its best for ``transe.loss_patience`` epochs (the same step floor applies):
  on FB15k-237 the loss is flat from epoch ≈ 20–30 while the relations keep turning at Adam's
  noise floor; patience 10 stops it at epoch 39 with the same SCOS merges as 100 epochs, where
  patience 5 (epoch 21) added two wrong ones (docs/BENCHMARKS.md, "Build scale").
  ``transe.epochs`` bounds the run when neither rule fires.

Deterministic under ``transe.seed`` (one torch generator drives initialisation, sampling and
negatives; CPU kernels run in a fixed order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.nn import functional


@dataclass
class SparseRun:
    """What the loop produced: relation vectors by id, per-epoch loss and relation change."""

    entity: torch.Tensor  # [num_entities, dim], unit rows
    relation: torch.Tensor  # [num_relations, dim]
    losses: list[float] = field(default_factory=list)
    changes: list[float] = field(default_factory=list)  # mean 1 - cos vs the epoch before
    converged: bool = False
    triples_seen: int = 0
    eval_before: float | None = None  # ``eval_loss`` of the start (with a stop bound only)
    eval_after: float | None = None  # ``eval_loss`` of the result


class RelationStrata:
    """Triples grouped by relation, to draw each epoch's (optionally capped) sample cheaply."""

    def __init__(self, relations: np.ndarray, cap: int | None):
        self.order = torch.as_tensor(np.argsort(relations, kind="stable"))
        counts = np.bincount(relations)
        self.starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
        self.counts = counts.tolist()
        self.cap = cap

    def epoch(self, gen: torch.Generator) -> torch.Tensor:
        """Triple indices for one epoch, shuffled: all of a relation's, or ``cap`` drawn anew."""
        if self.cap is None or max(self.counts, default=0) <= self.cap:
            return self.order[torch.randperm(len(self.order), generator=gen)]
        parts = []
        for start, count in zip(self.starts, self.counts):
            if count > self.cap:
                parts.append(start + torch.randperm(count, generator=gen)[:self.cap])
            elif count:
                parts.append(torch.arange(start, start + count))
        picked = self.order[torch.cat(parts)]
        return picked[torch.randperm(len(picked), generator=gen)]


def _init(num: int, dim: int, gen: torch.Generator) -> torch.Tensor:
    """Uniform ±6/√dim (TransE's initialisation) rows scaled to unit L2 norm."""
    bound = 6.0 / math.sqrt(dim)
    weight = torch.empty(num, dim).uniform_(-bound, bound, generator=gen)
    return functional.normalize(weight, dim=1)


class RowAdam:
    """Embedding rows with SparseAdam's update applied to only the rows a batch touched (moments
    of other rows stay as they are; bias correction by the global step, as
    ``torch.optim.SparseAdam``); ``unit`` rows are scaled back to L2 norm 1 after each step.

    Row ``i`` of ``table`` holds vector ``i``, its first and its second moment side by side, so a
    batch costs one gather and one scatter. Why not ``torch.optim``: ``SparseAdam``'s sparse-tensor
    kernels took ≈ 380 ms per 8,192-triple batch on one CPU thread (profiled), about the cost of
    the dense update this avoids; and any ``torch.optim`` step imports ``torch._dynamo`` (≈ 35 s
    on a busy 2-core host, measured).
    """

    def __init__(self, weight: torch.Tensor, lr: float, unit: bool,
                 betas=(0.9, 0.999), eps: float = 1e-8):
        self.table = torch.stack([weight, torch.zeros_like(weight), torch.zeros_like(weight)], 1)
        self.lr, self.unit, self.betas, self.eps = lr, unit, betas, eps
        self.steps = 0

    @property
    def weight(self) -> torch.Tensor:
        return self.table[:, 0]

    def step(self, idx: torch.Tensor, rows: torch.Tensor, grad: torch.Tensor) -> None:
        """Rows ``idx`` (distinct; ``rows`` = ``table[idx]``) take one Adam step with ``grad``."""
        self.steps += 1
        b1, b2 = self.betas
        rows[:, 1].mul_(b1).add_(grad, alpha=1 - b1)
        rows[:, 2].mul_(b2).addcmul_(grad, grad, value=1 - b2)
        size = self.lr * math.sqrt(1 - b2 ** self.steps) / (1 - b1 ** self.steps)
        rows[:, 0].addcdiv_(rows[:, 1], rows[:, 2].sqrt().add_(self.eps), value=-size)
        if self.unit:
            rows[:, 0] = functional.normalize(rows[:, 0], dim=1)
        self.table[idx] = rows


def corrupt(batch: torch.Tensor, negatives: int, num_entities: int,
            gen: torch.Generator) -> torch.Tensor:
    """PyKEEN's basic sampler: first half of the copies get a new head, the rest a new tail,
    never the original entity."""
    neg = batch.repeat_interleave(negatives, dim=0)
    half = (len(neg) + 1) // 2
    for col, rows in ((0, slice(0, half)), (2, slice(half, None))):
        old = neg[rows, col]
        new = torch.randint(0, num_entities - 1, (len(old),), generator=gen)
        neg[rows, col] = new + (new >= old).long()
    return neg


def score(heads: torch.Tensor, rels: torch.Tensor, tails: torch.Tensor, norm: int
          ) -> torch.Tensor:
    """TransE plausibility ``-‖h + r − t‖_p`` per row."""
    return -torch.linalg.vector_norm(heads + rels - tails, ord=norm, dim=-1)


def relation_change(before: torch.Tensor, after: torch.Tensor, seen: torch.Tensor) -> float:
    """Mean ``1 − cos`` between the seen relations' vectors at two epochs.

    The mean, not the max: a relation TransE drives towards the zero vector (a symmetric one,
    say) keeps turning at random however long training runs, and would hold a max up forever.
    """
    cos = functional.cosine_similarity(before[seen], after[seen], dim=1)
    return float((1.0 - cos).mean()) if len(cos) else 0.0


#: A warm start (training/warm_start.py): per table ("entity", "relation"), the ids whose rows
#: start from the given vectors instead of the usual initialisation.
Start = dict[str, tuple[np.ndarray, torch.Tensor]]


def _initial(num: int, dim: int, gen: torch.Generator, start: tuple | None) -> torch.Tensor:
    """The usual initialisation, with the rows of a warm start (if any) written over it."""
    weight = _init(num, dim, gen)
    if start is not None:
        ids, rows = start
        weight[torch.as_tensor(ids, dtype=torch.long)] = rows.to(weight.dtype)
    return weight


class _Loop:
    """The embeddings, their optimiser state and the generator: what a batch step changes."""

    def __init__(self, num_entities: int, num_relations: int, cfg, device: torch.device,
                 start: Start | None = None):
        self.gen = torch.Generator().manual_seed(int(cfg["seed"]))
        dim, lr = int(cfg["dim"]), float(cfg["learning_rate"])
        start = start or {}
        self.ent = RowAdam(_initial(num_entities, dim, self.gen, start.get("entity")).to(device),
                           lr, unit=True)
        self.rel = RowAdam(_initial(num_relations, dim, self.gen, start.get("relation"))
                           .to(device), lr, unit=False)
        self.num_entities, self.device = num_entities, device
        self.negatives, self.margin = int(cfg["negatives"]), float(cfg["margin"])
        self.norm = int(cfg["scoring_norm"])

    def step(self, batch: torch.Tensor) -> float:
        """One sLCWA step; only the rows the batch touches change (entities end at unit norm)."""
        neg = corrupt(batch, self.negatives, self.num_entities, self.gen)
        both = torch.cat([batch, neg]).to(self.device)
        ent_idx, ent_inv = torch.unique(both[:, [0, 2]], return_inverse=True)
        rel_idx, rel_inv = torch.unique(both[:, 1], return_inverse=True)
        ent_state, rel_state = self.ent.table[ent_idx], self.rel.table[rel_idx]
        ent = ent_state[:, 0].clone().requires_grad_(True)
        rel = rel_state[:, 0].clone().requires_grad_(True)
        scores = score(ent[ent_inv[:, 0]], rel[rel_inv], ent[ent_inv[:, 1]], self.norm)
        pos, neg_scores = scores[:len(batch)], scores[len(batch):].view(len(batch), -1)
        loss = functional.relu(self.margin - pos[:, None] + neg_scores).mean()
        loss.backward()
        self.ent.step(ent_idx, ent_state, ent.grad)
        self.rel.step(rel_idx, rel_state, rel.grad)
        return float(loss.detach())


def eval_loss(entity: torch.Tensor, relation: torch.Tensor, mapped: np.ndarray, cfg) -> float:
    """The margin ranking loss of these vectors over every triple, against negatives drawn
    once from ``transe.seed`` (fixed, unlike an epoch's): comparable between a build's final
    vectors and a refresh's carried-over ones, at the cost of one forward pass, no update."""
    gen = torch.Generator().manual_seed(int(cfg["seed"]))
    triples = torch.as_tensor(mapped, dtype=torch.long)
    negatives, margin, norm = int(cfg["negatives"]), float(cfg["margin"]), int(cfg["scoring_norm"])
    total, step = 0.0, int(cfg["batch_size"])
    with torch.no_grad():
        for i in range(0, len(triples), step):
            batch = triples[i:i + step]
            neg = corrupt(batch, negatives, len(entity), gen).to(entity.device)
            batch = batch.to(entity.device)
            pos = score(entity[batch[:, 0]], relation[batch[:, 1]], entity[batch[:, 2]], norm)
            bad = score(entity[neg[:, 0]], relation[neg[:, 1]], entity[neg[:, 2]], norm)
            total += float(functional.relu(margin - pos[:, None] + bad.view(len(batch), -1))
                           .mean(dim=1).sum())
    return total / max(len(triples), 1)


class LossPlateau:
    """Whether the epoch loss has stayed within ``tolerance`` (relative) of its best for
    ``patience`` epochs; patience 0 never says so."""

    def __init__(self, tolerance: float, patience: int):
        self.tolerance, self.patience = tolerance, patience
        self.best, self.since_best = math.inf, 0

    def flat(self, loss: float) -> bool:
        if loss < self.best * (1 - self.tolerance):
            self.best, self.since_best = loss, 0
        else:
            self.since_best += 1
        return 0 < self.patience <= self.since_best


def train_sparse(mapped: np.ndarray, num_entities: int, num_relations: int, cfg,
                 device: torch.device, log, start: Start | None = None,
                 stop: float | None = None) -> SparseRun:
    """Epochs of shuffled (optionally per-relation capped) batches until the relations settle
    or the loss stops falling; ``start``: rows to begin from (a refresh's warm start);
    ``stop``: no epoch at all while the start's ``eval_loss`` is at most this."""
    loop = _Loop(num_entities, num_relations, cfg, device, start)
    run = SparseRun(entity=loop.ent.weight, relation=loop.rel.weight)
    if stop is not None:
        run.eval_before = eval_loss(loop.ent.weight, loop.rel.weight, mapped, cfg)
        if run.eval_before <= stop:
            log(f"transe: no epoch: eval loss {run.eval_before:.4f} <= {stop:.4f}")
            run.eval_after = run.eval_before
            return run
    _epochs(loop, run, mapped, num_relations, cfg, log)
    run.entity, run.relation = loop.ent.weight, loop.rel.weight
    run.eval_after = eval_loss(run.entity, run.relation, mapped, cfg)
    return run


def _epochs(loop: _Loop, run: SparseRun, mapped: np.ndarray, num_relations: int, cfg,
            log) -> None:
    """The epochs of ``train_sparse``: losses, changes and convergence go into ``run``."""
    triples = torch.as_tensor(mapped, dtype=torch.long)
    strata = RelationStrata(mapped[:, 1], cfg["relation_sample"])
    seen = torch.as_tensor(np.bincount(mapped[:, 1], minlength=num_relations) > 0).to(loop.device)
    batch_size, tol = int(cfg["batch_size"]), float(cfg["tolerance"])
    steps, min_steps = 0, int(cfg["min_steps"])
    plateau = LossPlateau(float(cfg["loss_tolerance"]), int(cfg["loss_patience"]))
    prev = loop.rel.weight.clone()
    for epoch in range(1, int(cfg["epochs"]) + 1):
        order = strata.epoch(loop.gen)
        total = sum(loop.step(triples[order[i:i + batch_size]]) * len(order[i:i + batch_size])
                    for i in range(0, len(order), batch_size))
        steps += math.ceil(len(order) / batch_size)
        run.losses.append(total / len(order))
        run.triples_seen += len(order)
        now = loop.rel.weight.clone()
        run.changes.append(relation_change(prev, now, seen))
        prev = now
        log(f"transe: epoch {epoch} loss {run.losses[-1]:.4f} "
            f"relation change {run.changes[-1]:.2e}")
        settled, flat = epoch > 1 and run.changes[-1] < tol, plateau.flat(run.losses[-1])
        if steps >= min_steps and (settled or flat):
            log(f"transe: stopped after epoch {epoch}: "
                + ("relations settled" if settled else "loss flat"))
            run.converged = True
            break

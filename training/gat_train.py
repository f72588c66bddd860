"""Training the GAT: epochs full batch or over sampled subgraphs, and the losses before and
after.

Batches. The whole graph per step when its directed edges ≤ ``max_full_batch_edges`` and that
step fits its share of ``build.memory_gb`` (Memory, below). Above,
each step takes the next ``batch_triples`` triples (their heads, tails and negatives are the seeds)
and runs on a GraphSAGE-style sample around those seed nodes (``NeighbourSampler``, torch ops
only: PyG's NeighborLoader needs pyg-lib, not installed): each node to expand keeps ≤ ``fanout``
of its out-edges (the messages it aggregates), drawn uniformly, for ``layers`` hops; the step's
gold edges always join their seeds' sample. Layer l runs only on the targets that a later layer
still reads (nodes within layers−1−l hops, GATConv's bipartite form), so the last layer is the
seeds' and their sampled edges'. The seeds' z and the gold edges' α are then estimates over the
sampled out-edges (hubs make exact neighbourhoods the whole graph: docs/BENCHMARKS.md), and a
step costs O(seeds · fanout^layers) at most, whatever the graph's size. An epoch is
``sampled_steps`` such steps (default 1, as a full-batch epoch is one step), on the next
batches of a shuffled pass over the triples that spans epochs. The model's parameters do not
grow with the graph (the node features are inputs, not trained), so neither do the optimiser
steps it needs: training costs epochs × a bounded step, and only the export grows with the
graph (null = a whole pass an epoch: ceil(triples / batch_triples) steps, which grows as
triples² while a step's subgraph is a fixed share of the graph).

Memory. Until the graph is far larger than a step's reach, a step's sample grows with the graph
(at 10⁶ triples ~10⁶ sampled edges, ~3 GB). A step whose sampled subgraph would pass
``STEP_SHARE`` of ``build.memory_gb`` (``step_bytes_of``: its nodes' input rows and
``STEP_FLOATS_PER_HIDDEN`` × ``hidden`` floats an edge, measured ~5 at 10⁶) runs in halves of
its batch and gold edges, each sampled and back-propagated on its own with its share of the
losses, then one optimiser step: the same step's objective over smaller samples. The sampler
counts each hop's edges before drawing them and gives up at the first hop past the share, so
a sample that does not fit is never built whole. A step within its share is the one it always
was. The node features are read a step's nodes at a time (``gat_inputs.NodeFeatures``); the
export is ``gat_model.infer``'s, in blocks.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lokg.training.gat_inputs import Graph
from lokg.training.gat_model import (block_edges, build_model, edge_types, infer, link_loss,
                                     path_loss, relation_table)
from lokg.training.gat_rows import as_rows
from lokg.training.gat_sampler import NeighbourSampler, Subgraph

EVAL_TRIPLES = 100_000  # triples in the fixed-negative link-loss check before/after training
#: a sampled training step's share of ``build.memory_gb`` (the rest: the graph, the sampler's
#: arrays, the model, Python)
STEP_SHARE = 0.5
#: floats per sampled edge and unit of ``gat.hidden`` in a training step (forward + backward)
STEP_FLOATS_PER_HIDDEN = 8


@dataclass
class TrainResult:
    model: object
    attention: object  # float64 [E] (gat_rows.DiskRows), eval mode, after training
    attention_before: object  # the same for the untrained model
    link: list[float]
    path: list[float]
    eval_link_before: float
    eval_link_after: float
    epoch_seconds: list[float]
    mode: str  # full | sampled
    device: str


class _Epochs:
    """One training epoch at a time: full batch up to ``max_full_batch_edges``, beyond that over
    neighbour-sampled mini-batches (``NeighbourSampler``); and a fixed-negative link-loss check
    so that the loss before and after training compare."""

    def __init__(self, model, graph: Graph, x, rel_vec, gold: np.ndarray, cfg: Mapping, device,
                 memory_gb: float | None = None):
        import torch

        self.hidden = int(cfg["hidden"])
        self.step_bytes = None if memory_gb is None else memory_gb * 1e9 * STEP_SHARE

        self.model, self.x, self.device = model, as_rows(x), device
        self.gen = torch.Generator().manual_seed(int(cfg["seed"]))
        self.opt = torch.optim.Adam(model.parameters(), lr=float(cfg["learning_rate"]),
                                    weight_decay=float(cfg["weight_decay"]))
        self.chunk, self.k = int(cfg["batch_triples"]), int(cfg["negatives"])
        self.n = graph.num_nodes
        self.path_weight = float(cfg["path_weight"]) if len(gold) else 0.0
        self.src, self.dst = torch.from_numpy(graph.src), torch.from_numpy(graph.dst)
        self.rel, self.inverse = torch.from_numpy(graph.rel), torch.from_numpy(graph.inverse)
        self.num_relations, self.table = len(rel_vec), relation_table(rel_vec)
        self.forward = torch.from_numpy(np.flatnonzero(~graph.inverse).astype(graph.src.dtype))
        self.gold = torch.from_numpy(gold)
        self.full = graph.num_edges <= int(cfg["max_full_batch_edges"]) and (
            self.step_bytes is None
            or self.step_bytes_of(graph.num_nodes, graph.num_edges) <= self.step_bytes)
        self.sampler = None if self.full else NeighbourSampler(graph, int(cfg["fanout"]),
                                                               self.gen)
        self.pass_steps = math.ceil(len(self.forward) / self.chunk)
        self.epoch_steps = (self.pass_steps if cfg["sampled_steps"] is None
                            else min(int(cfg["sampled_steps"]), self.pass_steps))
        self.batches = self._passes()
        self.on_device = {  # full batch: the whole graph moved to the device once
            "x": torch.from_numpy(self.x.read(0, self.n)).to(device),
            "index": torch.stack([self.dst, self.src]).long().to(device),
            "types": self.types(slice(None)).to(device), "gold": self.gold.to(device),
            "sro": [t[self.forward].long().to(device) for t in (self.src, self.rel, self.dst)],
        } if self.full else None
        self.check = self.forward[torch.randperm(len(self.forward), generator=self.gen)[
            :EVAL_TRIPLES]]
        self.check_neg = torch.randint(0, self.n, (len(self.check) * self.k,), generator=self.gen)

    def types(self, edges):
        """The edges' rows of the relation table (``edge_types``), as long."""
        return edge_types(self.rel[edges].long(), self.inverse[edges], self.num_relations)

    def eval_link(self, z) -> float:
        """The fixed-negative link loss of the check triples; ``z``: rows (``gat_rows``), of
        which only the check triples' and negatives' are read."""
        import torch

        s, r, o = (t[self.check].long() for t in (self.src, self.rel, self.dst))
        nodes, local = torch.unique(torch.cat([s, o, self.check_neg]), return_inverse=True)
        heads, tails, negs = (t.to(self.device) for t in
                              local.split([len(s), len(o), len(self.check_neg)]))
        z_rows = torch.from_numpy(as_rows(z).take(nodes.numpy())).to(self.device)
        with torch.no_grad():
            return link_loss(self.model, z_rows, heads, r.to(self.device), tails, negs).item()

    def run(self) -> tuple[float, float | None]:
        """One epoch; its mean link loss and mean path loss (None without gold paths)."""
        self.model.train()
        link_sum, path_sum, steps = self._full_epoch() if self.full else self._sampled_epoch()
        return link_sum / steps, (path_sum / steps if self.path_weight else None)

    def _step(self, link, path) -> tuple[float, float]:
        self.opt.zero_grad()
        (link + self.path_weight * path).backward()
        self.opt.step()
        return link.item(), path.item()

    def _full_epoch(self) -> tuple[float, float, int]:
        import torch

        device, on = self.device, self.on_device
        z, alpha = self.model(on["x"], on["index"], on["types"], self.table)
        s, r, o = on["sro"]
        neg = torch.randint(0, self.n, (len(s) * self.k,), generator=self.gen).to(device)
        link = link_loss(self.model, z, s, r, o, neg)
        path = (path_loss(alpha, on["gold"]) if self.path_weight
                else torch.zeros((), device=device))
        return (*self._step(link, path), 1)

    def _sampled_epoch(self) -> tuple[float, float, int]:
        self.sampler.shuffle()
        link_sum = path_sum = 0.0
        for _ in range(self.epoch_steps):
            link, path = self._subgraph_step(*next(self.batches))
            link_sum, path_sum = link_sum + link, path_sum + path
        return link_sum, path_sum, self.epoch_steps

    def _passes(self):
        """(triples, gold-path edges) of each sampled step, endlessly: shuffled passes over the
        triples, each with its share of a shuffled pass over the gold edges. A pass may span
        epochs, so every triple is trained on once before any twice."""
        import torch

        gold_per_step = math.ceil(len(self.gold) / self.pass_steps) if len(self.gold) else 0
        while True:
            perm = self.forward[torch.randperm(len(self.forward), generator=self.gen)]
            gold_perm = self.gold[torch.randperm(len(self.gold), generator=self.gen)]
            for step in range(self.pass_steps):
                yield (perm[step * self.chunk:(step + 1) * self.chunk],
                       gold_perm[step * gold_per_step:(step + 1) * gold_per_step])

    def _subgraph_step(self, batch, gold) -> tuple[float, float]:
        """One optimiser step on the sampled subgraph around a batch (``_backward``)."""
        self.opt.zero_grad()
        link, path = self._backward(batch, gold, 1.0, 1.0)
        self.opt.step()
        return link, path

    def _backward(self, batch, gold, link_share: float, path_share: float) -> tuple[float,
                                                                                    float]:
        """Losses and gradients on the sampled subgraph around a batch's heads, tails,
        negatives and the heads of its gold-path edges (the seeds: local ids
        0..len(seeds)-1, sorted), weighted by the batch's shares of the step. A subgraph past
        the step's share of ``build.memory_gb`` (``step_bytes``) is neither run nor built whole
        (the sampler stops at the hop that takes it past: ``NeighbourSampler.sample``'s
        ``fits``): the batch and its gold edges are halved and each half sampled and added on
        its own (the step's losses and gradient, over smaller samples). Returns the weighted
        (link, path)."""
        import torch

        device, src, dst = self.device, self.src, self.dst
        neg = torch.randint(0, self.n, (len(batch) * self.k,), generator=self.gen)
        seeds = torch.unique(torch.cat([src[batch], dst[batch], neg, src[gold]]))
        fits = None if len(batch) <= 1 or self.step_bytes is None else (
            lambda nodes, edges: self.step_bytes_of(nodes, edges) <= self.step_bytes)
        sub = self.sampler.sample(seeds, len(self.model.convs), must=gold, fits=fits)
        if sub is None:
            del seeds, neg  # not held while the halves run
            half, gold_half = len(batch) // 2, len(gold) // 2
            parts = [self._backward(b, g, link_share * len(b) / len(batch),
                                    path_share * len(g) / max(len(gold), 1))
                     for b, g in ((batch[:half], gold[:gold_half]),
                                  (batch[half:], gold[gold_half:]))]
            return parts[0][0] + parts[1][0], parts[0][1] + parts[1][1]
        z, alpha = self._sampled_forward(sub)
        heads, tails, negs = torch.searchsorted(  # seeds are sorted and local ids 0..
            seeds, torch.cat([src[batch], dst[batch], neg])).to(device).split(
            [len(batch), len(batch), len(neg)])
        link = link_loss(self.model, z, heads, self.rel[batch].to(device), tails, negs)
        first_hop = sub.edges[:sub.edges_within[0]]
        path = (path_loss(alpha, torch.searchsorted(first_hop, gold).to(device))
                if self.path_weight and len(gold) else torch.zeros((), device=device))
        (link_share * link + self.path_weight * (path_share * path)).backward()
        return link_share * link.item(), path_share * path.item()

    def step_bytes_of(self, nodes: int, edges: int) -> int:
        """The estimated peak of a training step on ``nodes`` and ``edges``: the nodes' input
        rows and, per edge, ``STEP_FLOATS_PER_HIDDEN`` × ``hidden`` floats (forward and
        backward)."""
        return 4 * (nodes * 2 * self.x.shape[1] + edges * STEP_FLOATS_PER_HIDDEN * self.hidden)

    def _sampled_forward(self, sub: Subgraph):
        """The seeds' z and the last layer's α over their sampled edges: layer l computes only
        the nodes within layers−1−l hops (the ones a later layer reads)."""
        import torch

        layers = len(self.model.convs)
        h = torch.from_numpy(self.x.take(sub.nodes.numpy())).to(self.device)
        for layer in range(layers):
            targets, edges = sub.within[layers - 1 - layer], sub.edges_within[layers - 1 - layer]
            h, alpha = self.model.layer(layer, (h, h[:targets]),
                                        sub.index[:, :edges].to(self.device),
                                        self.types(sub.edges[:edges]).to(self.device), self.table)
        return h, alpha


def _train(epochs: _Epochs, n_epochs: int, device, log) -> tuple[list, list, list]:
    """Run ``n_epochs`` epochs; each one's link loss, path loss and seconds."""
    import torch

    link_hist, path_hist, epoch_seconds = [], [], []
    for epoch in range(n_epochs):
        started = time.perf_counter()
        link, path = epochs.run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        epoch_seconds.append(round(time.perf_counter() - started, 4))
        link_hist.append(link)
        path_hist.append(path)
        log(f"epoch {epoch + 1}: link {link:.4f}"
            + (f" path {path:.4f}" if path is not None else "") + f" ({epoch_seconds[-1]:.2f}s)")
    return link_hist, path_hist, epoch_seconds


def fit(graph, x, rel_np, gold, cfg, device, log, state=None, scratch: Path | None = None,
        memory_gb: float | None = None) -> TrainResult:
    """Train a fresh model (or one from ``state``) on ``device``; ``log`` gets each epoch's losses.
    ``x``: the node features (``gat_inputs.NodeFeatures`` or an array). ``cfg["stop_loss"]`` (a
    refresh): no epoch when the starting parameters' eval link loss is already at most that. The α
    arrays live under ``scratch`` (a temporary directory, removed with the result, when None); the
    inference blocks are sized by ``memory_gb`` (``gat_model.block_edges``)."""
    import torch

    torch.manual_seed(int(cfg["seed"]))
    x, own_scratch = as_rows(x), scratch is None
    scratch = Path(tempfile.mkdtemp(prefix="gat-")) if own_scratch else scratch
    rel_vec = torch.from_numpy(rel_np).to(device)
    model = build_model(x.shape[1], rel_vec.shape[1], rel_vec.shape[0], cfg)
    if state is not None:
        model.load_state_dict(state)
    model = model.to(device)
    epochs = _Epochs(model, graph, x, rel_vec, gold, cfg, device, memory_gb)
    chunk = block_edges(cfg, x.shape[1], memory_gb)
    z0, attention_before = infer(model, graph, x, rel_vec, device, chunk, scratch / "before")
    eval_before = epochs.eval_link(z0)
    z0.path.unlink()
    stop = cfg.get("stop_loss")
    n_epochs = 0 if stop is not None and eval_before <= stop else int(cfg["epochs"])
    link_hist, path_hist, epoch_seconds = _train(epochs, n_epochs, device, log)
    if n_epochs:
        z, attention = infer(model, graph, x, rel_vec, device, chunk, scratch / "after")
        eval_after = epochs.eval_link(z)
    else:  # the model did not change: its α and loss are the ones before
        attention, eval_after = attention_before, eval_before
    result = TrainResult(model=model.cpu(), attention=attention,
                         attention_before=attention_before, link=link_hist, path=path_hist,
                         eval_link_before=eval_before, eval_link_after=eval_after,
                         epoch_seconds=epoch_seconds, mode="full" if epochs.full else "sampled",
                         device=str(device))
    if own_scratch:
        weakref.finalize(result, shutil.rmtree, scratch, True)
    return result

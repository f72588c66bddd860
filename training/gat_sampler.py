"""Neighbour sampling for the GAT's mini-batches above ``gat.max_full_batch_edges``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lokg.training.gat_inputs import Graph
from lokg.training.gat_model import node_chunks

SHUFFLE_BLOCK = 1 << 22  # edges sorted at a time by NeighbourSampler.shuffle


@dataclass
class Subgraph:
    """A sampled step's nodes (seeds first, then each hop's new nodes) and edges (grouped by the
    hop of their source); ``within[h]`` = how many nodes lie within h hops, ``edges_within[h]``
    = how many edges leave them; ``index`` = the edges' reversed index over local node ids."""

    nodes: object
    edges: object
    index: object
    within: list[int]
    edges_within: list[int]


class NeighbourSampler:
    """GraphSAGE-style neighbour sampling with torch ops (no pyg-lib). Each node's out-edges are
    put in a random order once an epoch (``shuffle``: a random key per edge, sorted by (source,
    key)); a node expanded in a step keeps ``fanout`` consecutive edges of its slice from a
    random offset — a uniform sample without replacement, O(fanout) a node. A step's work and
    memory are its subgraph's: the node → local id map is one buffer, reset after each step."""

    def __init__(self, graph: Graph, fanout: int, gen):
        import torch

        self.indptr = torch.from_numpy(graph.indptr)
        self.src, self.dst = torch.from_numpy(graph.src), torch.from_numpy(graph.dst)
        self.fanout, self.gen = fanout, gen
        self.order = torch.arange(graph.num_edges, dtype=self.src.dtype)  # edge ids, as src
        self.local = torch.full((graph.num_nodes,), -1, dtype=torch.long)

    def shuffle(self) -> None:
        """A fresh random order of every node's out-edges (O(E log E), once an epoch): a random
        key per edge; each node's slice sorted by its edges' ranks among the keys, a block of
        whole slices at a time (``SHUFFLE_BLOCK`` edges), so that besides the ranks only a
        block's sort is in memory."""
        import torch

        by_key = torch.argsort(torch.rand(len(self.src), generator=self.gen))
        rank = torch.empty(len(by_key), dtype=self.src.dtype)
        rank[by_key] = torch.arange(len(by_key), dtype=self.src.dtype)
        del by_key
        for u0, u1 in node_chunks(self.indptr.numpy(), SHUFFLE_BLOCK):
            e0, e1 = int(self.indptr[u0]), int(self.indptr[u1])
            key = self.src[e0:e1].long() * len(rank) + rank[e0:e1]  # distinct: source, then rank
            self.order[e0:e1] = (torch.argsort(key) + e0).to(self.order.dtype)

    def out_edges(self, nodes):
        """≤ fanout out-edge ids of each node: a window of its shuffled slice."""
        import torch

        start = self.indptr[nodes]
        degree = self.indptr[nodes + 1] - start
        take = degree.clamp(max=self.fanout)
        owner = torch.repeat_interleave(torch.arange(len(nodes)), take)
        rank = torch.arange(len(owner)) - (torch.cumsum(take, 0) - take)[owner]
        offset = (torch.rand(len(nodes), generator=self.gen) * degree).long()
        return self.order[start[owner] + (offset[owner] + rank) % degree[owner]].long()

    def sample(self, seeds, hops: int, must=None) -> Subgraph:
        """The ``hops``-hop sample around ``seeds`` (distinct, sorted); ``must`` (edge ids out
        of seeds) joins the first hop's sample."""
        import torch

        local, nodes, edges = self.local, [seeds], []
        local[seeds] = torch.arange(len(seeds))
        within, frontier = [len(seeds)], seeds
        for hop in range(hops):
            picked = self.out_edges(frontier)
            if hop == 0:  # sorted, so that a must-edge's position is a searchsorted away
                picked = torch.unique(picked if must is None else torch.cat([picked, must]))
            edges.append(picked)
            reached = torch.unique(self.dst[picked])
            frontier = reached[local[reached] < 0]
            local[frontier] = torch.arange(within[-1], within[-1] + len(frontier))
            within.append(within[-1] + len(frontier))
            nodes.append(frontier)
        all_nodes, all_edges = torch.cat(nodes), torch.cat(edges)
        index = torch.stack([local[self.dst[all_edges]], local[self.src[all_edges]]])
        local[all_nodes] = -1
        return Subgraph(all_nodes, all_edges, index, within,
                        np.cumsum([len(e) for e in edges]).tolist())

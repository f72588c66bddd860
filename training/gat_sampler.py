"""Neighbour sampling for the GAT's mini-batches above ``gat.max_full_batch_edges``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lokg.training.gat_inputs import Graph, node_chunks

SHUFFLE_BLOCK = 1 << 20  # edges sorted at a time by NeighbourSampler.shuffle (~60 B each)
KEY_BITS = 31  # bits of an edge's random key (``edge_keys``); a block's source offset above them


def edge_keys(salt: int, e0: int, e1: int) -> np.ndarray:
    """Random keys of edges e0..e1-1 (int64 below 2**KEY_BITS): the splitmix64 hash of
    salt + edge id, so that any block of edges gets its keys without the others'."""
    with np.errstate(over="ignore"):
        z = (np.arange(e0, e1, dtype=np.uint64) + np.uint64(salt)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return (z >> np.uint64(64 - KEY_BITS)).astype(np.int64)


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
        """A fresh random order of every node's out-edges (once an epoch): each edge gets a
        random key (``edge_keys``: a hash of its id and a salt drawn from the generator), and
        each node's slice is sorted by its edges' keys, a block of whole slices at a time
        (``SHUFFLE_BLOCK`` edges): the order does not depend on the blocks, and only a block's
        keys and sort are in memory."""
        import torch

        salt = int(torch.randint(0, 2**62, (1,), generator=self.gen))
        for u0, u1 in node_chunks(self.indptr.numpy(), SHUFFLE_BLOCK):
            e0, e1 = int(self.indptr[u0]), int(self.indptr[u1])
            key = torch.from_numpy(edge_keys(salt, e0, e1))
            key += (self.src[e0:e1].long() - u0) << KEY_BITS  # distinct: source, then key
            self.order[e0:e1] = (torch.argsort(key, stable=True) + e0).to(self.order.dtype)

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

    def sample(self, seeds, hops: int, must=None, fits=None) -> Subgraph | None:
        """The ``hops``-hop sample around ``seeds`` (distinct, sorted); ``must`` (edge ids out
        of seeds) joins the first hop's sample. ``fits(nodes, edges)``: whether a step on a
        sample that large fits its memory; before each hop its edges are counted (≤ fanout a
        node), and the sample stops, None, as soon as the nodes so far and the edges so far and
        of that hop (``must`` aside) do not fit — a lower bound of the whole sample's, so a sample
        is returned where it fits and one that does not is never built whole."""
        import torch

        local, nodes, edges = self.local, [seeds], []
        local[seeds] = torch.arange(len(seeds))
        within, frontier, sampled = [len(seeds)], seeds, 0
        for hop in range(hops + 1):  # the last round only checks the whole sample
            ahead = 0 if hop == hops else int(
                (self.indptr[frontier + 1] - self.indptr[frontier]).clamp(max=self.fanout).sum())
            if fits is not None and not fits(within[-1], sampled + ahead):
                local[torch.cat(nodes)] = -1
                return None
            if hop == hops:
                break
            picked = self.out_edges(frontier)
            if hop == 0:  # sorted, so that a must-edge's position is a searchsorted away
                picked = torch.unique(picked if must is None else torch.cat([picked, must]))
            edges.append(picked)
            sampled += len(picked)
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

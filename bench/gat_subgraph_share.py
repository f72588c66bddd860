"""How much of the graph one step of GAT's sampled-subgraph mode trains on.

    python -m bench.gat_subgraph_share --build STORE/builds/B --batch-triples 65536,6554 \
        --fanout 0,10,25

Above ``gat.max_full_batch_edges`` a GAT epoch is ``ceil(triples / batch_triples)`` steps, each
on a subgraph around its seeds (the batch's heads and tails and one corrupted tail per triple;
``layers`` hops). Fanout 0 is the exact ``k_hop_subgraph`` the mode used before (every out-edge
of every node reached); a fanout > 0 is ``training/gat.py``'s ``NeighbourSampler`` (≤ fanout
out-edges per node and hop). When a step's subgraph is most of the graph, an epoch costs steps ×
a full-batch pass, so the mode grows as triples² / batch_triples. For each batch size and fanout
this draws ``--steps`` such steps from the build's canonical triples (with inverses, as GAT reads
them) and prints the seeds' share of the nodes, the subgraph's share of the nodes and edges, the
edges an epoch then processes as a multiple of the graph's (steps × edge share), and the seconds
a step's sampling took.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np


def step_shares(graph, batch_triples: int, layers: int, fanout: int, gen) -> dict:
    """One sampled step's seeds and subgraph as shares of the graph's nodes and edges."""
    import torch
    from torch_geometric.utils import k_hop_subgraph

    from lokg.training.gat_sampler import NeighbourSampler

    src, dst = torch.from_numpy(graph.src), torch.from_numpy(graph.dst)
    forward = torch.from_numpy(np.flatnonzero(~graph.inverse))
    batch = forward[torch.randperm(len(forward), generator=gen)[:batch_triples]]
    neg = torch.randint(0, graph.num_nodes, (len(batch),), generator=gen)
    seeds = torch.unique(torch.cat([src[batch], dst[batch], neg]))
    if fanout:
        sampler = NeighbourSampler(graph, fanout, gen)
        sampler.shuffle()  # once an epoch in training: not timed
        started = time.perf_counter()
        sub = sampler.sample(seeds, layers)
        nodes, edges = len(sub.nodes), len(sub.edges)
    else:
        started = time.perf_counter()
        subset, _, _, edge_mask = k_hop_subgraph(seeds, layers, torch.stack([dst, src]),
                                                 relabel_nodes=True, num_nodes=graph.num_nodes)
        nodes, edges = len(subset), int(edge_mask.sum())
    return {"seeds": len(seeds) / graph.num_nodes, "nodes": nodes / graph.num_nodes,
            "edges": edges / graph.num_edges, "sample_s": time.perf_counter() - started}


def main(argv: list[str] | None = None) -> None:
    import torch

    from lokg.runtime.contract import read_table
    from lokg.training.gat_inputs import Graph, read_triples

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, required=True, help="a published build directory")
    ap.add_argument("--batch-triples", default="65536", help="comma-separated")
    ap.add_argument("--fanout", default="0,10", help="comma-separated; 0 = exact k_hop_subgraph")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    triples = read_triples(args.build / "triples.parquet")
    graph = Graph.from_triples(triples, read_table(args.build / "entities.parquet",
                                                   "entities").num_rows)
    print(f"{len(triples):,} triples, {graph.num_nodes:,} nodes, {graph.num_edges:,} edges")
    print("| batch_triples | fanout | steps an epoch | seeds / nodes | subgraph nodes | "
          "subgraph edges | edges an epoch / graph | sampling s a step |\n"
          "|--:|--:|--:|--:|--:|--:|--:|--:|")
    gen = torch.Generator().manual_seed(args.seed)
    for size in (int(float(b)) for b in args.batch_triples.split(",")):
        for fanout in (int(f) for f in args.fanout.split(",")):
            rows = [step_shares(graph, size, args.layers, fanout, gen) for _ in range(args.steps)]
            mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
            steps = math.ceil(len(triples) / size)
            print(f"| {size:,} | {fanout or 'all (k_hop)'} | {steps} | {mean['seeds']:.1%} | "
                  f"{mean['nodes']:.1%} | {mean['edges']:.1%} | {steps * mean['edges']:.1f} | "
                  f"{mean['sample_s']:.2f} |", flush=True)


if __name__ == "__main__":
    main()

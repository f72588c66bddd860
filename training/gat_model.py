"""The relation-aware GAT: the model, its layer, its losses and its layer-wise inference
(torch / PyG imported lazily).

Layer. PyG's ``GATConv(edge_dim=d_r, add_self_loops=False, residual=True, dropout=0)`` fed the
**reversed** edge index: for a walk edge u→v it gets the pair (v, u). GATConv normalises the
softmax over the edges that share a target and aggregates the sources' features, so with the
reversed index the softmax runs over u's out-neighbours — α(u→·) is a transition distribution —
and u receives Σ_v α(u→v|r)·W h_v. GATConv puts edge features only into ``edge_update`` (the
logits, through its own ``lin_edge`` = W_r); ``message`` is α·W h_v, so W_r e_r never enters a
message. That is α = softmax_v LeakyReLU(aᵀ[W h_u ‖ W h_v ‖ W_r e_r]) with a split into
a_dst, a_src, a_edge — so the library layer is used rather than a hand-written one, in one
respect changed (``relation_gat_conv``): the edge term a_edgeᵀ W_r e depends on the edge's
relation and direction only, so it is computed once per row of a 2R-row table (e_r, then −e_r)
and gathered per edge (``edge_types``), where GATConv would project every edge's vector — on
FB15k-237 607k edges against 450 rows, every layer and step; same parameters, same α. No self
loops: a loop would take probability mass in the transition distribution for a move that is no
KG edge; ``residual=True`` instead adds the layer's own projection of h_u to u's output (it
enters neither α nor the neighbours' messages). Layers before the last concatenate their heads
(ELU); the last averages them. Every head has ``hidden / heads`` channels, so a concatenating
layer is ``hidden`` wide and the last layer's output z is ``hidden / heads`` wide: per-edge
messages of heads × 128 floats would take ~2 GB per copy at 10⁶ edges, too much for the full-batch
CPU regime. Dropout (0.3) acts on the node features entering each layer, never on
α: the path term needs log α of the exact distribution, and the exported α is that distribution.


Objective. ``link`` = binary cross-entropy of DistMult on z (z_s ⊙ R_r · z_o, R_r a learned
diagonal per canonical relation) on every triple and ``negatives`` corrupted tails each (uniform
over entities). ``path`` (when ``gat.questions`` is set and ``path_weight`` > 0) = −mean log α
over the distinct gold-path edges, α = last layer, mean over heads. Loss = link + path_weight ·
path. Link prediction shapes z (and through it the attention); the path term pushes each gold
edge's share of its source's transition distribution up, and because α depends on (h_u, h_v,
e_r), not on edge ids, the gain carries over to unseen questions that use the same relations
(``bench/gat_attention.py`` measures it on PathQuestion dev).


Export. Layer-wise inference in eval mode over chunks of source nodes holding ≤
``batch_triples`` edges, fewer where ``build.memory_gb`` asks (``block_edges``; GATConv's
bipartite form: the chunk's nodes as targets, their full out-neighbourhoods as sources — exact,
since a chunk holds all out-edges of its nodes, so α does not depend on the chunking). Each
layer's output rows and the last layer's α go to disk (``gat_rows.DiskRows``) a chunk at a time
and the next layer gathers the rows it reads, so memory is O(chunk) at any size.
``edges.parquet`` gets every directed edge with the last layer's α (mean over heads), written a
block at a time. A smaller block changes α only by float32 rounding (the layer's matrix
products over fewer rows: ≤ 1e-7 absolute on the test graph). ``gat.uniform`` is the
ablation: no model, α = 1/out-degree (``runtime.taimr.uniform_edges``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from lokg.training.gat_inputs import Graph, node_chunks
from lokg.training.gat_rows import DiskRows, as_rows

#: an inference block's share of ``build.memory_gb`` (the rest: the graph, the model, the
#: training step's subgraph, Python)
BLOCK_SHARE = 0.25
#: floats per block edge and unit of ``gat.hidden``: heads' messages, logits, softmax, outputs
BLOCK_FLOATS_PER_HIDDEN = 8


def build_model(in_dim: int, rel_dim: int, num_relations: int, cfg: Mapping):
    """The relation-aware GAT (see the module docstring) with a DistMult link decoder."""
    import torch
    import torch.nn.functional as F

    class RelationGAT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dropout = float(cfg["dropout"])
            self.convs, per_head = _conv_layers(in_dim, rel_dim, cfg)
            self.out_dim = per_head
            self.relation_diag = torch.nn.Parameter(torch.ones(num_relations, per_head))

        def layer(self, index: int, x, edge_index, edge_type, relation_table):
            """One layer: (output, α [E, heads]); ``x`` may be GATConv's (sources, targets) pair."""
            conv = self.convs[index]
            if isinstance(x, tuple):
                x = tuple(F.dropout(t, self.dropout, self.training) for t in x)
            else:
                x = F.dropout(x, self.dropout, self.training)
            out, alpha = conv(x, edge_index, edge_type, relation_table)
            return (out if index == len(self.convs) - 1 else F.elu(out)), alpha

        def forward(self, x, edge_index, edge_type, relation_table):
            """z for every node and the last layer's α [E, heads] (edge_index is reversed)."""
            for index in range(len(self.convs)):
                x, alpha = self.layer(index, x, edge_index, edge_type, relation_table)
            return x, alpha

        def query(self, z, s, r):
            """z_s ⊙ R_r: DistMult's score of (s, r, o) is its dot product with z_o."""
            return z[s] * self.relation_diag[r]

    return RelationGAT()


def _conv_layers(in_dim: int, rel_dim: int, cfg: Mapping):
    """The GAT layers (heads concatenated before the last, averaged in it) and the channels per
    head."""
    import torch

    conv_class = relation_gat_conv()
    layers, heads = int(cfg["layers"]), int(cfg["heads"])
    per_head = int(cfg["hidden"]) // heads
    convs = torch.nn.ModuleList()
    width = in_dim
    for layer in range(layers):
        last = layer == layers - 1
        convs.append(conv_class(width, per_head, heads=heads, concat=not last, dropout=0.0,
                                add_self_loops=False, edge_dim=rel_dim, residual=True))
        width = per_head * heads
    return convs, per_head


def relation_gat_conv():
    """PyG's GATConv with its edge term computed per row of ``relation_table`` and gathered per
    edge (module docstring, Layer). Same parameters and state_dict keys, same maths: W_r has no
    bias, so row t's term is that of every edge of type t; messages, softmax and residual are
    GATConv's own."""
    import torch.nn.functional as F
    from torch_geometric.nn import GATConv
    from torch_geometric.utils import softmax

    class RelationGATConv(GATConv):
        def forward(self, x, edge_index, edge_type, relation_table):
            """(output, α [E, heads]); edge e's relation vector is relation_table[edge_type[e]]."""
            heads, channels = self.heads, self.out_channels
            table = self.lin_edge(relation_table).view(-1, heads, channels)
            edge_term = (table * self.att_edge).sum(-1)[edge_type]
            out, (_, alpha) = super().forward(x, edge_index, edge_term,
                                              return_attention_weights=True)
            return out, alpha

        def edge_update(self, alpha_j, alpha_i, edge_attr, index, ptr, dim_size):
            """GATConv's, with ``edge_attr`` the edge term itself (forward gathered it)."""
            alpha = alpha_j if alpha_i is None else alpha_j + alpha_i
            alpha = F.leaky_relu(alpha + edge_attr, self.negative_slope)
            return softmax(alpha, index, ptr, dim_size)

    return RelationGATConv


def relation_table(rel_vec):
    """The relation input per edge type: rows 0..R-1 = e_r (forward), R..2R-1 = −e_r (inverse:
    TransE's h + r ≈ t walked backwards)."""
    import torch

    return torch.cat([rel_vec, -rel_vec])


def edge_types(rel, inverse, num_relations: int):
    """Each edge's row of ``relation_table``: r forward, R + r inverse (torch tensors)."""
    return rel + num_relations * inverse.long()


def block_edges(cfg: Mapping, in_dim: int, memory_gb: float | None) -> int:
    """Edges per inference block: ``batch_triples``, fewer where a block's tensors would pass
    ``BLOCK_SHARE`` of ``memory_gb`` (None: no bound). A block edge costs its source's input
    row and ``BLOCK_FLOATS_PER_HIDDEN`` × ``hidden`` floats of messages, logits and outputs."""
    cap = int(cfg["batch_triples"])
    if memory_gb is None:
        return cap
    per_edge = 4 * (in_dim + BLOCK_FLOATS_PER_HIDDEN * int(cfg["hidden"]))
    return max(1, min(cap, int(memory_gb * 1e9 * BLOCK_SHARE / per_edge)))


def infer(model, graph: Graph, x, rel_vec, device, chunk_edges: int, scratch: Path):
    """Eval-mode z [N, out] and last-layer α (mean over heads, float64 [E]) as ``DiskRows``
    under ``scratch``, layer by layer over chunks of source nodes (exact: a chunk holds all
    out-edges of its nodes); ``x``: the node features (``gat_rows.as_rows``). Memory: one
    chunk's rows and tensors, whatever the graph's size."""
    import torch

    model.eval()
    chunks, h = node_chunks(graph.indptr, chunk_edges), as_rows(x)
    alpha_out = DiskRows(scratch / "alpha.f64", graph.num_edges, None, np.float64)
    with torch.no_grad():
        for index, conv in enumerate(model.convs):
            width = conv.heads * conv.out_channels if conv.concat else conv.out_channels
            out = DiskRows(scratch / f"layer{index}.f32", graph.num_nodes, width, np.float32)
            for u0, u1 in chunks:
                e0, e1 = int(graph.indptr[u0]), int(graph.indptr[u1])
                res, alpha = _chunk_layer(model, index, h, graph, (u0, u1, e0, e1), rel_vec,
                                          device)
                out.write(u0, res.cpu().numpy())
                if index == len(model.convs) - 1:
                    alpha_out.write(e0, alpha.mean(1).double().cpu().numpy())
            if index:  # the layer before: read by this one only
                h.path.unlink()
            h = out
    return h, alpha_out


def _chunk_layer(model, index: int, h, graph: Graph, span: tuple[int, int, int, int], rel_vec,
                 device):
    """Layer ``index`` on source nodes u0..u1-1 (edges e0..e1-1): GATConv's bipartite form with
    the chunk's nodes as targets and their out-neighbours as sources."""
    import torch

    u0, u1, e0, e1 = span
    nbrs, local = torch.unique(torch.from_numpy(graph.dst[e0:e1]).long(), return_inverse=True)
    edge_index = torch.stack([local, torch.from_numpy(graph.src[e0:e1]).long() - u0])
    types = edge_types(torch.from_numpy(graph.rel[e0:e1]).long(),
                       torch.from_numpy(graph.inverse[e0:e1]), len(rel_vec))
    pair = (torch.from_numpy(h.take(nbrs.numpy())).to(device),
            torch.from_numpy(h.read(u0, u1)).to(device))
    return model.layer(index, pair, edge_index.to(device), types.to(device),
                       relation_table(rel_vec))


def link_loss(model, z, s, r, o, neg):
    import torch
    import torch.nn.functional as F

    k = len(neg) // max(len(s), 1)
    query = model.query(z, s, r)  # shared by a triple and its corrupted tails
    pos = (query * z[o]).sum(-1)
    negs = (query.repeat(k, 1) * z[neg]).sum(-1)
    logits = torch.cat([pos, negs])
    labels = torch.cat([torch.ones_like(pos), torch.zeros_like(negs)])
    return F.binary_cross_entropy_with_logits(logits, labels)


def path_loss(alpha, local_gold):
    return -alpha[local_gold].mean(1).clamp_min(1e-12).log().mean()


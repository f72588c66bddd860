"""Stage ``gat`` (DESIGN §2.8): relation-aware graph attention → per-edge α for TAIMR.

Graph. Every canonical triple (s, r, o) is walked forward s→o and backward o→s (``inverse``);
``runtime.taimr.with_inverses`` builds the edge list, sorted by source, so node u's out-edges
are one CSR slice. Node inputs h_v are the entity vectors of ``entity_encode``; the relation
input of an edge is the canonical relation's TransE vector e_r (the mean of its members' rows of
``relation_embeddings``), and −e_r on an inverse edge (TransE: h + r ≈ t, so walking r backwards
is −r).

Layer. PyG's ``GATConv(edge_dim=d_r, add_self_loops=False, residual=True, dropout=0)`` fed the
**reversed** edge index: for a walk edge u→v it gets the pair (v, u). GATConv normalises the
softmax over the edges that share a target and aggregates the sources' features, so with the
reversed index the softmax runs over u's out-neighbours — α(u→·) is a transition distribution —
and u receives Σ_v α(u→v|r)·W h_v. GATConv puts edge features only into ``edge_update`` (the
logits, through its own ``lin_edge`` = W_r); ``message`` is α·W h_v, so W_r e_r never enters a
message. That is DESIGN's α = softmax_v LeakyReLU(aᵀ[W h_u ‖ W h_v ‖ W_r e_r]) with a split into
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
CPU regime of DESIGN §2.8. Dropout (0.3) acts on the node features entering each layer, never on
α: the path term needs log α of the exact distribution, and the exported α is that distribution.

Objective. ``link`` = binary cross-entropy of DistMult scores ⟨z_s, R_r, z_o⟩ (R_r a learned
diagonal per canonical relation) on every triple and ``negatives`` corrupted tails each (uniform
over entities). ``path`` (when ``gat.questions`` is set and ``path_weight`` > 0) = −mean log α
over the distinct gold-path edges, α = last layer, mean over heads. Loss = link + path_weight ·
path. Link prediction shapes z (and through it the attention); the path term pushes each gold
edge's share of its source's transition distribution up, and because α depends on (h_u, h_v,
e_r), not on edge ids, the gain carries over to unseen questions that use the same relations
(``bench/gat_attention.py`` measures it on PathQuestion dev).

Gold paths. ``gat.questions``: PathQuestion lines ``question \\t answers \\t
s#r1#e1#r2#…#ans#<end>#ans`` (entity keys and relation names as ingested) or JSONL lines with
``topic_entities`` (keys), ``path`` (relation names) and optionally ``answer_keys`` (as
``pipeline/synth.py`` writes). Relation names go through ``relation_map`` to canonical ids. A
question constrains the entities at each hop it names; its gold edges are the forward edges of
every walk that satisfies the constraints (forward from the topic, then pruned back from the
reachable endpoints). Questions with an unknown key or relation, or no such walk, are counted
and skipped. The stage refuses a file named dev/test/valid: the path term trains on train only.

Batches. The whole graph per step when its directed edges ≤ ``max_full_batch_edges``. Above,
each step takes ``batch_triples`` triples, their corrupted tails and a slice of the gold edges,
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

Export. Layer-wise inference in eval mode over chunks of source nodes holding ≤
``batch_triples`` edges (GATConv's bipartite form: the chunk's nodes as targets, their
out-neighbours as sources — exact, since a chunk holds all out-edges of its nodes), so memory is
O(N·hidden + chunk) at any size. ``edges.parquet`` gets every directed edge with the last
layer's α (mean over heads). ``gat.uniform`` is the ablation: no model, α = 1/out-degree
(``runtime.taimr.uniform_edges``).

Refresh (``previous:`` inputs: same code and settings, changed input data; pipeline/refresh.py).
The model starts from the previous build's ``gat/model.pt``: the layers (not indexed by entity
or relation) as they were, ``relation_diag`` rows carried over by canonical relation name (a new
relation gets the usual ones; training/warm_start.py), and trains ``gat.refresh_epochs``
epochs (at most ``gat.epochs``) at ``gat.refresh_learning_rate``: Adam's state starts afresh,
and at the full rate its first steps undo much of the previous training. Before those epochs the
previous parameters are scored on this build's graph (the fixed-negative eval link loss); when
that is within ``gat.refresh_loss_margin`` of the loss of the last build that trained
(``losses.json`` ``eval_link.reference``, ``reference_loss``), the epochs are skipped and α
is that one forward pass — the previous model re-inferred on the new graph and inputs (the report's ``refresh``: ``epochs`` 0,
``stopped`` with both losses). Without those parameters, or when they do not fit (another
encoder width), it trains from scratch; the report's ``refresh`` says warm or cold and why.

Run directory ``gat/``: config.json (settings, seed, device, sizes, versions, objective),
losses.json (per epoch: link, path; and ``eval_link``: the fixed-negative
link loss before and after training, which the next refresh compares with), model.pt (state_dict), timing.json.
"""

from __future__ import annotations

import json
import math
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lokg.pipeline.stage import Laps, StageError, previous_inputs, torch_threads
from lokg.runtime.contract import read_table, write_table
from lokg.runtime.encoder import resolve_device
from lokg.runtime.taimr import uniform_edges, with_inverses
from lokg.training.settings import GatSettings
from lokg.training.warm_start import (cold, match_by_key, next_reference, reference_loss,
                                 refresh_epochs, stop_loss, warm)

STAGE = "gat"
SPLIT_NAMES = ("dev", "test", "valid", "validation")  # never trained on
MAX_FRONTIER = 10_000  # a gold walk reaching more entities at one hop is skipped (not a path)
EVAL_TRIPLES = 100_000  # triples in the fixed-negative link-loss check before/after training


def settings(config: Mapping) -> GatSettings:
    """The ``gat`` section, checked (unknown keys and bad values name themselves)."""
    return GatSettings.of(config, StageError)


# ============================================================================================
# inputs (numpy / pyarrow only)


@dataclass
class Graph:
    """Directed edges (inverses included) sorted by source; ``indptr`` is the CSR over sources."""

    num_nodes: int
    src: np.ndarray
    rel: np.ndarray
    dst: np.ndarray
    inverse: np.ndarray
    indptr: np.ndarray = field(init=False)

    def __post_init__(self):
        self.indptr = np.concatenate(
            [[0], np.cumsum(np.bincount(self.src, minlength=self.num_nodes))]).astype(np.int64)

    @classmethod
    def from_triples(cls, triples: np.ndarray, num_nodes: int) -> Graph:
        return cls(num_nodes, *with_inverses(triples[:, 0], triples[:, 1], triples[:, 2]))

    @property
    def num_edges(self) -> int:
        return len(self.src)

    def out_degree(self) -> np.ndarray:
        return np.diff(self.indptr)


def read_triples(path: str | Path) -> np.ndarray:
    tri = read_table(Path(path), "triples")
    return np.stack([tri.column(c).to_numpy() for c in ("s", "r", "o")], axis=1).astype(np.int64)


def node_features(vectors_path: str | Path, ids_path: str | Path, num_nodes: int) -> np.ndarray:
    """Entity vectors indexed by entity id (``entity_vectors`` rows follow ``entity_ids``)."""
    vectors = np.load(vectors_path)
    table = read_table(Path(ids_path), "entity_ids")
    rows, ids = table.column("row").to_numpy(), table.column("id").to_numpy()
    if vectors.ndim != 2 or len(vectors) != len(rows):
        raise StageError(f"{vectors_path}: shape {vectors.shape} does not match the {len(rows)} "
                         f"rows of {ids_path}")
    if len(ids) and (ids.min() < 0 or len(np.unique(ids)) != len(ids)):
        raise StageError(f"{ids_path}: entity ids must be distinct and >= 0")
    n = max(num_nodes, int(ids.max()) + 1 if len(ids) else 0)
    x = np.zeros((n, vectors.shape[1]), dtype=np.float32)
    present = np.zeros(n, dtype=bool)
    x[ids], present[ids] = vectors[rows], True
    if not present[:num_nodes].all():
        missing = np.flatnonzero(~present[:num_nodes])
        raise StageError(f"{ids_path}: {len(missing)} entities of the triples have no vector "
                         f"(e.g. id {int(missing[0])}); entity_encode must cover every entity")
    return x


def relation_vectors(embeddings_path: str | Path, relation_map_path: str | Path,
                     num_relations: int) -> np.ndarray:
    """Canonical relation c's vector = mean of the TransE rows of its original members."""
    emb = np.load(embeddings_path).astype(np.float32)
    rmap = read_table(Path(relation_map_path), "relation_map")
    ids, canon = rmap.column("id").to_numpy(), rmap.column("canonical_id").to_numpy()
    if emb.ndim != 2 or (len(ids) and ids.max() >= len(emb)):
        raise StageError(f"{embeddings_path}: shape {emb.shape} has no row for every original "
                         f"relation of {relation_map_path} (ids up to {int(ids.max())})")
    if len(canon) and (canon.min() < 0 or canon.max() >= num_relations):
        raise StageError(f"{relation_map_path}: canonical ids outside the {num_relations} "
                         f"canonical relations")
    sums = np.zeros((num_relations, emb.shape[1]), dtype=np.float64)
    np.add.at(sums, canon, emb[ids])
    counts = np.bincount(canon, minlength=num_relations)
    if (counts == 0).any():
        raise StageError(f"{relation_map_path}: canonical relation {int(np.argmin(counts))} "
                         f"has no member, so no TransE vector")
    return (sums / counts[:, None]).astype(np.float32)


# --------------------------------------------------------------------------------------------
# gold paths


@dataclass(frozen=True)
class GoldPath:
    """Relation ids hop by hop; ``nodes[i]`` = allowed entities at position i (None = any)."""

    relations: tuple[int, ...]
    nodes: tuple[frozenset | None, ...]


@dataclass
class RawPaths:
    """Questions parsed from a file, still as keys and names (distinct paths only)."""

    paths: list[tuple[tuple[str, ...], tuple[tuple[str, ...] | None, ...]]]
    lines: int


def parse_questions(path: str | Path) -> RawPaths:
    """PathQuestion ``q \\t a \\t s#r1#e1#…#<end>#a`` lines or JSONL (topic_entities, path)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise StageError(f"{path}: cannot read questions ({exc.strerror})") from None
    jsonl = path.suffix in (".jsonl", ".json") or text.lstrip().startswith("{")
    seen, paths, lines = set(), [], 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        lines += 1
        where = f"{path}:{number}"
        if jsonl:
            try:
                q = json.loads(line)
                rels = tuple(str(r) for r in q["path"])
                nodes = [tuple(str(k) for k in q["topic_entities"])] + [None] * len(rels)
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise StageError(f"{where}: expected JSON with 'topic_entities' and 'path' "
                                 f"({exc})") from None
            if q.get("answer_keys"):
                nodes[-1] = tuple(str(k) for k in q["answer_keys"])
        else:
            parts = line.split("\t")
            tokens = parts[2].strip().split("#") if len(parts) == 3 else []
            if "<end>" in tokens:
                tokens = tokens[:tokens.index("<end>")]
            if len(tokens) < 3 or len(tokens) % 2 == 0:
                raise StageError(f"{where}: expected 'question \\t answers \\t "
                                 f"subject#relation#entity#...#<end>#answer'")
            rels = tuple(tokens[1::2])
            nodes = [(k,) for k in tokens[0::2]]
        if not rels or not nodes[0]:
            raise StageError(f"{where}: a question needs a topic entity and at least one relation")
        key = (rels, tuple(nodes))
        if key not in seen:
            seen.add(key)
            paths.append(key)
    return RawPaths(paths, lines)


def resolve_paths(raw: RawPaths, entities_path: str | Path, relation_map_path: str | Path
                  ) -> tuple[list[GoldPath], int]:
    """Keys → entity ids, relation names → canonical ids; (paths, how many named unknowns)."""
    keys = sorted({k for _, nodes in raw.paths for ks in nodes if ks for k in ks})
    ent = read_table(Path(entities_path), columns=["id", "key"])
    ent = ent.filter(pc.is_in(ent.column("key"), value_set=pa.array(keys, pa.string())))
    key_to_id = dict(zip(ent.column("key").to_pylist(), ent.column("id").to_pylist()))
    rmap = read_table(Path(relation_map_path), "relation_map")
    rel_to_canon = dict(zip(rmap.column("name").to_pylist(), rmap.column("canonical_id").to_pylist()))
    out, unknown = [], 0
    for rels, nodes in raw.paths:
        if any(r not in rel_to_canon for r in rels) or any(
                k not in key_to_id for ks in nodes if ks for k in ks):
            unknown += 1
            continue
        out.append(GoldPath(tuple(int(rel_to_canon[r]) for r in rels),
                            tuple(frozenset(key_to_id[k] for k in ks) if ks else None
                                  for ks in nodes)))
    return out, unknown


def gold_edges(paths: Sequence[GoldPath], graph: Graph) -> tuple[np.ndarray, int]:
    """Distinct edge ids on the gold walks of ``paths``; (ids, how many paths had no walk)."""
    found, missed = [], 0
    for gp in paths:
        frontier = np.array(sorted(gp.nodes[0]), dtype=np.int64)
        frontier = frontier[frontier < graph.num_nodes]  # an entity without edges starts no walk
        hops = []
        for i, rel in enumerate(gp.relations):
            starts, ends = graph.indptr[frontier], graph.indptr[frontier + 1]
            eids = np.concatenate([np.arange(a, b) for a, b in zip(starts, ends)] or [[]])
            eids = eids.astype(np.int64)
            eids = eids[(graph.rel[eids] == rel) & ~graph.inverse[eids]]
            allowed = gp.nodes[i + 1]
            if allowed is not None:
                eids = eids[np.isin(graph.dst[eids], np.fromiter(allowed, np.int64))]
            frontier = np.unique(graph.dst[eids])
            hops.append(eids)
            if not len(frontier) or len(frontier) > MAX_FRONTIER:
                break
        if len(hops) < len(gp.relations) or not len(frontier) or len(frontier) > MAX_FRONTIER:
            missed += 1
            continue
        alive = frontier
        for i in reversed(range(len(hops))):
            hops[i] = hops[i][np.isin(graph.dst[hops[i]], alive)]
            alive = np.unique(graph.src[hops[i]])
        found.extend(hops)
    ids = np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)
    return ids.astype(np.int64), missed


# ============================================================================================
# the model (torch / PyG imported lazily)


def build_model(in_dim: int, rel_dim: int, num_relations: int, cfg: Mapping):
    """The relation-aware GAT (see the module docstring) with a DistMult link decoder."""
    import torch
    import torch.nn.functional as F

    conv_class = relation_gat_conv()

    class RelationGAT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            layers, heads = int(cfg["layers"]), int(cfg["heads"])
            per_head = int(cfg["hidden"]) // heads
            self.dropout = float(cfg["dropout"])
            self.convs = torch.nn.ModuleList()
            width = in_dim
            for layer in range(layers):
                last = layer == layers - 1
                self.convs.append(conv_class(width, per_head, heads=heads, concat=not last,
                                             dropout=0.0, add_self_loops=False,
                                             edge_dim=rel_dim, residual=True))
                width = per_head * heads
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


def node_chunks(indptr: np.ndarray, max_edges: int) -> list[tuple[int, int]]:
    """Consecutive source-node ranges holding ≤ max_edges out-edges (one hub may hold more)."""
    n, chunks, u0 = len(indptr) - 1, [], 0
    while u0 < n:
        u1 = int(np.searchsorted(indptr, indptr[u0] + max_edges, side="right")) - 1
        u1 = min(max(u1, u0 + 1), n)
        chunks.append((u0, u1))
        u0 = u1
    return chunks


def infer(model, graph: Graph, x, rel_vec, device, chunk_edges: int):
    """Eval-mode z [N, out] (CPU) and last-layer α (mean over heads, float64 [E]), layer by
    layer over chunks of source nodes (exact: a chunk holds all out-edges of its nodes)."""
    import torch

    model.eval()
    src, dst = torch.from_numpy(graph.src), torch.from_numpy(graph.dst)
    types = edge_types(torch.from_numpy(graph.rel), torch.from_numpy(graph.inverse), len(rel_vec))
    table = relation_table(rel_vec)
    alpha_out = np.empty(graph.num_edges, dtype=np.float64)
    chunks = node_chunks(graph.indptr, chunk_edges)
    h = x
    with torch.no_grad():
        for index in range(len(model.convs)):
            out = None
            for u0, u1 in chunks:
                e0, e1 = int(graph.indptr[u0]), int(graph.indptr[u1])
                nbrs, local = torch.unique(dst[e0:e1], return_inverse=True)
                edge_index = torch.stack([local, src[e0:e1] - u0]).to(device)
                res, alpha = model.layer(index, (h[nbrs].to(device), h[u0:u1].to(device)),
                                         edge_index, types[e0:e1].to(device), table)
                if out is None:
                    out = torch.empty(graph.num_nodes, res.shape[1])
                out[u0:u1] = res.cpu()
                if index == len(model.convs) - 1:
                    alpha_out[e0:e1] = alpha.mean(1).double().cpu().numpy()
            h = out
    return h, alpha_out


@dataclass
class TrainResult:
    model: object
    attention: np.ndarray  # float64 [E], eval mode, after training
    attention_before: np.ndarray  # the same for the untrained model
    link: list[float]
    path: list[float]
    eval_link_before: float
    eval_link_after: float
    epoch_seconds: list[float]
    mode: str  # full | sampled
    device: str


def _link_loss(model, z, s, r, o, neg):
    import torch
    import torch.nn.functional as F

    k = len(neg) // max(len(s), 1)
    query = model.query(z, s, r)  # shared by a triple and its corrupted tails
    pos = (query * z[o]).sum(-1)
    negs = (query.repeat(k, 1) * z[neg]).sum(-1)
    logits = torch.cat([pos, negs])
    labels = torch.cat([torch.ones_like(pos), torch.zeros_like(negs)])
    return F.binary_cross_entropy_with_logits(logits, labels)


def _path_loss(alpha, local_gold):
    return -alpha[local_gold].mean(1).clamp_min(1e-12).log().mean()


def train(graph: Graph, x_np: np.ndarray, rel_np: np.ndarray, gold: np.ndarray, cfg: Mapping,
          log=lambda msg: print(msg, file=sys.stderr), state: dict | None = None) -> TrainResult:
    """Train the GAT (full batch or sampled subgraphs) and return α before/after and losses;
    ``state``: parameters to start from (a refresh's warm start, ``warm_start_state``)."""
    import torch

    device = torch.device(resolve_device(str(cfg["device"]), setting=f"{STAGE}.device",
                                         error=StageError))
    with torch_threads(cfg.get("threads")):
        return _train(graph, x_np, rel_np, gold, cfg, device, log, state)


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
        self.order = torch.arange(graph.num_edges)
        self.local = torch.full((graph.num_nodes,), -1, dtype=torch.long)

    def shuffle(self) -> None:
        """A fresh random order of every node's out-edges (O(E log E), once an epoch)."""
        import torch

        by_key = torch.argsort(torch.rand(len(self.src), generator=self.gen))
        self.order = by_key[torch.sort(self.src[by_key], stable=True).indices]

    def out_edges(self, nodes):
        """≤ fanout out-edge ids of each node: a window of its shuffled slice."""
        import torch

        start = self.indptr[nodes]
        degree = self.indptr[nodes + 1] - start
        take = degree.clamp(max=self.fanout)
        owner = torch.repeat_interleave(torch.arange(len(nodes)), take)
        rank = torch.arange(len(owner)) - (torch.cumsum(take, 0) - take)[owner]
        offset = (torch.rand(len(nodes), generator=self.gen) * degree).long()
        return self.order[start[owner] + (offset[owner] + rank) % degree[owner]]

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


class _Epochs:
    """One training epoch at a time: full batch up to ``max_full_batch_edges``, beyond that over
    neighbour-sampled mini-batches (``NeighbourSampler``); and a fixed-negative link-loss check
    so that the loss before and after training compare."""

    def __init__(self, model, graph: Graph, x, rel_vec, gold: np.ndarray, cfg: Mapping, device):
        import torch

        self.model, self.x, self.device = model, x, device
        self.gen = torch.Generator().manual_seed(int(cfg["seed"]))
        self.opt = torch.optim.Adam(model.parameters(), lr=float(cfg["learning_rate"]),
                                    weight_decay=float(cfg["weight_decay"]))
        self.chunk, self.k = int(cfg["batch_triples"]), int(cfg["negatives"])
        self.n = graph.num_nodes
        self.path_weight = float(cfg["path_weight"]) if len(gold) else 0.0
        self.src, self.dst = torch.from_numpy(graph.src), torch.from_numpy(graph.dst)
        self.rel = torch.from_numpy(graph.rel)
        self.types = edge_types(self.rel, torch.from_numpy(graph.inverse), len(rel_vec))
        self.table = relation_table(rel_vec)
        self.reversed_index = torch.stack([self.dst, self.src])
        self.forward = torch.from_numpy(np.flatnonzero(~graph.inverse))
        self.gold = torch.from_numpy(gold)
        self.full = graph.num_edges <= int(cfg["max_full_batch_edges"])
        self.sampler = None if self.full else NeighbourSampler(graph, int(cfg["fanout"]),
                                                               self.gen)
        self.pass_steps = math.ceil(len(self.forward) / self.chunk)
        self.epoch_steps = (self.pass_steps if cfg["sampled_steps"] is None
                            else min(int(cfg["sampled_steps"]), self.pass_steps))
        self.batches = self._passes()
        self.on_device = {  # full batch: the whole graph moved to the device once
            "x": x.to(device), "index": self.reversed_index.to(device),
            "types": self.types.to(device), "gold": self.gold.to(device),
            "sro": [t[self.forward].to(device) for t in (self.src, self.rel, self.dst)],
        } if self.full else None
        self.check = self.forward[torch.randperm(len(self.forward), generator=self.gen)[
            :EVAL_TRIPLES]]
        self.check_neg = torch.randint(0, self.n, (len(self.check) * self.k,), generator=self.gen)

    def eval_link(self, z) -> float:
        import torch

        s, r, o = (t[self.check].to(self.device) for t in (self.src, self.rel, self.dst))
        with torch.no_grad():
            return _link_loss(self.model, z.to(self.device), s, r, o,
                              self.check_neg.to(self.device)).item()

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
        link = _link_loss(self.model, z, s, r, o, neg)
        path = (_path_loss(alpha, on["gold"]) if self.path_weight
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
        """One step on the sampled subgraph around a batch's heads, tails, negatives and the
        heads of its share of gold-path edges (the seeds: local ids 0..len(seeds)-1, sorted)."""
        import torch

        device, src, dst = self.device, self.src, self.dst
        neg = torch.randint(0, self.n, (len(batch) * self.k,), generator=self.gen)
        seeds = torch.unique(torch.cat([src[batch], dst[batch], neg, src[gold]]))
        sub = self.sampler.sample(seeds, len(self.model.convs), must=gold)
        z, alpha = self._sampled_forward(sub)
        heads, tails, negs = torch.searchsorted(  # seeds are sorted and local ids 0..
            seeds, torch.cat([src[batch], dst[batch], neg])).to(device).split(
            [len(batch), len(batch), len(neg)])
        link = _link_loss(self.model, z, heads, self.rel[batch].to(device), tails, negs)
        first_hop = sub.edges[:sub.edges_within[0]]
        path = (_path_loss(alpha, torch.searchsorted(first_hop, gold).to(device))
                if self.path_weight and len(gold) else torch.zeros((), device=device))
        return self._step(link, path)

    def _sampled_forward(self, sub: Subgraph):
        """The seeds' z and the last layer's α over their sampled edges: layer l computes only
        the nodes within layers−1−l hops (the ones a later layer reads)."""
        layers = len(self.model.convs)
        h = self.x[sub.nodes].to(self.device)
        for layer in range(layers):
            targets, edges = sub.within[layers - 1 - layer], sub.edges_within[layers - 1 - layer]
            h, alpha = self.model.layer(layer, (h, h[:targets]),
                                        sub.index[:, :edges].to(self.device),
                                        self.types[sub.edges[:edges]].to(self.device), self.table)
        return h, alpha


def _train(graph, x_np, rel_np, gold, cfg, device, log, state=None) -> TrainResult:
    """``cfg["stop_loss"]`` (a refresh): no epoch when the starting parameters' eval link loss
    is already at most that."""
    import torch

    torch.manual_seed(int(cfg["seed"]))
    x = torch.from_numpy(x_np)
    rel_vec = torch.from_numpy(rel_np).to(device)
    model = build_model(x.shape[1], rel_vec.shape[1], rel_vec.shape[0], cfg)
    if state is not None:
        model.load_state_dict(state)
    model = model.to(device)
    epochs = _Epochs(model, graph, x, rel_vec, gold, cfg, device)
    z0, attention_before = infer(model, graph, x, rel_vec, device, epochs.chunk)
    eval_before = epochs.eval_link(z0)
    del z0
    stop = cfg.get("stop_loss")
    n_epochs = 0 if stop is not None and eval_before <= stop else int(cfg["epochs"])

    link_hist, path_hist, epoch_seconds = [], [], []
    for epoch in range(n_epochs):
        started = time.perf_counter()
        link, path = epochs.run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        epoch_seconds.append(round(time.perf_counter() - started, 4))
        link_hist.append(link)
        path_hist.append(path)
        log(f"{STAGE}: epoch {epoch + 1}: link {link:.4f}"
            + (f" path {path:.4f}" if path is not None else "") + f" ({epoch_seconds[-1]:.2f}s)")

    if n_epochs:
        z, attention = infer(model, graph, x, rel_vec, device, epochs.chunk)
        eval_after = epochs.eval_link(z)
    else:  # the model did not change: its α and loss are the ones before
        attention, eval_after = attention_before, eval_before
    return TrainResult(model=model.cpu(), attention=attention, attention_before=attention_before,
                       link=link_hist, path=path_hist, eval_link_before=eval_before,
                       eval_link_after=eval_after, epoch_seconds=epoch_seconds,
                       mode="full" if epochs.full else "sampled", device=str(device))


# ============================================================================================
# the stage


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


def _read_graph(inputs: Mapping[str, str]) -> tuple[np.ndarray, Graph, int]:
    """The triples, their graph (inverses added) and the relation count; refused when the
    triples are empty or name a relation the relations table lacks."""
    triples = read_triples(inputs["triples"])
    if not len(triples):
        raise StageError(f"{inputs['triples']}: the triples table is empty")
    relation_ids = read_table(Path(inputs["relations"]), "relations").column("id").to_numpy()
    num_relations = int(relation_ids.max()) + 1
    if triples[:, 1].max() >= num_relations:
        raise StageError(f"{inputs['triples']}: relation id {int(triples[:, 1].max())} is not in "
                         f"{inputs['relations']}")
    return triples, Graph.from_triples(triples, int(triples[:, [0, 2]].max()) + 1), num_relations


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    """Stage entry point: train the GAT (or the uniform ablation); write edges + run dir."""
    cfg = settings(config)
    _check_inputs(cfg, inputs)
    out = Path(out_dir)
    run_dir = out / "gat"
    run_dir.mkdir(parents=True, exist_ok=True)
    lap = Laps()
    triples, graph, num_relations = _read_graph(inputs)
    gold, gold_stats = load_gold(cfg, inputs, graph)
    lap("read_graph")

    report: dict = {"nodes": graph.num_nodes, "edges": graph.num_edges, "triples": len(triples),
                    "relations": num_relations, "uniform": bool(cfg["uniform"])}
    if gold_stats:
        report["questions"] = gold_stats
        report["gold_attention_uniform"] = _mean(1.0 / graph.out_degree()[graph.src[gold]])
    run_config = {"stage": STAGE, "gat": cfg, "seed": int(cfg["seed"]), "nodes": graph.num_nodes,
                  "edges": graph.num_edges, "relations": num_relations, "versions": _versions()}
    if cfg["uniform"]:
        timing = _write_uniform(triples, run_config, report, out, lap)
    else:
        timing = _train_and_write(cfg, inputs, graph, gold, run_config, report, out, lap)
    _write_json(run_dir / "timing.json", {"step_seconds": lap.seconds, **timing})
    report["step_seconds"] = lap.seconds
    return {"outputs": {"edges": str(out / "edges.parquet"), "gat_run": str(run_dir)},
            "report": report}


def _write_uniform(triples: np.ndarray, run_config: dict, report: dict, out: Path,
                   lap: Laps) -> dict:
    """The ablation: α = 1/out-degree, no model."""
    report.update(refresh=cold(f"{STAGE}.uniform: no model to train"), device=None)
    tri = pa.table({"s": triples[:, 0], "r": triples[:, 1], "o": triples[:, 2]})
    write_table("edges", uniform_edges(tri), out / "edges.parquet")
    _write_json(out / "gat" / "config.json", {**run_config, "objective": "none (uniform "
                                              "ablation: α = 1/out-degree)", "device": None})
    lap("write")
    return {}


def _train_and_write(cfg: Mapping, inputs: Mapping[str, str], graph: Graph, gold: np.ndarray,
                     run_config: dict, report: dict, out: Path, lap: Laps) -> dict:
    """Train (warm from the previous build in a refresh), write the edges with α and the
    self-describing run directory; the report gains the losses. Returns the epoch timings."""
    import torch

    x = node_features(inputs["entity_vectors"], inputs["entity_ids"],
                      graph.num_nodes)[:graph.num_nodes]
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
    result = train(graph, x, rel_vec, gold, {**cfg, **warm_cfg}, state=state)
    lap("train")
    reference = next_reference(report["refresh"], warm_cfg.get("stop_loss"), bool(result.link),
                               "eval_link_loss", result.eval_link_before,
                               result.eval_link_after, reference)

    write_table("edges", pa.table({"s": graph.src, "r": graph.rel, "o": graph.dst,
                                   "inverse": graph.inverse, "attention": result.attention}),
                out / "edges.parquet")
    run_dir = out / "gat"
    torch.save(result.model.state_dict(), run_dir / "model.pt")
    _write_json(run_dir / "config.json", {
        **run_config, "device": result.device, "mode": result.mode, "refresh": report["refresh"],
        "node_dim": int(x.shape[1]), "relation_dim": int(rel_vec.shape[1]),
        "output_dim": int(result.model.out_dim),
        "objective": ("BCE link prediction (DistMult on z, corrupted tails) + path_weight * "
                      "(-mean log alpha over gold-path edges)"),
    })
    _write_json(run_dir / "losses.json", {
        "per": "epoch", "link": result.link, "path": result.path,
        "eval_link": {"before": result.eval_link_before, "after": result.eval_link_after,
                      "reference": reference}})
    lap("write")
    report.update(_trained_report(result, gold, bool(report.get("questions"))))
    return {"epoch_seconds": result.epoch_seconds}


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


if __name__ == "__main__":
    from lokg.pipeline.driver import stage_main

    stage_main(STAGE)

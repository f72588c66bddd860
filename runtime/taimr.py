"""TAIMR path scoring and beam search over the attention-weighted graph (retrieval).

The search the runtime runs for a head the cache does not hold; the offline ``path_cache`` stage
states the same search in SQL (spark_jobs/path_cache.py: the same rows, ties and score bits).
numpy and pyarrow only, so the runtime imports it without pyspark or torch.

The graph is the canonical triples **with inverse edges**: a triple (s, r, o) is walked forward
s→o and backward o→s (``inverse`` = true, relation r⁻¹). A path from head v₀ is a sequence of
edges v₀ →r₁ v₁ … →r_L v_L and is scored

    S_topo(p) = Σ_{i=1..L} log α(v_{i-1}→v_i | r_i)  +  λ_topo · Σ_{i=1..L} log μ(v_i)

with α the edge attention of the ``edges`` table (a distribution over each node's out-edges) and
μ the node gain of ``node_gain`` — μ of every node reached after the head, the head itself
excluded. The score is a sum of per-edge weights w(e) = log α(e) + λ_topo·log μ(target(e)), so
a path's score is its prefix's score plus the weight of its last edge. Both ``score_path`` and
the search add the weights in hop order, so equal paths get bit-identical scores.

μ(v) = 0 only for an entity with no incoming edge; with inverse edges that is an entity with no
edge at all, which no path can reach, so log 0 = −∞ never enters a score (the graph refuses a
``node_gain`` table that puts μ = 0 on an edge's target).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from lokg.runtime.contract import TABLE_SCHEMAS, Build, read_table, to_numpy


# ============================================================================================
# edges


def with_inverses(s: np.ndarray, r: np.ndarray, o: np.ndarray, dtype=np.int64,
                  sources: tuple[int, int] | None = None):
    """Triples → directed edges (s, r, o, inverse): each triple forward and backward, sorted by
    (s, r, inverse, o), ids as ``dtype``. A self-loop (a, r, a) gives two edges a→a (never
    walked: paths are simple, but they count for the node's degree). ``sources`` = (u0, u1):
    only the edges whose source lies in u0..u1-1 — that slice of the whole list, so that the
    list can be built a block of sources at a time."""
    triples = (s, r, o)
    if sources is None:
        (fs, fr, fo), (bs, br, bo) = triples, triples
    else:
        (fs, fr, fo), (bs, br, bo) = ((s[kept], r[kept], o[kept]) for kept in (
            (s >= sources[0]) & (s < sources[1]), (o >= sources[0]) & (o < sources[1])))
    src = np.concatenate([np.asarray(fs, dtype), np.asarray(bo, dtype)])
    rel = np.concatenate([np.asarray(fr, dtype), np.asarray(br, dtype)])
    dst = np.concatenate([np.asarray(fo, dtype), np.asarray(bs, dtype)])
    inv = np.repeat(np.array([False, True]), [len(fs), len(bs)])
    del triples, fs, fr, fo, bs, br, bo
    order = np.lexsort((dst, inv, rel, src))
    src = src[order]  # one column at a time: the unsorted one goes before the next is sorted
    rel = rel[order]
    dst = dst[order]
    return src, rel, dst, inv[order]


def uniform_edges(triples: pa.Table) -> pa.Table:
    """The ``edges`` table with uniform attention α(s→·) = 1/out-degree(s), out-edges counted
    with inverses — the attention of an untrained graph (GAT's ``uniform`` ablation, tests)."""
    s, r, o, inv = with_inverses(*(triples.column(c).to_numpy() for c in ("s", "r", "o")))
    _, counts = np.unique(s, return_counts=True)
    degree = np.repeat(counts, counts)  # s is sorted: one run per source
    return pa.table({"s": s, "r": r, "o": o, "inverse": inv, "attention": 1.0 / degree},
                    schema=TABLE_SCHEMAS["edges"])


# ============================================================================================
# the graph


def _lex_order(*keys: np.ndarray) -> np.ndarray | None:
    """``np.lexsort(keys)`` (the last key primary), or None when the rows are already in that
    order — a published ``edges`` table is written sorted, and checking is ~20x cheaper."""
    tied = np.ones(max(len(keys[0]) - 1, 0), dtype=bool)
    for key in reversed(keys):
        if (tied & (key[1:] < key[:-1])).any():
            return np.lexsort(keys)
        tied &= key[1:] == key[:-1]
    return None


def _id_dtype(bound: int) -> type:
    """The integer type of ids below ``bound``: int32 where it fits."""
    return np.int32 if bound <= np.iinfo(np.int32).max else np.int64


@dataclass(frozen=True)
class _View:
    """The out-edges of every node (CSR positions of the graph) ordered for one λ_topo: best
    weight first, ties by (target, relation, inverse)."""

    targets: np.ndarray
    relations: np.ndarray
    inverse: np.ndarray
    weight: np.ndarray  # log α + λ·log μ(target)


class EdgeGraph:
    """CSR adjacency of the ``edges`` table plus log μ per node.

    ``indptr[v]:indptr[v+1]`` are the out-edges of node v (inverse edges included); node ids
    are entity ids, ``n_nodes`` = rows of ``node_gain``.
    """

    def __init__(self, s, r, o, inverse, attention, mu):
        s, r, o = (np.asarray(x, dtype=np.int64) for x in (s, r, o))
        inverse = np.asarray(inverse, dtype=bool)
        attention = np.asarray(attention, dtype=np.float64)
        mu = np.asarray(mu, dtype=np.float64)
        if not len(s) == len(r) == len(o) == len(inverse) == len(attention):
            raise ValueError("edges: columns s, r, o, inverse, attention differ in length")
        n = len(mu)
        if not np.all(np.isfinite(mu) & (mu >= 0)):
            raise ValueError("node_gain: mu must be finite and >= 0")
        if len(s):
            for name, col in (("s", s), ("o", o)):
                if col.min() < 0 or col.max() >= n:
                    raise ValueError(f"edges.{name} has ids in [{col.min()}, {col.max()}], "
                                     f"outside the {n} entities of node_gain")
            if not np.all(np.isfinite(attention) & (attention >= 0)):
                bad = int(np.flatnonzero(~(np.isfinite(attention) & (attention >= 0)))[0])
                raise ValueError(f"edges.attention must be finite and >= 0; edge "
                                 f"({s[bad]}, {r[bad]}, {o[bad]}) has {attention[bad]}")
            unreachable = mu[o] <= 0
            if unreachable.any():
                raise ValueError(f"node_gain gives mu = 0 to entity {o[unreachable][0]}, which has "
                                 f"incoming edges: node_gain and edges come from different graphs")
        order = _lex_order(o, inverse, r, s)
        if order is not None:
            o, r, inverse, attention = o[order], r[order], inverse[order], attention[order]
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(s, minlength=n))]).astype(np.int64)
        # int32 ids: half the memory of int64 for the same values (Paths hands out int64)
        self.targets = o.astype(_id_dtype(n))
        self.relations = r.astype(_id_dtype(int(r.max()) + 1 if len(r) else 0))
        self.inverse = inverse
        with np.errstate(divide="ignore"):
            self.log_alpha = np.log(attention)
            self.log_mu = np.log(mu)
        self._views: dict[float, _View] = {}

    @classmethod
    def from_tables(cls, edges: pa.Table, node_gain: pa.Table) -> EdgeGraph:
        """From ``edges`` and ``node_gain`` contract tables (node_gain ids must be 0..N-1)."""
        ids = to_numpy(node_gain.column("id"))
        if not np.array_equal(np.sort(ids), np.arange(len(ids))):
            raise ValueError("node_gain: ids must be the dense entity ids 0..N-1, one row each")
        mu = np.empty(len(ids), dtype=np.float64)
        mu[ids] = to_numpy(node_gain.column("mu"))
        return cls(*(to_numpy(edges.column(c))
                     for c in ("s", "r", "o", "inverse", "attention")), mu)

    @classmethod
    def from_paths(cls, edges_path: str | Path, node_gain_path: str | Path) -> EdgeGraph:
        """From staged (or published) table paths; errors name the path."""
        edges = read_table(Path(edges_path), "edges")
        node_gain = read_table(Path(node_gain_path), "node_gain")
        try:
            return cls.from_tables(edges, node_gain)
        except ValueError as exc:
            raise ValueError(f"{edges_path} / {node_gain_path}: {exc}") from None

    @classmethod
    def from_build(cls, build: Build) -> EdgeGraph:
        """From a published build's ``edges`` and ``node_gain`` tables."""
        return cls.from_paths(build.table_path("edges"), build.table_path("node_gain"))

    @property
    def n_nodes(self) -> int:
        return len(self.indptr) - 1

    @property
    def n_edges(self) -> int:
        return len(self.targets)

    def out_degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    def with_triples(self, s, r, o, n_nodes: int, new_mu: float) -> EdgeGraph:
        """This graph plus the triples (s, r, o) both ways, on ``n_nodes`` nodes (the nodes
        beyond this graph's get μ = ``new_mu``). A new edge has no learned attention: it gets
        an untrained graph's, 1/out-degree of its source counted in the merged graph
        (:func:`uniform_edges`); the edges already here keep theirs."""
        if n_nodes < self.n_nodes:
            raise ValueError(f"n_nodes {n_nodes} < this graph's {self.n_nodes}")
        src, rel, dst, inv = with_inverses(s, r, o)
        old_src = np.repeat(np.arange(self.n_nodes), self.out_degree())
        degree = np.bincount(np.concatenate([old_src, src]), minlength=n_nodes)
        mu = np.concatenate([np.exp(self.log_mu), np.full(n_nodes - self.n_nodes, new_mu)])
        return EdgeGraph(np.concatenate([old_src, src]),
                         np.concatenate([self.relations.astype(np.int64), rel]),
                         np.concatenate([self.targets.astype(np.int64), dst]),
                         np.concatenate([self.inverse, inv]),
                         np.concatenate([np.exp(self.log_alpha), 1.0 / degree[src]]), mu)

    def view(self, lambda_topo: float) -> _View:
        """Out-edges ordered by weight for this λ_topo (computed once per λ, then cached)."""
        lambda_topo = float(lambda_topo)
        if not np.isfinite(lambda_topo):
            raise ValueError(f"lambda_topo must be finite, got {lambda_topo}")
        cached = self._views.get(lambda_topo)
        if cached is None:
            weight = self.log_alpha + lambda_topo * self.log_mu[self.targets]
            source = np.repeat(np.arange(self.n_nodes), self.out_degree())
            order = np.lexsort((self.inverse, self.relations, self.targets, -weight, source))
            cached = self._views[lambda_topo] = _View(self.targets[order], self.relations[order],
                                                      self.inverse[order], weight[order])
        return cached


# ============================================================================================
# scoring and search


def score_path(graph: EdgeGraph, head: int, relations: Sequence[int], inverses: Sequence[bool],
               nodes: Sequence[int], *, lambda_topo: float = 1.0) -> float:
    """S_topo of one path given hop by hop; ValueError if the graph lacks one of its edges."""
    if not len(relations) == len(inverses) == len(nodes):
        raise ValueError("relations, inverses and nodes must have one entry per hop")
    view = graph.view(lambda_topo)
    score, here = 0.0, int(head)
    for rel, inv, there in zip(relations, inverses, nodes):
        lo, hi = graph.indptr[here], graph.indptr[here + 1]
        hit = np.flatnonzero((view.targets[lo:hi] == there) & (view.relations[lo:hi] == rel)
                             & (view.inverse[lo:hi] == bool(inv)))
        if not len(hit):
            raise ValueError(f"no edge {here} -[{rel}{'⁻¹' if inv else ''}]-> {there} in the graph")
        score = score + view.weight[lo + hit[0]]
        here = int(there)
    return float(score)


@dataclass(frozen=True)
class Paths:
    """The top paths of one head, in (first relation, first direction, rank) order. Hop values
    are flat: path i owns ``lengths[i]`` consecutive entries of relations/inverses/nodes."""

    head: int
    rank: np.ndarray  # int32, 0-based within (first relation, first direction)
    score: np.ndarray  # float64, S_topo
    lengths: np.ndarray  # int64, hops per path
    relations: np.ndarray  # int64
    inverses: np.ndarray  # bool
    nodes: np.ndarray  # int64, entities reached (the head excluded)

    def __len__(self) -> int:
        return len(self.rank)

    def to_table(self) -> pa.Table:
        return paths_table([self])


def paths_table(paths: Iterable[Paths]) -> pa.Table:
    """``path_cache`` contract rows of several heads, in the given head order."""
    paths = list(paths)

    def flat(name: str, dtype) -> np.ndarray:
        return np.concatenate([np.zeros(0, dtype)] + [getattr(p, name) for p in paths])

    heads = np.concatenate([np.zeros(0, np.int64)]
                           + [np.full(len(p), p.head, np.int64) for p in paths])
    return _rows_table(heads, flat("rank", np.int32), flat("score", np.float64),
                       flat("lengths", np.int64), flat("relations", np.int64),
                       flat("inverses", bool), flat("nodes", np.int64))


def _rows_table(heads, rank, score, lengths, relations, inverses, nodes) -> pa.Table:
    """``path_cache`` rows from flat columns (hop values path by path, ``lengths`` a path)."""
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    return pa.table({
        "head": heads, "rank": rank, "score": score,
        "relations": pa.ListArray.from_arrays(offsets, pa.array(relations)),
        "inverses": pa.ListArray.from_arrays(offsets, pa.array(inverses)),
        "nodes": pa.ListArray.from_arrays(offsets, pa.array(nodes)),
    }, schema=TABLE_SCHEMAS["path_cache"])


def _rank_in_runs(sorted_keys: np.ndarray) -> np.ndarray:
    """Each element's position within its run of equal keys (the array is sorted)."""
    n = len(sorted_keys)
    starts = np.flatnonzero(np.concatenate([[True], sorted_keys[1:] != sorted_keys[:-1]]))
    return np.arange(n) - np.repeat(starts, np.diff(np.append(starts, n)))


def _cut(group: np.ndarray, score: np.ndarray, limit: int, n_groups: int) -> np.ndarray:
    """Per group: its ``limit``-th best score, or −∞ when it has fewer."""
    order = np.lexsort((-score, group))
    rank = _rank_in_runs(group[order])
    at = order[rank == limit - 1]
    cut = np.full(n_groups, -np.inf)
    cut[group[at]] = score[at]
    return cut


def _best_per_group(group: np.ndarray, score: np.ndarray, limit: int, owner: np.ndarray, *,
                    ties: bool = False) -> np.ndarray:
    """Indices of the ``limit`` best scores of every group (``owner``: its head's position);
    ties at the cut go to the earlier index, or are all kept with ``ties`` (the final ranking
    breaks them by path). The rows of a head none of whose groups exceeds ``limit`` keep their
    order, the other heads' are ordered by (group, −score, index): as if each head were
    searched alone, so that later ties at a cut fall the same way."""
    counts = np.bincount(group, minlength=len(owner))
    if not len(group) or counts.max() <= limit:
        return np.arange(len(group))
    if ties:
        return np.flatnonzero(score >= _cut(group, score, limit, len(owner))[group])
    cut_head = np.zeros(int(owner.max()) + 1, dtype=bool)
    cut_head[owner[counts > limit]] = True
    row_head = owner[group]
    ordered = cut_head[row_head]
    order = np.lexsort((np.where(ordered, -score, 0.0), np.where(ordered, group, 0), row_head))
    rank = _rank_in_runs(group[order])
    return order[~ordered[order] | (rank < limit)]


def _children(indptr: np.ndarray, ends: np.ndarray, skip: np.ndarray, take: np.ndarray):
    """(parent index, CSR position) of out-edges skip..skip+take−1 of every parent's node."""
    parent = np.repeat(np.arange(len(ends)), take)
    pos = np.repeat(indptr[ends] + skip - (np.cumsum(take) - take), take) + np.arange(take.sum())
    return parent, pos


def _fresh(view: _View, beam_head: np.ndarray, beam_pos: np.ndarray, parent: np.ndarray,
           pos: np.ndarray) -> np.ndarray:
    """Mask of the children that reach a node not yet on their parent path (head included)."""
    targets = view.targets[pos]
    fresh = targets != beam_head[parent]
    for j in range(beam_pos.shape[1]):
        fresh &= targets != view.targets[beam_pos[parent, j]]
    return fresh


#: Heads searched together by ``top_paths_table``: fewer numpy calls per head, while larger
#: batches sort larger arrays (on FB15k-237 a few dozen heads did best, in a scratch run under
#: load); bounds the memory too.
HEADS_PER_BATCH = 32


def _validate(graph: EdgeGraph, heads: np.ndarray, max_hops: int, k_top: int,
              beam_width: int) -> None:
    bad = heads[(heads < 0) | (heads >= graph.n_nodes)]
    if len(bad):
        raise ValueError(f"head {bad[0]} is not an entity id of this graph "
                         f"(0..{graph.n_nodes - 1})")
    if max_hops < 1 or k_top < 1 or beam_width < 1:
        raise ValueError(f"max_hops, k_top and beam_width must be >= 1, "
                         f"got {max_hops}, {k_top}, {beam_width}")


def top_paths(graph: EdgeGraph, head: int, *, max_hops: int = 3, k_top: int = 20,
              beam_width: int = 64, lambda_topo: float = 1.0) -> Paths:
    """The ``k_top`` best simple paths of 1..``max_hops`` hops from ``head`` per group (first
    relation, first direction), by S_topo; ties by node ids, then relations, then directions.

    Beam search: every partial path is a candidate; at each hop but the last, only the
    ``beam_width`` best partial paths of a group are kept for extension (ties: the order they
    were generated in). The last hop keeps what can still enter a group's top ``k_top``. A
    parent is first extended along its best out-edges only (enough to fill the beam even if one
    edge leads back to each node already on the path) and along all of them when that falls
    short — a child behind that many of its siblings can never enter the group's cut, so this
    loses nothing. With ``beam_width`` at least the number of partial paths of a group and
    hop, the result is exactly the top ``k_top`` of all simple paths.
    """
    heads = np.array([head], np.int64)
    _validate(graph, heads, max_hops, k_top, beam_width)
    rows = _search(graph.view(lambda_topo), graph.indptr, heads, max_hops, k_top, beam_width)
    return Paths(int(head), *rows[1:])


def top_paths_table(graph: EdgeGraph, heads, *, max_hops: int = 3, k_top: int = 20,
                    beam_width: int = 64, lambda_topo: float = 1.0) -> pa.Table:
    """The ``path_cache`` rows of ``top_paths`` of every head, in the given head order (the
    rows of ``paths_table(top_paths(graph, h) for h in heads)``), searched
    ``HEADS_PER_BATCH`` heads at a time."""
    heads = np.asarray(heads, np.int64).reshape(-1)
    _validate(graph, heads, max_hops, k_top, beam_width)
    view = graph.view(lambda_topo)
    return pa.concat_tables([
        _rows_table(*_search(view, graph.indptr, heads[i:i + HEADS_PER_BATCH], max_hops, k_top,
                             beam_width))
        for i in range(0, max(len(heads), 1), HEADS_PER_BATCH)])


def _search(view: _View, indptr: np.ndarray, heads: np.ndarray, max_hops: int, k_top: int,
            beam_width: int) -> tuple:
    """The beam search of ``top_paths`` for several heads at once: a group is (head's position,
    first relation, first direction), ``owner`` maps it to the position. Returns the flat
    columns of ``_rows_table``, head by head in the given order."""

    def limit(hop: int) -> int:  # paths kept per group at ``hop`` hops: the last is not extended
        return k_top if hop == max_hops else beam_width

    degree = indptr[heads + 1] - indptr[heads]
    at, pos = _children(indptr, heads, np.zeros_like(degree), degree)
    fresh = view.targets[pos] != heads[at]
    at, pos = at[fresh], pos[fresh]
    stride = 2 * (int(view.relations.max(initial=0)) + 1)
    labels, group = np.unique(at * stride + view.relations[pos] * 2 + view.inverse[pos],
                              return_inverse=True)
    owner = labels // stride
    score = view.weight[pos]
    keep = _best_per_group(group, score, limit(1), owner, ties=max_hops == 1)
    beam = group[keep], score[keep], pos[keep][:, None]
    found = [beam]
    for hop in range(2, max_hops + 1):
        if not len(beam[0]):
            break
        wanted = limit(hop)
        extend = _last_hop if hop == max_hops else _extend
        parent, pos, group, score = extend(view, indptr, heads, owner, beam, wanted, hop)
        keep = _best_per_group(group, score, wanted, owner, ties=hop == max_hops)
        beam = group[keep], score[keep], np.column_stack([beam[2][parent[keep]], pos[keep]])
        found.append(beam)
    return _rank(view, heads, owner, found, max_hops, k_top)


def _extend(view: _View, indptr: np.ndarray, heads: np.ndarray, owner: np.ndarray, beam: tuple,
            wanted: int, hop: int) -> tuple:
    """(parent, pos, group, score) of the beam's fresh children that can still enter their
    group's top ``wanted``: each parent's best ``wanted + hop`` out-edges first, all of them
    only where that leaves fewer than ``wanted`` fresh children."""
    beam_group, beam_score, beam_pos = beam
    beam_head = heads[owner[beam_group]]
    ends = view.targets[beam_pos[:, -1]]
    degree = indptr[ends + 1] - indptr[ends]
    first = np.minimum(degree, wanted + hop)  # hop = nodes on the parent path
    parent, pos = _children(indptr, ends, np.zeros_like(first), first)
    fresh = _fresh(view, beam_head, beam_pos, parent, pos)
    short = (first < degree) & (np.bincount(parent[fresh], minlength=len(ends)) < wanted)
    if short.any():
        rest = np.where(short, degree - first, 0)
        more_parent, more_pos = _children(indptr, ends, first, rest)
        more_fresh = _fresh(view, beam_head, beam_pos, more_parent, more_pos)
        parent = np.concatenate([parent, more_parent])
        pos = np.concatenate([pos, more_pos])
        fresh = np.concatenate([fresh, more_fresh])
    group, score = beam_group[parent], beam_score[parent] + view.weight[pos]
    # The wanted-th best score of a group among its parents' first two out-edges bounds the
    # group's cut from below: where a head has over 4 children per such sample, its children
    # scoring under it are dropped before sorting.
    sample = fresh & (pos - indptr[ends][parent] < 2)
    child_head = owner[group]
    pruned = (np.bincount(child_head, minlength=len(heads))
              > 4 * np.bincount(child_head[sample], minlength=len(heads)))
    if pruned.any():
        cut = _cut(group[sample], score[sample], wanted, len(owner))
        fresh &= ~pruned[child_head] | (score >= cut[group])
    return parent[fresh], pos[fresh], group[fresh], score[fresh]


#: Parents per group whose first ``k_top`` children join the sample that bounds a group's
#: last-hop cut (``_last_hop``): the best parents hold most of the top paths.
SAMPLED_PARENTS = 4


def _last_hop(view: _View, indptr: np.ndarray, heads: np.ndarray, owner: np.ndarray,
              beam: tuple, k_top: int, hop: int) -> tuple:
    """``_extend``'s last-hop children less those scoring under a lower bound of their group's
    cut — the ``k_top``-th best of a sample (every parent's first two children, the best
    ``SAMPLED_PARENTS`` parents' first ``k_top``) — without generating them: out-edges come
    best weight first, so a parent's passing children are a run, found by bisection. The
    last hop's ranking keeps all children at its cut, so this drops none it keeps."""
    beam_group, beam_score, beam_pos = beam
    beam_head = heads[owner[beam_group]]
    ends = view.targets[beam_pos[:, -1]]
    start, degree = indptr[ends], indptr[ends + 1] - indptr[ends]
    first = np.minimum(degree, k_top + hop)  # as _extend: hop = nodes on the parent path
    take = np.minimum(first, 2)
    best = _best_per_group(beam_group, beam_score, SAMPLED_PARENTS, owner)
    take[best] = np.minimum(first[best], k_top)
    parent, pos = _children(indptr, ends, np.zeros_like(take), take)
    fresh = _fresh(view, beam_head, beam_pos, parent, pos)
    score = beam_score[parent] + view.weight[pos]
    cut = _cut(beam_group[parent[fresh]], score[fresh], k_top, len(owner))[beam_group]
    end = _passing_end(view.weight, start, beam_score, cut, np.zeros_like(first), first)
    parent, pos = _children(indptr, ends, np.zeros_like(end), end)
    fresh = _fresh(view, beam_head, beam_pos, parent, pos)
    # _extend's refill: a parent with fewer than k_top fresh children among its first ones is
    # extended along all its out-edges — matters only where the next one passes the bound
    beyond = np.minimum(first, degree - 1)
    short = ((end == first) & (first < degree)
             & (beam_score + view.weight[start + beyond] >= cut)
             & (np.bincount(parent[fresh], minlength=len(ends)) < k_top))
    if short.any():
        more = _passing_end(view.weight, start, beam_score, cut, first,
                            np.where(short, degree, first)) - first
        more_parent, more_pos = _children(indptr, ends, first, more)
        parent = np.concatenate([parent, more_parent])
        pos = np.concatenate([pos, more_pos])
        fresh = np.concatenate([fresh, _fresh(view, beam_head, beam_pos, more_parent, more_pos)])
    parent, pos = parent[fresh], pos[fresh]
    return parent, pos, beam_group[parent], beam_score[parent] + view.weight[pos]


def _passing_end(weight: np.ndarray, start: np.ndarray, base: np.ndarray, cut: np.ndarray,
                 lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per parent, the end of its run of out-edges lo.. (before hi) whose child score
    ``base + weight`` reaches ``cut``: scores fall along a node's out-edges, so bisect."""
    lo, hi = lo.copy(), hi.copy()
    active = lo < hi
    while active.any():
        mid = (lo + hi) // 2
        at = np.minimum(start + mid, len(weight) - 1)
        passes = base + weight[at] >= cut
        lo = np.where(active & passes, mid + 1, lo)
        hi = np.where(active & ~passes, mid, hi)
        active = lo < hi
    return lo


def _rank(view: _View, heads: np.ndarray, owner: np.ndarray, found: list, max_hops: int,
          k_top: int) -> tuple:
    """Order all candidates by (group, −score, nodes, relations, inverses); keep k_top a group.
    Returns (head, rank, score, lengths, relations, inverses, nodes), flat."""
    group = np.concatenate([f[0] for f in found])
    score = np.concatenate([f[1] for f in found])
    pos = np.full((len(group), max_hops), -1, dtype=np.int64)
    row = 0
    for _, _, p in found:
        pos[row:row + len(p), :p.shape[1]] = p
        row += len(p)
    pad = pos < 0
    nodes = np.where(pad, -1, view.targets[pos])
    relations = np.where(pad, -1, view.relations[pos])
    inverses = np.where(pad, 0, view.inverse[pos])
    keys = [inverses[:, j] for j in reversed(range(max_hops))]
    keys += [relations[:, j] for j in reversed(range(max_hops))]
    keys += [nodes[:, j] for j in reversed(range(max_hops))]
    order = np.lexsort(keys + [-score, group])
    rank = _rank_in_runs(group[order])
    order, rank = order[rank < k_top], rank[rank < k_top]
    hop_pos = pos[order]
    taken = hop_pos >= 0
    flat = hop_pos[taken]  # row-major: path by path, hop by hop
    return (heads[owner[group[order]]], rank.astype(np.int32), score[order],
            taken.sum(axis=1).astype(np.int64), view.relations[flat].astype(np.int64),
            view.inverse[flat], view.targets[flat].astype(np.int64))

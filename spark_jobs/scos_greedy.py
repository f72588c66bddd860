"""The greedy SCOS merge over in-memory relation statistics (driver: plain Python + numpy).

* Fused similarity of clusters C_i, C_j:
  sim = w1·NMI + w2·Jaccard + w3·cos(e_i, e_j), weights ``scos_merge.weights`` (0.40, 0.30, 0.30);
  NMI = 1 − JSD_bits of the type-pair distributions, Jaccard of the entity sets.
* Adaptive threshold θ_ij = min(θ_base·(1 + ε·δ_ij), 1), δ_ij = |H_i − H_j| / max(H_i, H_j),
  δ = 0 when both entropies are 0.
* Greedy: a heap of admissible pairs (sim ≥ θ) keyed by −sim, ties by cluster ids. Pop the best;
  an entry is stale — and skipped — when either cluster has died or changed version since the
  entry was pushed (lazy invalidation). A merge keeps the lower cluster id, bumps its version,
  kills the other; the merged cluster's H and its NMI and Jaccard with every cluster that was a
  candidate partner of either member are measured anew (``measure``: relation_stats' rules over
  the union of its members' triples), its embedding is the mean of the two; admissible pairs
  are pushed. Stop when the heap is empty.
* loss = (1 − sim)·min(H(C_i), H(C_j)); L_info = Σ loss / Σ_{r ∈ R0} H(r) (0 when that sum is 0);
  ρ̂ = (1 − L_info) / (|R*| / |R0|), ρ̂ ≡ 1 when nothing merges.
* Canonical name of a cluster: its member with the most triples, ties by name. Canonical ids are
  dense, in order of each cluster's smallest original id (so the identity when nothing merges).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa



class Measure(Protocol):
    """The signals of clusters (``relation_stats.ClusterSignals`` on the build's engine)."""

    def merge(self, cluster: int, gone: int, members: list[int]) -> float:
        """Cluster ``cluster`` now holds ``members`` (``gone`` ends); its H."""

    def pairs(self, pairs: list[tuple[int, int]]) -> Mapping[tuple[int, int], tuple[float, float]]:
        """(NMI, Jaccard) of each pair of clusters."""

NORMALISER = "sum of H(r) over R0 (tail conditional entropy, nats)"


def delta(h_i: float, h_j: float) -> float:
    """Entropy gap δ_ij = |H_i − H_j| / max(H_i, H_j); 0 when both are 0."""
    top = max(h_i, h_j)
    return 0.0 if top <= 0 else abs(h_i - h_j) / top


def theta(h_i: float, h_j: float, theta_base: float = 0.75, epsilon: float = 0.15) -> float:
    return min(theta_base * (1.0 + epsilon * delta(h_i, h_j)), 1.0)


def cosine(a: np.ndarray | None, b: np.ndarray | None) -> float:
    if a is None or b is None:
        return 0.0
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def canonical_member(members: Iterable[int], names: Mapping[int, str],
                     triple_counts: Mapping[int, int]) -> int:
    """The member with the most triples; ties by name, then by id."""
    return min(members, key=lambda r: (-triple_counts.get(r, 0), names[r], r))


@dataclass
class Cluster:
    members: list[int]
    entropy: float
    emb: np.ndarray | None
    version: int = 0
    alive: bool = True
    partners: set = field(default_factory=set)


@dataclass
class MergeResult:
    clusters: dict[int, list[int]]  # surviving cluster id → member relation ids
    log: list[dict]
    total_loss: float
    stale_skipped: int
    pushed: int


class Merger:
    """Greedy SCOS over in-memory statistics.

    ``entropy`` gives each relation's H (the relation_stats table's); ``measure`` the signals
    of clusters (``Measure``), called only for a pair given without its signals and after a
    merge, so the stage reads triples only when a merge actually happens.
    """

    def __init__(self, names: Mapping[int, str], triple_counts: Mapping[int, int],
                 entropy: Mapping[int, float], measure: Measure, emb: np.ndarray | None,
                 weights=(0.40, 0.30, 0.30), theta_base: float = 0.75, epsilon: float = 0.15,
                 previous_groups: Mapping[int, int] | None = None, margin: float = 0.0):
        self.names, self.triple_counts = dict(names), dict(triple_counts)
        self.previous_groups, self.margin = dict(previous_groups or {}), float(margin)
        self.measure = measure
        self.w = tuple(float(x) for x in weights)
        self.theta_base, self.epsilon = float(theta_base), float(epsilon)
        self.emb = emb
        self.clusters: dict[int, Cluster] = {}
        for r in names:
            vec = None if emb is None else np.asarray(emb[r], dtype=np.float64)
            self.clusters[r] = Cluster([r], float(entropy.get(r, 0.0)), vec)
        self.heap: list = []
        self._seq = 0
        self.pushed = 0

    # -- cluster statistics ------------------------------------------------------------------
    def signals(self, a: int, b: int, nmi: float | None = None,
                jaccard: float | None = None) -> dict:
        """The fused similarity of clusters a, b and its terms; NMI and Jaccard measured
        (``measure``) unless given."""
        ca, cb = self.clusters[a], self.clusters[b]
        if nmi is None or jaccard is None:
            nmi, jaccard = self.measure.pairs([(a, b)])[(a, b)]
        cos = cosine(ca.emb, cb.emb)
        sim = self.w[0] * nmi + self.w[1] * jaccard + self.w[2] * cos
        th = min(self.theta_base * (1.0 + self.epsilon * delta(ca.entropy, cb.entropy)), 1.0)
        return {"sim": sim, "nmi": nmi, "jaccard": jaccard, "cos": cos, "theta": th}

    def held_together(self, a: int, b: int) -> bool:
        """Whether one merge group of the previous build held every member of clusters a, b."""
        groups = {self.previous_groups.get(r)
                  for r in self.clusters[a].members + self.clusters[b].members}
        return len(groups) == 1 and None not in groups

    def admits(self, a: int, b: int, sig: dict) -> bool:
        """sim ≥ θ; for two clusters the previous build merged, sim ≥ θ − margin (a refresh's
        hysteresis: a small edit's noise in the data signals does not undo a merge)."""
        margin = self.margin if self.held_together(a, b) else 0.0
        return sig["sim"] >= sig["theta"] - margin

    def _push(self, a: int, b: int, sig: dict) -> None:
        if a > b:
            a, b = b, a
        if self.admits(a, b, sig):
            self._seq += 1
            self.pushed += 1
            heapq.heappush(self.heap, (-sig["sim"], a, b, self.clusters[a].version,
                                       self.clusters[b].version, self._seq, sig))

    def add_candidate(self, a: int, b: int, nmi: float | None = None,
                      jaccard: float | None = None) -> None:
        if a == b or a not in self.clusters or b not in self.clusters:
            return
        self.clusters[a].partners.add(b)
        self.clusters[b].partners.add(a)
        self._push(a, b, self.signals(a, b, nmi, jaccard))

    def name(self, cid: int) -> str:
        return self.names[canonical_member(self.clusters[cid].members, self.names, self.triple_counts)]

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> MergeResult:
        log: list[dict] = []
        total_loss = 0.0
        stale = 0
        while self.heap:
            _, a, b, va, vb, _, sig = heapq.heappop(self.heap)
            ca, cb = self.clusters[a], self.clusters[b]
            if not (ca.alive and cb.alive and ca.version == va and cb.version == vb):
                stale += 1
                continue
            loss = (1.0 - sig["sim"]) * min(ca.entropy, cb.entropy)
            total_loss += loss
            left, right = self.name(a), self.name(b)
            self._merge(a, b)
            ca.entropy = float(self.measure.merge(a, b, ca.members))
            log.append({"step": len(log) + 1, "left": left, "right": right, **sig, "loss": loss,
                        "members": sorted(self.names[r] for r in ca.members)})
            self._remeasure(a)
        clusters = {cid: sorted(c.members) for cid, c in self.clusters.items() if c.alive}
        return MergeResult(clusters, log, total_loss, stale, self.pushed)

    def _merge(self, a: int, b: int) -> None:
        ca, cb = self.clusters[a], self.clusters[b]
        ca.members = ca.members + cb.members
        if ca.emb is not None and cb.emb is not None:
            ca.emb = (ca.emb + cb.emb) / 2.0
        ca.version += 1
        cb.alive = False
        partners = (ca.partners | cb.partners) - {a, b}
        for d in cb.partners:
            self.clusters[d].partners.discard(b)
        for d in partners:
            self.clusters[d].partners.add(a)
        ca.partners, cb.partners = partners, set()

    def _remeasure(self, a: int) -> None:
        """The merged cluster a's signals with each partner measured, admissible pairs pushed."""
        partners = sorted(self.clusters[a].partners)
        measured = self.measure.pairs([(a, d) for d in partners]) if partners else {}
        for d in partners:
            self._push(a, d, self.signals(a, d, *measured[(a, d)]))


def summary(r0: int, r_star: int, total_loss: float, normaliser: float) -> dict:
    l_info = total_loss / normaliser if normaliser > 0 else 0.0
    rho = 1.0 if r_star == r0 else (1.0 - l_info) / (r_star / r0)
    return {"R0": r0, "R_star": r_star, "L_info": l_info, "rho_hat": rho,
            "normaliser": {"definition": NORMALISER, "value": normaliser}}


def canonical_mapping(relations: pa.Table, clusters: Mapping[int, list[int]],
                      triple_counts: Mapping[int, int]) -> pa.Table:
    """relation_map rows for every relation of R0; relations outside ``clusters`` map to themselves."""
    ids = relations.column("id").to_pylist()
    names = dict(zip(ids, relations.column("name").to_pylist()))
    owner = {r: r for r in ids}
    for members in clusters.values():
        for r in members:
            owner[r] = min(members)
    groups: dict[int, list[int]] = {}
    for r in ids:
        groups.setdefault(owner[r], []).append(r)
    canon_id, canon_name = {}, {}
    for new_id, root in enumerate(sorted(groups)):
        members = groups[root]
        best = canonical_member(members, names, triple_counts)
        for r in members:
            canon_id[r], canon_name[r] = new_id, names[best]
    return pa.table({
        "id": ids,
        "name": [names[r] for r in ids],
        "canonical_id": [canon_id[r] for r in ids],
        "canonical_name": [canon_name[r] for r in ids],
    })


def add_candidates(merger: Merger, pairs: pa.Table, held: Mapping[int, int]) -> None:
    """The heap's first entries: relation_stats' candidate pairs, and in a refresh every pair
    of one previous merge group that relation_stats no longer proposes (its signals computed
    here), so a previous merge is judged by its score, not by the candidate rules."""
    r_i, r_j = pairs.column("r_i").to_pylist(), pairs.column("r_j").to_pylist()
    for a, b, nmi, jac in zip(r_i, r_j, pairs.column("nmi").to_pylist(),
                              pairs.column("jaccard").to_pylist()):
        merger.add_candidate(a, b, nmi, jac)
    proposed = {(min(a, b), max(a, b)) for a, b in zip(r_i, r_j)}
    members = sorted(held)
    for k, a in enumerate(members):
        for b in members[k + 1:]:
            if held[a] == held[b] and (a, b) not in proposed:
                merger.add_candidate(a, b)


def margin_outcome(result: MergeResult, rmap: pa.Table, held: Mapping[int, int]) -> dict:
    """The merges only the margin admitted (sim < θ), and how many previous groups this build
    merged exactly again (over the relations it still has)."""
    kept = [[m["left"], m["right"], round(m["sim"], 4), round(m["theta"], 4)]
            for m in result.log if m["sim"] < m["theta"]]
    now = dict(zip(rmap.column("id").to_pylist(), rmap.column("canonical_id").to_pylist()))
    before, after = {}, {}
    for r, g in held.items():
        before.setdefault(g, set()).add(r)
    for r, c in now.items():
        after.setdefault(c, set()).add(r)
    same = sum(1 for g in before.values() if after[now[next(iter(g))]] == g)
    return {"kept_by_margin": kept, "previous_groups_merged_again": same}


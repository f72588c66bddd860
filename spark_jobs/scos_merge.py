"""Stage ``scos_merge`` (DESIGN §2.5): Semantic Compression of Ontology Schema.

The greedy merge runs on the driver (plain Python + numpy); so does the triple rewrite up to
``scos_merge.driver_max_triples`` triples (numpy: no Spark session), above it in Spark.

* Fused similarity of clusters C_i, C_j:
  sim = w1·NMI + w2·Jaccard + w3·cos(e_i, e_j), weights ``scos_merge.weights`` (0.40, 0.30, 0.30);
  NMI = 1 − JSD_bits of the type-pair distributions, Jaccard of the entity sets.
* Adaptive threshold θ_ij = min(θ_base·(1 + ε·δ_ij), 1), δ_ij = |H_i − H_j| / max(H_i, H_j),
  δ = 0 when both entropies are 0.
* Greedy: a heap of admissible pairs (sim ≥ θ) keyed by −sim, ties by cluster ids. Pop the best;
  an entry is stale — and skipped — when either cluster has died or changed version since the
  entry was pushed (lazy invalidation). A merge keeps the lower cluster id, bumps its version,
  kills the other; the merged cluster owns the union of the distinct (s, o) pairs, and its H,
  type-pair distribution and entity set are recomputed from that union; its embedding is the
  mean of the two. Its similarity to every cluster that was a candidate partner of either member
  is recomputed, and admissible pairs are pushed. Stop when the heap is empty.
* loss = (1 − sim)·min(H(C_i), H(C_j)); L_info = Σ loss / Σ_{r ∈ R0} H(r) (0 when that sum is 0);
  ρ̂ = (1 − L_info) / (|R*| / |R0|), ρ̂ ≡ 1 when nothing merges.
* Refresh (``previous:`` inputs, pipeline/refresh.py): a warm-started TransE moves relation
  vectors by noise the data did not ask for (FB15k-237, 1 % edit: a triple-weighted mean cosine
  distance of 0.17 from the previous build's; a cold retrain on the same edit: 0.88), enough to
  flip a merge whose sim sits near θ. While that shift is at most
  ``scos_merge.refresh_max_vector_shift``, the cosine term uses the previous build's vectors
  (by relation name; every relation must have one), so the merges follow the data signals
  only. Those move too: a 1 % edit of FB15k-237 moves the NMI, Jaccard and H of relations
  with few triples across θ. So a refresh also decides with hysteresis: two clusters that one
  merge group of the previous build held (relations by name) merge while sim ≥ θ −
  ``scos_merge.refresh_merge_margin``, and every pair of such a group is a candidate even when
  relation_stats no longer proposes it; any other pair still needs sim ≥ θ (so on the same
  signals the refresh differs from a decision without memory only by the previous merges the
  margin kept — the report lists them, ``refresh.kept_by_margin``). A pair fallen further
  splits; a full build has no previous merges.
* Canonical name of a cluster: its member with the most triples, ties by name. Canonical ids are
  dense, in order of each cluster's smallest original id (so the identity when nothing merges).

Outputs: ``relation_map`` (every relation of R0), ``merge_log``, rewritten ``triples`` (φ
applied to r, then distinct; from the driver one file in (s, r, o) order) and ``relations``
(canonical relations). When nothing merges, or with ``scos_merge.enabled = false``, ``triples``
and ``relations`` are the input tables, untouched. The report's ``rewrite`` says which path.

Memory: the driver holds the distinct (s, o) pairs of every relation that appears in a
candidate pair (as int64 keys s·M + o) plus one entity → type-set index: ~16 bytes per triple
and ~8 bytes per entity, i.e. fine for FB15k-237 and for dumps up to ~10⁸ triples on a 4 GB
driver; beyond that the merge loop needs a distributed union (not built). The driver rewrite
holds every triple three times over as int64 (~100 bytes per triple at its peak, the sort of
``np.unique``): 10⁷ triples ≈ 1 GB.
"""

from __future__ import annotations

import heapq
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from lokg.pipeline.stage import Laps, StageError, previous_inputs
from lokg.runtime.contract import (TABLE_SCHEMAS, StoreError, read_table, table_files, to_numpy,
                              write_table)
from lokg.spark_jobs.relation_stats import (
    TypeIndex,
    nmi_signal,
    tail_entropy,
    type_pair_dict,
)
from lokg.spark_jobs.relation_stats import (
    settings as stats_settings,
)
from lokg.spark_jobs.settings import ScosMergeSettings

NORMALISER = "sum of H(r) over R0 (tail conditional entropy, nats)"


def settings(config: Mapping) -> ScosMergeSettings:
    return ScosMergeSettings.of(config, StageError)


# ============================================================================================
# the greedy merge (driver)


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
    dist: dict
    emb: np.ndarray | None
    keys: np.ndarray | None = None  # sorted distinct s·M + o; loaded lazily
    ents: np.ndarray | None = None  # sorted entity ids; computed lazily
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

    ``keys_of(r)`` returns relation r's sorted distinct (s, o) keys (s·modulus + o); it is only
    called for relations whose cluster takes part in a merge or neighbours a merged cluster.
    ``modulus`` is an int or a callable returning one (resolved on first use), and ``types`` a
    TypeIndex or a callable building one, so the stage loads triples and entity types only when
    a merge actually happens.
    ``stats`` gives each relation's initial (H, type-pair dict) — from the relation_stats table in
    the stage, or recomputed with ``initial_stats`` in tests.
    """

    def __init__(self, names: Mapping[int, str], triple_counts: Mapping[int, int],
                 stats: Mapping[int, tuple[float, dict]], keys_of, modulus,
                 types: TypeIndex | None, emb: np.ndarray | None,
                 weights=(0.40, 0.30, 0.30), theta_base: float = 0.75, epsilon: float = 0.15,
                 previous_groups: Mapping[int, int] | None = None, margin: float = 0.0):
        self.names, self.triple_counts = dict(names), dict(triple_counts)
        self.previous_groups, self.margin = dict(previous_groups or {}), float(margin)
        self.keys_of, self._modulus = keys_of, modulus
        self._types = types
        self.w = tuple(float(x) for x in weights)
        self.theta_base, self.epsilon = float(theta_base), float(epsilon)
        self.emb = emb
        self.clusters: dict[int, Cluster] = {}
        for r in names:
            h, dist = stats.get(r, (0.0, {}))
            vec = None if emb is None else np.asarray(emb[r], dtype=np.float64)
            self.clusters[r] = Cluster([r], float(h), dict(dist), vec)
        self.heap: list = []
        self._seq = 0
        self.pushed = 0

    # -- cluster statistics ------------------------------------------------------------------
    @property
    def modulus(self) -> int:
        """Key base M (keys are s·M + o); a callable is resolved on first use (lazy loading)."""
        if callable(self._modulus):
            self._modulus = self._modulus()
        return int(self._modulus)

    @property
    def types(self) -> TypeIndex:
        if self._types is None:
            raise StoreError("scos_merge: entity types needed to recompute a merged cluster")
        if callable(self._types) and not isinstance(self._types, TypeIndex):
            self._types = self._types()
        return self._types

    def _keys(self, c: Cluster) -> np.ndarray:
        if c.keys is None:
            c.keys = np.asarray(self.keys_of(c.members[0]), dtype=np.int64)
        return c.keys

    def _ents(self, c: Cluster) -> np.ndarray:
        if c.ents is None:
            keys = self._keys(c)
            c.ents = np.union1d(keys // self.modulus, keys % self.modulus)
        return c.ents

    def signals(self, a: int, b: int, nmi: float | None = None,
                jaccard: float | None = None) -> dict:
        ca, cb = self.clusters[a], self.clusters[b]
        if nmi is None:
            nmi = nmi_signal(ca.dist, cb.dist)
        if jaccard is None:
            ea, eb = self._ents(ca), self._ents(cb)
            inter = len(np.intersect1d(ea, eb, assume_unique=True))
            union = len(ea) + len(eb) - inter
            jaccard = inter / union if union else 0.0
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
            log.append({"step": len(log) + 1, "left": left, "right": right, **sig, "loss": loss,
                        "members": sorted(self.names[r] for r in ca.members)})
            for d in sorted(ca.partners):
                self._push(a, d, self.signals(a, d))
        clusters = {cid: sorted(c.members) for cid, c in self.clusters.items() if c.alive}
        return MergeResult(clusters, log, total_loss, stale, self.pushed)

    def _merge(self, a: int, b: int) -> None:
        ca, cb = self.clusters[a], self.clusters[b]
        keys = np.union1d(self._keys(ca), self._keys(cb))
        s, o = keys // self.modulus, keys % self.modulus
        ca.members = ca.members + cb.members
        ca.keys, ca.ents = keys, None
        ca.entropy = tail_entropy(o)
        ca.dist = self.types.distribution(s, o)
        if ca.emb is not None and cb.emb is not None:
            ca.emb = (ca.emb + cb.emb) / 2.0
        ca.version += 1
        cb.alive, cb.keys, cb.ents = False, None, None
        partners = (ca.partners | cb.partners) - {a, b}
        for d in cb.partners:
            self.clusters[d].partners.discard(b)
        for d in partners:
            self.clusters[d].partners.add(a)
        ca.partners, cb.partners = partners, set()


def initial_stats(keys_by_r: Mapping[int, np.ndarray], modulus: int,
                  types: TypeIndex) -> dict[int, tuple[float, dict]]:
    """(H, type-pair distribution) of each relation from its keys (driver-side, for tests)."""
    out = {}
    for r, keys in keys_by_r.items():
        keys = np.asarray(keys, dtype=np.int64)
        s, o = keys // modulus, keys % modulus
        out[r] = (tail_entropy(o), types.distribution(s, o))
    return out


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


# ============================================================================================
# the stage


def _read_pairs(path: str) -> pa.Table:
    files = table_files(Path(path))
    if not files:
        return TABLE_SCHEMAS["relation_pairs"].empty_table()
    return read_table(Path(path), "relation_pairs")


def _load_keys(triples_path: str, relation_ids: np.ndarray):
    """Distinct (s, o) keys per relation, for the given relations only. Returns (dict, modulus)."""
    if not len(relation_ids):
        return {}, 1
    files = [str(f) for f in table_files(Path(triples_path))]
    dataset = ds.dataset(files, format="parquet")
    table = dataset.to_table(columns=["s", "r", "o"],
                             filter=ds.field("r").isin(pa.array(relation_ids, pa.int64())))
    # keys need only be injective over the loaded triples: modulus > every loaded entity id
    s_max = pc.max(table.column("s")).as_py() if table.num_rows else 0
    o_max = pc.max(table.column("o")).as_py() if table.num_rows else 0
    modulus = int(max(s_max, o_max)) + 1
    r = table.column("r").to_numpy()
    keys = table.column("s").to_numpy().astype(np.int64) * modulus + table.column("o").to_numpy()
    order = np.lexsort((keys, r))
    r, keys = r[order], keys[order]
    bounds = np.flatnonzero(np.diff(r)) + 1
    out = {}
    for chunk_r, chunk in zip(np.split(r, bounds), np.split(keys, bounds)):
        if len(chunk_r):
            out[int(chunk_r[0])] = np.unique(chunk)
    return out, modulus


def _write_identity(relations: pa.Table, out: Path, inputs: Mapping, report: dict,
                    seconds: dict) -> dict:
    ids = relations.column("id")
    names = relations.column("name")
    write_table("relation_map", pa.table({"id": ids, "name": names, "canonical_id": ids,
                                          "canonical_name": names}), out / "relation_map.parquet")
    write_table("merge_log", TABLE_SCHEMAS["merge_log"].empty_table(), out / "merge_log.parquet")
    report["step_seconds"] = seconds
    return {"outputs": {"relation_map": str(out / "relation_map.parquet"),
                        "merge_log": str(out / "merge_log.parquet"),
                        "triples": str(inputs["triples"]),
                        "relations": str(inputs["relations"])},
            "report": report}


def _require(inputs: Mapping[str, str], names: Iterable[str]) -> None:
    for name in names:
        if name not in inputs:
            raise StoreError(f"scos_merge: input '{name}' missing (have {sorted(inputs)})")


def _relation_embeddings(cfg: Mapping, emb_path: str | None, top_id: int | None,
                         report: dict) -> tuple[np.ndarray | None, list[float]]:
    """TransE relation vectors and the fused weights; without vectors the cosine term is 0 (or
    its weight renormalised onto NMI/Jaccard), which the report warns about."""
    weights = [float(w) for w in cfg["weights"]]
    if emb_path and Path(emb_path).is_file():
        emb = np.load(emb_path)
        if emb.ndim != 2 or (top_id is not None and emb.shape[0] <= top_id):
            raise StoreError(f"{emb_path}: relation embeddings of shape {emb.shape} do not cover "
                             f"relation ids up to {top_id}")
        report["cosine"] = f"TransE relation embeddings {emb_path} {list(emb.shape)}"
        return emb, weights
    if cfg["missing_embeddings"] == "renormalise" and weights[0] + weights[1] > 0:
        scale = sum(weights) / (weights[0] + weights[1])
        weights = [weights[0] * scale, weights[1] * scale, 0.0]
        msg = (f"NO relation_embeddings: cosine term dropped, NMI/Jaccard weights renormalised "
               f"to {weights[0]:.3f}/{weights[1]:.3f}")
    else:
        msg = (f"NO relation_embeddings: cosine term is 0, so sim <= {weights[0] + weights[1]:.2f}"
               f" (theta_base {cfg['theta_base']}); merges are "
               + ("IMPOSSIBLE" if weights[0] + weights[1] < cfg["theta_base"] else "rarer"))
    report["cosine"] = "absent (0)"
    report["warnings"].append(msg)
    print(f"WARNING scos_merge: {msg}", file=sys.stderr)
    return None, weights


def refresh_vectors(cfg: Mapping, inputs: Mapping[str, str], relations: pa.Table,
                    stats: pa.Table, emb: np.ndarray | None) -> tuple[np.ndarray | None, dict]:
    """The vectors of the cosine term, and the report's ``refresh``: in a refresh whose warm
    TransE moved the relation vectors less than ``refresh_max_vector_shift`` from the previous
    build's (the triple-weighted mean cosine distance, relations matched by name), the previous
    build's vectors — the warm start's drift then flips no merge, and only the data signals
    (NMI, Jaccard, H: recomputed) can; else this build's."""
    previous = previous_inputs(inputs, "relation_embeddings", "relation_map")
    if previous is None or emb is None:
        return emb, {"mode": "full", "reason": "no previous build or no relation vectors"}
    then = np.load(previous["relation_embeddings"])
    before = read_table(previous["relation_map"], columns=["id", "name"])
    where = dict(zip(before.column("name").to_pylist(), before.column("id").to_pylist()))
    ids, names = relations.column("id").to_pylist(), relations.column("name").to_pylist()
    new = [n for n in names if n not in where]
    if new or then.shape[1] != emb.shape[1]:
        return emb, {"mode": "full", "reason": f"{len(new)} relations new, vector sizes "
                     f"{then.shape[1]} / {emb.shape[1]}"}
    kept = emb.copy()
    kept[ids] = then[[where[n] for n in names]]
    counts = dict(zip(stats.column("r").to_pylist(), stats.column("triples").to_pylist()))
    weight = np.array([counts.get(r, 0) for r in ids], np.float64) + 1e-12
    a, b = emb[ids].astype(np.float64), kept[ids].astype(np.float64)
    norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    shift = float(np.sum(weight * (1 - np.sum(a * b, axis=1) / norms)) / weight.sum())
    tolerance = float(cfg["refresh_max_vector_shift"])
    if shift > tolerance:
        return emb, {"mode": "full", "reason": f"relation vectors moved {shift:.4f} > "
                     f"{tolerance}", "vector_shift": round(shift, 6)}
    return kept, {"mode": "partial", "vectors": "previous build's",
                  "vector_shift": round(shift, 6), "tolerance": tolerance}


def previous_merges(cfg: Mapping, inputs: Mapping[str, str],
                    relations: pa.Table) -> tuple[dict[int, int], dict]:
    """In a refresh: each relation of one of the previous build's merge groups → that group
    (relations matched by name), and the report's part on them. Merges within such a group
    need only sim ≥ θ − ``refresh_merge_margin`` (``Merger.admits``)."""
    previous = previous_inputs(inputs, "relation_map")
    if previous is None:
        return {}, {}
    before = read_table(previous["relation_map"], columns=["name", "canonical_id"])
    group = dict(zip(before.column("name").to_pylist(),
                     before.column("canonical_id").to_pylist()))
    sizes = Counter(group.values())
    held = {r: group[n] for r, n in zip(relations.column("id").to_pylist(),
                                        relations.column("name").to_pylist())
            if sizes.get(group.get(n), 0) > 1}
    return held, {"merge_margin": float(cfg["refresh_merge_margin"]),
                  "previous_groups": sum(1 for n in sizes.values() if n > 1)}


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


class _LazyKeys:
    """The (s, o) keys of the relations in candidate pairs, read from the triples on the first
    merge only: most builds merge little, and reading every triple would dominate the stage."""

    def __init__(self, triples_path: str, involved: np.ndarray, seconds: dict):
        self.triples_path, self.involved, self.seconds = triples_path, involved, seconds
        self.keys: dict | None = None
        self._modulus = 1

    def _load(self) -> None:
        if self.keys is None:
            started = time.perf_counter()
            self.keys, self._modulus = _load_keys(self.triples_path, self.involved)
            self.seconds["load_triples"] = round(time.perf_counter() - started, 3)

    def of(self, r: int) -> np.ndarray:
        self._load()
        return self.keys.get(r, np.zeros(0, np.int64))

    def modulus(self) -> int:
        self._load()
        return self._modulus


def _merger(config: Mapping, cfg: Mapping, inputs: Mapping[str, str], stats: pa.Table,
            emb: np.ndarray | None, weights: list[float], keys: _LazyKeys,
            held: Mapping[int, int]) -> Merger:
    ids = stats.column("r").to_pylist()
    names = dict(zip(ids, stats.column("name").to_pylist()))
    counts = dict(zip(ids, stats.column("triples").to_pylist()))
    initial = {r: (h, type_pair_dict(tp)) for r, h, tp in
               zip(ids, stats.column("entropy").to_pylist(), stats.column("type_pairs").to_pylist())}
    rule = stats_settings(config)["type_rule"]

    def load_types() -> TypeIndex:
        ents = read_table(Path(inputs["entities"]), columns=["id", "types"])
        return TypeIndex.from_table(ents, rule)

    return Merger(names, counts, initial, keys.of, keys.modulus, load_types, emb,
                  weights, cfg["theta_base"], cfg["epsilon"], held, cfg["refresh_merge_margin"])


def _write_merges(relations: pa.Table, result: MergeResult, counts: Mapping[int, int],
                  normaliser: float, out: Path, report: dict) -> tuple[pa.Table, dict]:
    """relation_map and merge_log written, the report's merge summary filled."""
    rmap = canonical_mapping(relations, result.clusters, counts)
    r0 = relations.num_rows
    r_star = len(set(rmap.column("canonical_id").to_pylist()))
    report.update(summary(r0, r_star, result.total_loss, normaliser))
    report["merge_count"] = len(result.log)
    report["merges"] = [[m["left"], m["right"]] for m in result.log]
    report["total_loss"] = result.total_loss
    report["stale_heap_entries_skipped"] = result.stale_skipped
    report["heap_pushes"] = result.pushed
    write_table("relation_map", rmap, out / "relation_map.parquet")
    log_cols = ("step", "left", "right", "sim", "nmi", "jaccard", "cos", "theta", "loss", "members")
    write_table("merge_log", pa.table({k: [m[k] for m in result.log] for k in log_cols}),
                out / "merge_log.parquet")
    return rmap, {"relation_map": str(out / "relation_map.parquet"),
                  "merge_log": str(out / "merge_log.parquet")}


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    cfg = settings(config)
    out = Path(out_dir)
    lap = Laps()
    _require(inputs, ("triples", "relations"))
    relations = read_table(Path(inputs["relations"]), "relations")
    r0 = relations.num_rows
    report: dict = {"enabled": bool(cfg["enabled"]), "warnings": [], "merges": [],
                    "merge_count": 0, **summary(r0, r0, 0.0, 0.0)}
    if not cfg["enabled"]:
        report["normaliser"]["definition"] = NORMALISER + " (not computed: SCOS disabled)"
        return _write_identity(relations, out, inputs, report, lap.seconds)

    _require(inputs, ("relation_stats", "relation_pairs", "entities"))
    stats = read_table(Path(inputs["relation_stats"]), "relation_stats")
    pairs = _read_pairs(inputs["relation_pairs"])
    ids = stats.column("r").to_pylist()
    emb, weights = _relation_embeddings(cfg, inputs.get("relation_embeddings"),
                                        max(ids) if ids else None, report)
    emb, report["refresh"] = refresh_vectors(cfg, inputs, relations, stats, emb)
    held, margin_report = previous_merges(cfg, inputs, relations)
    report.update(weights=weights, theta_base=cfg["theta_base"], epsilon=cfg["epsilon"])
    report["refresh"].update(margin_report)
    lap("load_stats")

    involved = np.unique(np.concatenate([to_numpy(pairs["r_i"]), to_numpy(pairs["r_j"]),
                                         np.array(sorted(held), np.int64)]).astype(np.int64))
    merger = _merger(config, cfg, inputs, stats, emb, weights,
                     _LazyKeys(inputs["triples"], involved, lap.seconds), held)
    add_candidates(merger, pairs, held)
    report["candidate_pairs"] = pairs.num_rows
    report["admissible_initial"] = merger.pushed
    lap("initial_heap")

    result = merger.run()
    lap("greedy_merge")  # includes load_triples (the driver's (s, o) keys) when a merge happened
    normaliser = float(sum(stats.column("entropy").to_pylist()))
    rmap, outputs = _write_merges(relations, result, merger.triple_counts, normaliser, out, report)
    if held:
        report["refresh"].update(margin_outcome(result, rmap, held))
    lap("write_map_and_log")

    if len(set(rmap.column("canonical_id").to_pylist())) == r0:  # nothing merged: φ is the identity
        outputs.update(triples=str(inputs["triples"]), relations=str(inputs["relations"]))
        report["triples_in"] = report["triples_out"] = None
    else:
        outputs.update(_rewrite(config, cfg, inputs, rmap, out, report))
        lap("rewrite_triples")
    report["step_seconds"] = lap.seconds
    return {"outputs": outputs, "report": report}


def _rewrite(config: Mapping, cfg: Mapping, inputs: Mapping, rmap: pa.Table, out: Path,
             report: dict) -> dict:
    """The triples under φ — (s, φ(r), o), distinct — on the driver up to
    ``scos_merge.driver_max_triples`` (no Spark session), else in Spark; and the canonical
    relations table."""
    path = out / "triples"
    report["triples_in"] = _rows(Path(inputs["triples"]))
    if report["triples_in"] <= int(cfg["driver_max_triples"]):
        report["rewrite"] = "driver"
        rewrite_on_driver(inputs, rmap, path)
    else:
        report["rewrite"] = "spark"
        _rewrite_in_spark(config, inputs, rmap, path)
    report["triples_out"] = _rows(path)

    first = {}
    for cid, cname in zip(rmap.column("canonical_id").to_pylist(),
                          rmap.column("canonical_name").to_pylist()):
        first.setdefault(cid, cname)
    ids = sorted(first)
    write_table("relations", pa.table({"id": ids, "name": [first[i] for i in ids]}),
                out / "relations.parquet")
    return {"triples": str(path), "relations": str(out / "relations.parquet")}


def _rows(path: Path) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in table_files(path))


def _unmapped_error(inputs: Mapping, unmapped: int) -> StoreError:
    return StoreError(f"{inputs['triples']}: {unmapped} triples have a relation id missing "
                      f"from {inputs['relations']}")


def rewrite_on_driver(inputs: Mapping, rmap: pa.Table, path: Path) -> None:
    """numpy: each triple's r looked up in φ (sorted ids), the distinct (s, φ(r), o) rows
    written in (s, r, o) order as one file of the contract's schema — the rows and schema
    of the Spark path."""
    triples = read_table(Path(inputs["triples"]), columns=["s", "r", "o"])
    ids, canon = to_numpy(rmap["id"]), to_numpy(rmap["canonical_id"])
    order = np.argsort(ids)
    ids, canon = ids[order], canon[order]
    r = to_numpy(triples["r"])
    at = np.minimum(np.searchsorted(ids, r), max(len(ids) - 1, 0))
    mapped = ids[at] == r if len(ids) else np.zeros(len(r), bool)
    if not mapped.all():
        raise _unmapped_error(inputs, int((~mapped).sum()))
    sro = np.unique(np.column_stack([to_numpy(triples["s"]), canon[at],
                                     to_numpy(triples["o"])]).astype(np.int64), axis=0)
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"s": sro[:, 0], "r": sro[:, 1], "o": sro[:, 2]},
                            schema=TABLE_SCHEMAS["triples"]), path / "part-00000.parquet")


def _rewrite_in_spark(config: Mapping, inputs: Mapping, rmap: pa.Table, path: Path) -> None:
    """Spark: triples ⋈ φ on r, project (s, φ(r), o), distinct."""
    from pyspark.sql import functions as F

    from lokg.spark_jobs.session import get_spark

    spark = get_spark(dict(config), "lokg-scos_merge")
    phi = spark.createDataFrame(
        list(zip(rmap.column("id").to_pylist(), rmap.column("canonical_id").to_pylist())),
        "id long, canonical_id long")
    triples = spark.read.parquet(str(inputs["triples"])).select("s", "r", "o")
    unmapped = triples.join(F.broadcast(phi), triples.r == phi.id, "left_anti").count()
    if unmapped:
        raise _unmapped_error(inputs, unmapped)
    rewritten = (triples.join(F.broadcast(phi), triples.r == phi.id)
                 .select("s", F.col("canonical_id").alias("r"), "o").distinct())
    rewritten.write.mode("overwrite").parquet(str(path))


if __name__ == "__main__":
    from lokg.pipeline.driver import stage_main

    stage_main("scos_merge")

"""Stage ``relation_stats``'s passes over the triples on the driver, with numpy,
scipy.sparse and Arrow, for graphs up to ``relation_stats.driver_max_triples`` triples (and
``driver_max_relations`` relations): a small refresh then starts no Spark session for it.

The same three tables the Spark passes collect (``spark_jobs.relation_stats``):

* per relation: triples, distinct heads, distinct tails, entities = |heads ∪ tails| and H(r)
  in nats, H = ln n − Σ_o c_o ln c_o / n (c_o the triples with tail o), rounded to ``DIGITS``;
* entity pairs: for relations a < b, the entities touching both among those touching at most
  ``max_relations_per_entity`` relations — the upper triangle of MᵀM, M the sparse
  entity × relation incidence of the non-hub entities; the hub entities' own MᵀM counts a
  candidate pair's shared hubs (the Spark path joins them);
* the triples counted per (relation, head type set, tail type set), each entity's set under
  the rule as ``TypeIndex`` defines it (an entity missing from ``entities``: ∅).

The triples are distinct by contract, as on the Spark path. tests/test_relation_stats.py holds
both paths equal row for row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from lokg.runtime.contract import read_table, to_numpy

UNTYPED = "∅"
#: Decimals kept of the tail entropy and of P_r (P_r is one division of integer counts; H(r) is
#: summed exactly, :func:`tail_entropies`), so that every path and master writes the same value.
DIGITS = 12


#: A key space up to this many times the keys is counted with a dense ``np.bincount`` (linear,
#: one int64 a slot) instead of sorted by ``np.unique`` (n log n): at 10⁷ triples of 28
#: relations over 1.7 M entities the (relation, entity) space is 4.7 × the triples.
DENSE_KEY_SPACE = 8


def key_counts(keys: np.ndarray, space: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys in ``[0, space)``, ascending, with how often each occurs — what
    ``np.unique(keys, return_counts=True)`` gives, by counting when the space is small."""
    if space > DENSE_KEY_SPACE * max(len(keys), 1):
        return np.unique(keys, return_counts=True)
    counts = np.bincount(keys, minlength=space)
    present = np.flatnonzero(counts)
    return present, counts[present]


def canonical_types(types: Iterable[str] | None, rule: str = "spread") -> tuple[str, ...]:
    """An entity's type set under a rule: sorted distinct non-empty names, or (∅,) if none."""
    clean = sorted({t for t in (types or ()) if t})
    if not clean:
        return (UNTYPED,)
    return (clean[0],) if rule == "min" else tuple(clean)


class TypeIndex:
    """Entity id → type set (under a rule), for recomputing type-pair distributions on the driver."""

    def __init__(self, ids: Iterable[int], types: Iterable[Iterable[str] | None], rule: str = "spread"):
        ids = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids, dtype=np.int64)
        first: dict[tuple, int] = {}
        group = np.array([first.setdefault(tuple(raw or ()), len(first)) for raw in types], np.int64)
        self._intern(ids, group, [list(key) for key in first], rule)

    @classmethod
    def from_table(cls, entities: pa.Table, rule: str = "spread") -> TypeIndex:
        """As the constructor, but the entities are grouped by their type lists in Arrow, so
        only one list per distinct list reaches Python (1.7 M entities, a few hundred lists)."""
        index = cls.__new__(cls)
        group = _list_keys(entities.column("types")).dictionary_encode().indices
        group = group.to_numpy(zero_copy_only=False).astype(np.int64)
        _, first = np.unique(group, return_index=True)  # dictionary codes: 0, 1, … by first row
        types = entities.column("types").take(pa.array(first)).to_pylist()
        index._intern(to_numpy(entities.column("id")).astype(np.int64), group, types, rule)
        return index

    def _intern(self, ids: np.ndarray, group: np.ndarray, group_types: list, rule: str) -> None:
        """``of[ids[i]]`` = the canonical set of ``group_types[group[i]]``, each set numbered once."""
        number: dict[tuple[str, ...], int] = {(UNTYPED,): 0}
        set_of_group = np.array([number.setdefault(ts, len(number))
                                 for ts in (canonical_types(raw, rule) for raw in group_types)],
                                np.int64)
        self.sets: list[tuple[str, ...]] = list(number)  # insertion order: the numbers
        self.of = np.zeros(int(ids.max()) + 1 if len(ids) else 0, dtype=np.int64)
        self.of[ids] = set_of_group[group]

    def set_ids(self, entities: np.ndarray) -> np.ndarray:
        out = np.zeros(len(entities), dtype=np.int64)  # unknown entity → (∅,)
        known = entities < len(self.of)
        out[known] = self.of[entities[known]]
        return out

    def distribution(self, s: np.ndarray, o: np.ndarray) -> dict[tuple[str, str], float]:
        """P over (head type, tail type) of the distinct pairs (s[i], o[i]) (rule: see module)."""
        n = len(s)
        if n == 0:
            return {}
        k = len(self.sets)
        combos, counts = key_counts(self.set_ids(s) * k + self.set_ids(o), k * k)
        return spread_counts(((self.sets[c // k], self.sets[c % k], count)
                              for c, count in zip(combos.tolist(), counts.tolist())), n)


def spread_counts(combos: Iterable[tuple[Sequence[str], Sequence[str], int]], n: int
                  ) -> dict[tuple[str, str], float]:
    """P over (head type, tail type) from triple counts per (head type set, tail type set), of
    n triples in all: each triple's 1/n spread evenly over the product of its two sets. One
    definition for ``TypeIndex`` and for the stage's counts collected from Spark."""
    dist: dict[tuple[str, str], float] = {}
    for heads, tails, count in combos:
        w = count / (len(heads) * len(tails) * n)
        for ht in heads:
            for tt in tails:
                dist[(ht, tt)] = dist.get((ht, tt), 0.0) + w
    return dist


class Passes(NamedTuple):
    """What the passes over the triples give the pair signals, from Spark or from the driver
    (``relation_stats_driver``): per-relation facts (r, triples, heads, tails, entities,
    entropy), non-hub entity pairs (r_i, r_j, shared_nonhub), the type-set counts (r, hts, tts,
    c; None when they stay in Spark), the number of hub entities, and a function from candidate
    pairs to (r_i, r_j, hub entities shared)."""

    basic: pa.Table
    entity_pairs: pa.Table | None
    combos: pa.Table | None
    hubs: int
    hub_shared: Callable[[Iterable[tuple[int, int]]], list[tuple[int, int, int]]]


#: Joins a list's elements into one key; an element's own separators and backslashes are
#: escaped first, so two keys are equal only when the lists are (up to null ≡ "" and null ≡ []:
#: the same canonical set).
_LIST_SEP = "\x1f"


def _list_keys(lists: pa.ChunkedArray) -> pa.Array:
    """One string per list of strings, equal exactly when the lists are (see ``_LIST_SEP``)."""
    lists = lists.combine_chunks()
    start, end = lists.offsets[0].as_py(), lists.offsets[-1].as_py()
    values = pc.fill_null(lists.values.slice(start, end - start), "")
    values = pc.replace_substring(pc.replace_substring(values, "\\", "\\\\"), _LIST_SEP, "\\s")
    offsets = pc.subtract(lists.offsets, start)
    escaped = pa.ListArray.from_arrays(offsets, values, mask=lists.is_null())
    return pc.fill_null(pc.binary_join(escaped, _LIST_SEP), "")


_SETS = pa.list_(pa.string())


def triple_passes(entities_path: str, triples_path: str, rule: str, cap: int,
                  hubs_possible: bool) -> Passes:
    """The facts, non-hub entity pairs, type-set counts and hub entities of the triples; hub
    entities are counted (and their shared counts offered) only when there can be any (|R|
    above the cap), as on the Spark path."""
    triples = read_table(Path(triples_path), columns=["s", "r", "o"])
    s, r, o = (to_numpy(triples[c]).astype(np.int64) for c in "sro")
    n_nodes = int(max(s.max(initial=-1), o.max(initial=-1))) + 1
    n_rel = int(r.max(initial=-1)) + 1
    head_keys, _ = key_counts(r * n_nodes + s, n_rel * n_nodes)
    tail_keys, tail_counts = key_counts(r * n_nodes + o, n_rel * n_nodes)
    member, _ = key_counts(np.concatenate([head_keys, tail_keys]), n_rel * n_nodes)
    incidence = sp.csr_matrix((np.ones(len(member), np.int64),
                               (member % n_nodes, member // n_nodes)), shape=(n_nodes, n_rel))
    degree = np.diff(incidence.indptr)
    hub = degree > cap
    basic = _facts(r, (head_keys, tail_keys, tail_counts, member), n_nodes, n_rel)
    entities = read_table(Path(entities_path), columns=["id", "types"])
    combos = _type_combos(TypeIndex.from_table(entities, rule), s, r, o)
    hubs = int(np.count_nonzero(hub)) if hubs_possible else 0
    hub_pairs = _co_occurrence(incidence[hub]) if hubs else None
    return Passes(basic, _entity_pairs(_co_occurrence(incidence[~hub])), combos, hubs,
                  lambda pairs: _hub_shared(hub_pairs, pairs))


def tail_entropies(r: np.ndarray, c: np.ndarray, k: np.ndarray,
                   digits: int | None = DIGITS) -> dict[int, float]:
    """H(r) in nats of each relation from its histogram of tail counts (``k`` entities are the
    tail of ``c`` triples of relation ``r``): ln n − Σ k·c·ln c / n, n = Σ k·c. The sum is
    exactly rounded (``math.fsum``), so H(r) does not depend on the order the rows come in —
    Spark's partitions on any master, numpy's on the driver; at 5.8·10⁶ triples plain sums
    differed in the 12th decimal. Rounded to ``digits`` (None: not rounded)."""
    terms: dict[int, list[float]] = {}
    n: dict[int, int] = {}
    for ri, ci, ki in zip(r.tolist(), c.tolist(), k.tolist()):
        terms.setdefault(ri, []).append(ki * ci * math.log(ci))
        n[ri] = n.get(ri, 0) + ki * ci
    exact = {ri: max(0.0, math.log(n[ri]) - math.fsum(terms[ri]) / n[ri]) for ri in n}
    return exact if digits is None else {ri: round(h, digits) for ri, h in exact.items()}


def _facts(r: np.ndarray, keys: tuple, n_nodes: int, n_rel: int) -> pa.Table:
    """(r, triples, heads, tails, entities, entropy) of every relation with a triple."""
    head_keys, tail_keys, tail_counts, member = keys
    n = np.bincount(r, minlength=n_rel)
    heads = np.bincount(head_keys // n_nodes, minlength=n_rel)
    tail_r = tail_keys // n_nodes
    tails = np.bincount(tail_r, minlength=n_rel)
    entities = np.bincount(member // n_nodes, minlength=n_rel)
    present = np.flatnonzero(n)
    width = int(tail_counts.max(initial=0)) + 1
    histogram, k = np.unique(tail_r * width + tail_counts, return_counts=True)
    by_relation = tail_entropies(histogram // width, histogram % width, k)
    entropy = [by_relation[int(i)] for i in present]
    return pa.table({"r": present.astype(np.int64), "triples": n[present].astype(np.int64),
                     "heads": heads[present].astype(np.int64),
                     "tails": tails[present].astype(np.int64),
                     "entities": entities[present].astype(np.int64),
                     "entropy": pa.array(entropy, pa.float64())})


def _co_occurrence(incidence: sp.csr_matrix) -> sp.coo_matrix:
    """Relations a < b and the entities (rows) touching both: the upper triangle of MᵀM."""
    return sp.triu(incidence.T @ incidence, k=1).tocoo()


def _entity_pairs(shared: sp.coo_matrix) -> pa.Table:
    return pa.table({"r_i": shared.row.astype(np.int64), "r_j": shared.col.astype(np.int64),
                     "shared_nonhub": shared.data.astype(np.int64)})


def _hub_shared(hub_pairs: sp.coo_matrix | None, pairs: Iterable[tuple[int, int]]
                ) -> list[tuple[int, int, int]]:
    """(r_i, r_j, hub entities touching both) of the candidate pairs that share any."""
    if hub_pairs is None:
        return []
    counts = dict(zip(zip(hub_pairs.row.tolist(), hub_pairs.col.tolist()), hub_pairs.data.tolist()))
    return [(i, j, counts[(i, j)]) for i, j in pairs if (i, j) in counts]


def _type_combos(index: TypeIndex, s: np.ndarray, r: np.ndarray, o: np.ndarray) -> pa.Table:
    """(r, hts, tts, c): the triples counted per relation, head type set and tail type set."""
    k = len(index.sets)
    pair_keys = index.set_ids(s) * k + index.set_ids(o)
    codes, _ = key_counts(pair_keys, k * k)
    code_of = np.searchsorted(codes, pair_keys)
    keys, counts = key_counts(r * len(codes) + code_of, (int(r.max(initial=-1)) + 1) * len(codes))
    pair = codes[keys % len(codes)]
    return pa.table({"r": (keys // len(codes)).astype(np.int64),
                     "hts": pa.array([list(index.sets[c]) for c in (pair // k).tolist()], _SETS),
                     "tts": pa.array([list(index.sets[c]) for c in (pair % k).tolist()], _SETS),
                     "c": counts.astype(np.int64)})

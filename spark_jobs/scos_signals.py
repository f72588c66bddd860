"""The SCOS signals of a relation or of a merged cluster, recomputed on the driver from its
distinct (s, o) pairs (``scos_greedy``: a merge's union): H in nats (``tail_entropy``), P over
(head type, tail type) under the type rule (``TypeIndex``), NMI = 1 − JSD_bits (``nmi_signal``).

``relation_stats`` computes the same quantities for the relations themselves, in SQL over the
whole graph; ``scos_merge`` starts from its table (``type_pair_dict`` reads a ``type_pairs``
cell) and uses these only for the clusters its merges create.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lokg.runtime.contract import to_numpy

#: The single type of an entity without any (``relation_stats.type_rule``).
UNTYPED = "∅"


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
    n triples in all: each triple's 1/n spread evenly over the product of its two sets."""
    dist: dict[tuple[str, str], float] = {}
    for heads, tails, count in combos:
        w = count / (len(heads) * len(tails) * n)
        for ht in heads:
            for tt in tails:
                dist[(ht, tt)] = dist.get((ht, tt), 0.0) + w
    return dist


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



def tail_entropy(o: np.ndarray) -> float:
    """H(r) in nats from the tails of the *distinct* (s, o) pairs of a relation (or cluster).

    Each distinct (s, o) pair contributes one subject to its tail, so p(o|r) is the share of
    pairs with tail o.
    """
    n = len(o)
    if n == 0:
        return 0.0
    _, counts = np.unique(o, return_counts=True)
    p = counts / n
    return float(max(0.0, -(p * np.log(p)).sum()))


def jsd_bits(p: Mapping, q: Mapping) -> float:
    """Jensen–Shannon divergence of two distributions (dicts key → probability), in bits."""
    total = 0.0
    for key in set(p) | set(q):
        a, b = p.get(key, 0.0), q.get(key, 0.0)
        m = (a + b) / 2.0
        if a > 0:
            total += 0.5 * a * math.log2(a / m)
        if b > 0:
            total += 0.5 * b * math.log2(b / m)
    return min(1.0, max(0.0, total))


def nmi_signal(p: Mapping, q: Mapping) -> float:
    """1 − JSD_bits(P, Q) ∈ [0, 1]; 0 when either distribution is empty (no triples)."""
    if not p or not q:
        return 0.0
    return 1.0 - jsd_bits(p, q)


def type_pair_dict(entries: Iterable[Mapping] | None) -> dict[tuple[str, str], float]:
    """``relation_stats.type_pairs`` cell → {(head_type, tail_type): p}."""
    return {(d["head_type"], d["tail_type"]): float(d["p"]) for d in (entries or ())}

"""Stage ``entity_types`` on the driver: the same rules as the Spark path of
``spark_jobs.entity_types``, with numpy and Arrow, for graphs up to
``entity_types.driver_max_triples`` — a small refresh then starts no Spark session for it.

Each source of the cascade gives a sorted list of distinct strings per entity id (or none):
``explicit`` the asserted types, ``domain`` the domains of the entity's outgoing relations,
``frequent_relation`` / ``incoming_relation`` the name of its most frequent outgoing /
incoming relation (ties → the smallest name; incoming ones prefixed ``~``). Strings sort by
code point, which is the UTF-8 byte order Spark's ``array_sort`` and ``min`` use.
tests/test_types.py holds both paths equal row for row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lokg.runtime.contract import INCOMING_TYPE_PREFIX, TABLE_SCHEMAS, read_table, to_numpy
from lokg.spark_jobs.scos_signals import key_counts

_LISTS = pa.list_(pa.string())
#: The contract's entities with ``types`` not null, as Spark writes it (a coalesce ending in
#: an empty list): the same schema whichever path wrote a build, so a refresh's row-digest
#: cut-off (pipeline.refresh.same_rows) can match either
TYPED = TABLE_SCHEMAS["entities"].set(TABLE_SCHEMAS["entities"].get_field_index("types"),
                                      pa.field("types", _LISTS, nullable=False))


def write_types(paths: tuple, names: dict[int, str], domains: dict[int, str | None],
                cascade: list[str], out_path: Path) -> dict:
    """Write the typed entities (``out_path``: a directory of one file, in id order) and
    return the number of entities each source typed (None: untyped)."""
    ent_path, tri_path, ta_path = paths
    entities = read_table(ent_path, "entities")
    entities = entities.take(pc.sort_indices(entities["id"]))
    rel_ids = np.array(sorted(names), np.int64)
    triples = read_table(tri_path, columns=["s", "r", "o"])
    triples = triples.filter(pc.is_in(triples["r"], pa.array(rel_ids)))  # Spark: inner join
    r_index = np.searchsorted(rel_ids, to_numpy(triples["r"]))
    sources = {
        "explicit": lambda: _explicit(ta_path),
        "domain": lambda: _domains(to_numpy(triples["s"]), r_index,
                                   [domains[int(r)] for r in rel_ids]),
        "frequent_relation": lambda: _most_frequent(to_numpy(triples["s"]), r_index,
                                                    [names[int(r)] for r in rel_ids], ""),
        "incoming_relation": lambda: _most_frequent(to_numpy(triples["o"]), r_index,
                                                    [names[int(r)] for r in rel_ids],
                                                    INCOMING_TYPE_PREFIX),
    }
    ids = to_numpy(entities["id"])
    aligned = [_aligned(ids, *sources[s]()) for s in cascade]
    types = pc.coalesce(*[lists for lists, _ in aligned], pa.scalar([], _LISTS))
    chosen = np.select([has for _, has in aligned], list(range(len(cascade))), -1)
    counts = np.bincount(chosen + 1, minlength=len(cascade) + 1)
    out_path.mkdir(parents=True, exist_ok=True)
    typed = entities.set_column(TYPED.get_field_index("types"), "types", types)
    pq.write_table(typed.select(TYPED.names).cast(TYPED), out_path / "part-00000.parquet")
    by_source = {source: int(counts[i + 1]) for i, source in enumerate(cascade)}
    by_source[None] = int(counts[0])
    return by_source


def _aligned(ids: np.ndarray, keys: np.ndarray, lists: pa.ListArray):
    """The source's lists taken for each entity id (null where it has none), and a mask of the
    entities it has one for."""
    pos = np.minimum(np.searchsorted(keys, ids), max(len(keys) - 1, 0))
    has = (keys[pos] == ids) if len(keys) else np.zeros(len(ids), bool)
    return lists.take(pa.array(pos, mask=~has)), has


def _grouped(ids: np.ndarray, labels: np.ndarray, strings: list[str]):
    """(distinct ids in order, the sorted distinct strings of each as a ListArray) from pairs
    (id, label), a label indexing ``strings``; labels < 0 give the id an empty list."""
    ordered = sorted(strings)
    rank = _ranks(strings, ordered) + 1  # 0: no string
    ids = ids.astype(np.int64)
    width = len(ordered) + 1
    pairs, _ = key_counts(ids * width + rank[labels], (int(ids.max(initial=-1)) + 1) * width)
    keys, starts = np.unique(pairs // width, return_index=True)
    kept = pairs % width > 0
    sizes = np.add.reduceat(kept.astype(np.int64), starts) if len(starts) else starts
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    values = pa.array(ordered, pa.string()).take(pa.array(pairs[kept] % width - 1))
    return keys, pa.ListArray.from_arrays(pa.array(offsets), values)


def _ranks(strings: list, ordered: list[str]) -> np.ndarray:
    """Each string's position in ``ordered`` (-1 for None), and a last -1 for label -1."""
    where = {x: i for i, x in enumerate(ordered)}
    return np.array([where.get(x, -1) for x in strings] + [-1], np.int64)


def _explicit(ta_path: Path):
    """Each asserting id's distinct types (nulls dropped, as Spark's ``collect_set``)."""
    assertions = read_table(ta_path, columns=["id", "type"])
    strings = pc.unique(pc.drop_null(assertions["type"])).to_pylist()
    labels = pc.index_in(assertions["type"], pa.array(strings, pa.string()))
    return _grouped(to_numpy(assertions["id"]), to_numpy(pc.fill_null(labels, -1)), strings)


def _domains(subjects: np.ndarray, r_index: np.ndarray, rel_domains: list[str | None]):
    """Each subject's distinct relation domains; a subject whose relations have none gets no
    list (Spark: an empty ``collect_set`` is no candidate)."""
    strings = sorted({d for d in rel_domains if d is not None})
    code = _ranks(rel_domains, strings)
    labels = code[r_index]
    keep = labels >= 0
    return _grouped(subjects[keep], labels[keep], strings)


def _most_frequent(ends: np.ndarray, r_index: np.ndarray, rel_names: list[str], prefix: str):
    """Each entity's most frequent relation name on this end (ties → the smallest name),
    prefixed, as a one-element list."""
    name_rank = _ranks(rel_names, sorted(rel_names))
    n_rel, ends = max(len(rel_names), 1), ends.astype(np.int64)
    pairs, counts = key_counts(ends * n_rel + r_index, (int(ends.max(initial=-1)) + 1) * n_rel)
    end, relation = pairs // n_rel, pairs % n_rel
    order = np.lexsort((name_rank[relation], -counts, end))
    keys, first = np.unique(end[order], return_index=True)
    best = relation[order][first]
    values = pc.binary_join_element_wise(prefix, pa.array(rel_names, pa.string()).take(best), "")
    offsets = pa.array(np.arange(len(keys) + 1, dtype=np.int32))
    return keys, pa.ListArray.from_arrays(offsets, values)

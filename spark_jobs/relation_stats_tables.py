"""``relation_stats``'s tables from collected counts: up to ``driver_max_relations`` the whole
driver path (P_r, the type candidates, every pair signal in Python), and on both paths the
per-relation ``relation_stats`` rows."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import pyarrow as pa

from lokg.runtime.contract import TABLE_SCHEMAS
from lokg.spark_jobs.relation_stats_driver import DIGITS, Passes, spread_counts
from lokg.spark_jobs.relation_stats_math import nmi_signals


def signals_on_driver(relations: pa.Table, passes: Passes, transe: list, cfg: Mapping,
               report: dict) -> tuple[pa.Table, pa.Table]:
    """P_r, the type candidates and every pair signal from the facts, non-hub entity pairs
    and type-set counts (the hub entities, if any, counted by ``passes.hub_shared``)."""
    basic, entity_pairs = passes.basic, passes.entity_pairs
    n = dict(zip(basic.column("r").to_pylist(), basic.column("triples").to_pylist()))
    dists = _distributions(passes.combos, n)
    stats = stats_table(relations, basic, _distribution_rows(dists))
    shared = dict(zip(zip(entity_pairs.column("r_i").to_pylist(),
                          entity_pairs.column("r_j").to_pylist()),
                      entity_pairs.column("shared_nonhub").to_pylist()))
    typed, report["hub_type_pairs_skipped"] = _type_candidates(
        dists, float(cfg["type_pair_min_share"]), int(cfg["max_relations_per_type_pair"]))
    cand: dict[tuple[int, int], set[str]] = {}
    for source, found in (("entity", shared), ("type", typed), ("transe", transe)):
        for pair in found:
            cand.setdefault(pair, set()).add(source)
    if passes.hubs and cand:
        for i, j, n_hub in passes.hub_shared(cand):
            shared[(i, j)] = shared.get((i, j), 0) + n_hub
    sizes = dict(zip(stats.column("r").to_pylist(), stats.column("entities").to_pylist()))
    return stats, _signal_table(cand, shared, sizes, dists)


def _distributions(combos: pa.Table, n: Mapping[int, int]) -> dict[int, dict]:
    """P_r per relation from the (r, hts, tts, c) counts, spread as ``TypeIndex`` does; rows
    sorted first, so that the sums (and the rounding) do not depend on Spark's row order."""
    grouped: dict[int, list] = {}
    for row in sorted(combos.to_pylist(), key=lambda d: (d["r"], d["hts"], d["tts"])):
        grouped.setdefault(row["r"], []).append((row["hts"], row["tts"], row["c"]))
    return {r: {key: round(p, DIGITS) for key, p in spread_counts(rows, n[r]).items()}
            for r, rows in grouped.items()}


def _distribution_rows(dists: Mapping[int, Mapping]) -> pa.Table:
    """{r: P_r} as the (r, head_type, tail_type, p) rows ``stats_table`` takes."""
    rows = [(r, ht, tt, p) for r, dist in dists.items() for (ht, tt), p in dist.items()]
    names = ["r", "head_type", "tail_type", "p"]
    return pa.table({k: [row[i] for row in rows] for i, k in enumerate(names)},
                    schema=pa.schema([("r", pa.int64()), ("head_type", pa.string()),
                                      ("tail_type", pa.string()), ("p", pa.float64())]))


def _type_candidates(dists: Mapping[int, Mapping], floor: float, cap: int
                     ) -> tuple[set[tuple[int, int]], int]:
    """Pairs sharing a type pair of mass ≥ ``floor`` in both, and how many type pairs held by
    more than ``cap`` relations were skipped."""
    holders: dict[tuple[str, str], list[int]] = {}
    for r in sorted(dists):
        for key, p in dists[r].items():
            if p >= floor:
                holders.setdefault(key, []).append(r)
    pairs = {pair for rs in holders.values() if len(rs) <= cap
             for pair in itertools.combinations(rs, 2)}
    return pairs, sum(len(rs) > cap for rs in holders.values())


def _signal_table(cand: Mapping[tuple[int, int], set], shared: Mapping, sizes: Mapping,
                  dists: Mapping) -> pa.Table:
    """``relation_pairs`` (sorted by r_i, r_j): shared entities, Jaccard, NMI and sources."""
    cols: dict[str, list] = {name: [] for name in TABLE_SCHEMAS["relation_pairs"].names}
    for i, j in sorted(cand):
        k = shared.get((i, j), 0)
        union = sizes.get(i, 0) + sizes.get(j, 0) - k
        cols["r_i"].append(i)
        cols["r_j"].append(j)
        cols["shared_entities"].append(k)
        cols["jaccard"].append(k / union if union > 0 else 0.0)
        cols["source"].append(",".join(sorted(cand[(i, j)])))
    cols["nmi"] = nmi_signals(sorted(cand), dists)
    return pa.table(cols, schema=TABLE_SCHEMAS["relation_pairs"])


def stats_table(relations: pa.Table, basic: pa.Table, tp_rows: pa.Table) -> pa.Table:
    """Assemble the ``relation_stats`` contract table (one row per relation of ``relations``)."""
    by_r = {row["r"]: row for row in basic.to_pylist()}
    dists: dict[int, list] = {}
    for row in tp_rows.to_pylist():
        dists.setdefault(row["r"], []).append(
            {"head_type": row["head_type"], "tail_type": row["tail_type"], "p": row["p"]})
    cols: dict[str, list] = {k: [] for k in
                             ("r", "name", "triples", "heads", "tails", "entities", "entropy", "type_pairs")}
    for rid, name in zip(relations.column("id").to_pylist(), relations.column("name").to_pylist()):
        row = by_r.get(rid, {})
        cols["r"].append(rid)
        cols["name"].append(name)
        for key in ("triples", "heads", "tails", "entities"):
            cols[key].append(int(row.get(key, 0) or 0))
        cols["entropy"].append(float(row.get("entropy", 0.0) or 0.0))
        cols["type_pairs"].append(sorted(dists.get(rid, []),
                                         key=lambda d: (d["head_type"], d["tail_type"])))
    return pa.table(cols, schema=TABLE_SCHEMAS["relation_stats"])

"""Gold paths for the GAT's path term: questions parsed, resolved to ids, walked to edges.

Questions: PathQuestion lines ``question \\t answers \\t s#r1#e1#r2#…#ans#<end>#ans`` (entity keys
and relation names as ingested) or JSONL lines with ``topic_entities`` (keys), ``path`` (relation
names) and optionally ``answer_keys`` (as ``pipeline/synth.py`` writes). Relation names go through
``relation_map`` to canonical ids. A question constrains the entities at each hop it names; its gold
edges are the forward edges of every walk that satisfies the constraints (forward from the topic,
then pruned back from the reachable endpoints). Questions with an unknown key or relation, or no
such walk, are counted and skipped. The stage refuses a file named dev/test/valid: the path term
trains on train only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lokg.common.stage import StageError
from lokg.runtime.contract import read_table
from lokg.training.gat_inputs import Graph

MAX_FRONTIER = 10_000  # a gold walk reaching more entities at one hop is skipped (not a path)


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
    parse_line = _jsonl_path if jsonl else _pathquestion_path
    seen, paths, lines = set(), [], 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        lines += 1
        where = f"{path}:{number}"
        rels, nodes = parse_line(line, where)
        if not rels or not nodes[0]:
            raise StageError(f"{where}: a question needs a topic entity and at least one relation")
        key = (rels, tuple(nodes))
        if key not in seen:
            seen.add(key)
            paths.append(key)
    return RawPaths(paths, lines)


def _jsonl_path(line: str, where: str) -> tuple[tuple[str, ...], list]:
    """(relation names, allowed keys per position) of a JSONL question."""
    try:
        q = json.loads(line)
        rels = tuple(str(r) for r in q["path"])
        nodes = [tuple(str(k) for k in q["topic_entities"])] + [None] * len(rels)
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise StageError(f"{where}: expected JSON with 'topic_entities' and 'path' "
                         f"({exc})") from None
    if q.get("answer_keys"):
        nodes[-1] = tuple(str(k) for k in q["answer_keys"])
    return rels, nodes


def _pathquestion_path(line: str, where: str) -> tuple[tuple[str, ...], list]:
    """(relation names, the key at each position) of a PathQuestion line."""
    parts = line.split("\t")
    tokens = parts[2].strip().split("#") if len(parts) == 3 else []
    if "<end>" in tokens:
        tokens = tokens[:tokens.index("<end>")]
    if len(tokens) < 3 or len(tokens) % 2 == 0:
        raise StageError(f"{where}: expected 'question \\t answers \\t "
                         f"subject#relation#entity#...#<end>#answer'")
    return tuple(tokens[1::2]), [(k,) for k in tokens[0::2]]


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

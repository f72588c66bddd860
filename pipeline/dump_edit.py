"""A dump edited as its next version would be: what a refresh is tested and
benchmarked on (``bench/refresh_scale.py``, tests/test_refresh_*.py).

``edit_synth_dump`` edits a synthetic dump (``pipeline.synth``) finely — edges, entities,
names —; ``edit_fb15k237_dump`` removes and adds triples of an FB15k-237 directory;
``edit_dump`` changes a seeded share of either's triples. Seeded: the same call writes the
same dump.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from lokg.pipeline.synth_schema import NS

FREEBASE_NS = f"<{NS}"
#: The triple files of an FB15k-237 dump (``/m/mid \t /relation/path \t /m/mid`` lines).
FB15K237_SPLITS = ("train.txt", "valid.txt", "test.txt")


def edit_synth_dump(src, dst, *, remove_edges: int = 0, add_edges: int = 0,
                    new_entities: int = 0, drop_entities: int = 0, rename: int = 0,
                    seed: int = 0) -> dict:
    """Copy the synthetic dump ``src`` to ``dst`` with its kg.nt edited: entity→entity edges
    removed and added (between existing entities, with existing relations), new named
    entities (each with an edge to an existing one), entities dropped (every line naming
    them) and names changed. Returns the keys it dropped, added and renamed."""
    rng = random.Random(seed)
    shutil.copytree(src, dst)
    lines = Path(src, "kg.nt").read_text(encoding="utf-8").splitlines()
    edges = [i for i, line in enumerate(lines) if _is_edge(line)]
    keys = sorted({_key(lines[i].split(" ")[0]) for i in edges})
    dropped = rng.sample(keys, drop_entities)
    gone = set(rng.sample(edges, remove_edges))
    kept = [line for i, line in enumerate(lines) if i not in gone
            and not any(f"{FREEBASE_NS}{k}>" in line for k in dropped)]
    live = [k for k in keys if k not in dropped]
    relations = sorted({lines[i].split(" ")[1] for i in edges})
    renamed = rng.sample(live, rename)
    kept = [line.replace('"@en', ' II"@en') if "type.object.name" in line
            and _key(line.split(" ")[0]) in renamed else line for line in kept]
    added = [f"{FREEBASE_NS}m.new{i:03d}> {FREEBASE_NS}type.object.name> \"New {i}\"@en ."
             for i in range(new_entities)]
    ends = [(f"m.new{i:03d}", rng.choice(live)) for i in range(new_entities)]
    ends += [tuple(rng.sample(live, 2)) for _ in range(add_edges)]
    added += [f"{FREEBASE_NS}{s}> {rng.choice(relations)} {FREEBASE_NS}{o}> ." for s, o in ends]
    Path(dst, "kg.nt").write_text("\n".join(kept + added) + "\n", encoding="utf-8")
    return {"dropped": dropped, "new": [f"m.new{i:03d}" for i in range(new_entities)],
            "renamed": renamed}


def synth_edge_count(dump) -> int:
    """Entity→entity edges of a synthetic dump's kg.nt (its triples, before de-duplication)."""
    with Path(dump, "kg.nt").open(encoding="utf-8") as lines:
        return sum(_is_edge(line.rstrip("\n")) for line in lines)


def _is_edge(line: str) -> bool:
    parts = line.split(" ")
    return (len(parts) == 4 and parts[2].startswith(f"{FREEBASE_NS}m.")
            and "type.object.type" not in parts[1])


def _key(term: str) -> str:
    return term[len(FREEBASE_NS):-1]


def edit_fb15k237_dump(src, dst, *, remove: int, add: int, seed: int = 0) -> dict:
    """Copy the FB15k-237 dump ``src`` to ``dst`` with ``remove`` of its distinct triples
    taken out (from whichever split held them) and ``add`` new ones put into train.txt: each
    a subject and object of the dump with one of its relations, a triple it did not hold.
    No entity or relation is new. Returns the counts and the triples removed and added."""
    rng = random.Random(seed)
    shutil.copytree(src, dst)
    splits = {name: Path(src, name).read_text(encoding="utf-8").splitlines()
              for name in FB15K237_SPLITS}
    triples = sorted(_fb15k237_triples(src))
    removed = set(rng.sample(triples, remove))
    held = set(triples) - removed
    entities = sorted({e for s, _, o in triples for e in (s, o)})
    relations = sorted({r for _, r, _ in triples})
    added: list[tuple[str, ...]] = []
    while len(added) < add:
        triple = (rng.choice(entities), rng.choice(relations), rng.choice(entities))
        if triple[0] != triple[2] and triple not in held and triple not in removed:
            held.add(triple)
            added.append(triple)
    for name, lines in splits.items():
        kept = [line for line in lines if tuple(line.split("\t")) not in removed]
        kept += ["\t".join(t) for t in added] if name == FB15K237_SPLITS[0] else []
        Path(dst, name).write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
    return {"triples": len(triples), "removed": sorted(removed), "added": added}


def edit_dump(src, dst, *, fraction: float, seed: int = 0) -> dict:
    """``src`` (synthetic: ``kg.nt``; else FB15k-237) copied to ``dst`` with ``fraction`` of
    its triples removed and as many added between existing entities; the counts changed."""
    if Path(src, "kg.nt").is_file():
        edges = synth_edge_count(src)
        changed = round(fraction * edges)
        edit_synth_dump(src, dst, remove_edges=changed, add_edges=changed, seed=seed)
        return {"format": "synth", "triples": edges, "removed": changed, "added": changed}
    total = len(_fb15k237_triples(src))
    changed = round(fraction * total)
    edit_fb15k237_dump(src, dst, remove=changed, add=changed, seed=seed)
    return {"format": "fb15k237", "triples": total, "removed": changed, "added": changed}


def _fb15k237_triples(dump) -> set[tuple[str, ...]]:
    return {tuple(line.split("\t")) for name in FB15K237_SPLITS
            for line in Path(dump, name).read_text(encoding="utf-8").splitlines()
            if line.count("\t") == 2}

"""A toy family graph (60 people: couples, their children, genders, professions), questions
over its 2-hop chains with gold paths, and a store with the relation-knowledge stage fitted on
it (no encoder: the lexicon predicts)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from lokg.runtime.contract import TABLE_SCHEMAS, Store, write_table
from lokg.runtime.relknow import Facts, derive
from lokg.training import relation_knowledge as fit

FIRST = ["alba", "bruno", "cora", "dario", "edda", "fabio", "greta", "hugo", "ines", "jonas"]
LAST = ["quist", "rourke", "sandor", "tamm", "ulloa", "varga"]
PROFESSIONS = ["baker", "pilot", "weaver", "smith"]
RELATIONS = ["children", "gender", "parents", "profession", "spouse"]
REL = {n: i for i, n in enumerate(RELATIONS)}
N_PEOPLE = 60  # people 0..59; the genders and professions follow them


def people_names() -> list[str]:
    return [f"{FIRST[i % 10]} {LAST[i // 10]}" for i in range(N_PEOPLE)]


def family_triples() -> list[tuple[int, int, int]]:
    """Couples (2k, 2k+1) for k < 10; persons 20..59 are children of couple (i − 20) mod 10."""
    male, female = N_PEOPLE, N_PEOPLE + 1
    out = []
    for i in range(N_PEOPLE):
        out.append((i, REL["gender"], male if i % 2 == 0 else female))
        out.append((i, REL["profession"], N_PEOPLE + 2 + i % 4))
    for k in range(10):
        out += [(2 * k, REL["spouse"], 2 * k + 1), (2 * k + 1, REL["spouse"], 2 * k)]
    for child in range(20, N_PEOPLE):
        father = 2 * ((child - 20) % 10)
        for parent in (father, father + 1):
            out += [(child, REL["parents"], parent), (parent, REL["children"], child)]
    return out


ENTITY_NAMES = people_names() + ["male", "female"] + PROFESSIONS
TEMPLATES = {
    ("parents", "gender"): ["what is the gender of {x} 's father ?", "what sex is {x} 's mother ?"],
    ("parents", "profession"): ["what is the job of {x} 's father ?",
                                "what does {x} 's mother do for work ?"],
    ("spouse", "profession"): ["what is the job of {x} 's wife ?",
                               "what does {x} 's husband do for work ?"],
    ("children", "gender"): ["what gender is {x} 's son ?", "what sex is the daughter of {x} ?"],
    ("spouse", "gender"): ["what sex is the husband of {x} ?", "what gender is {x} 's wife ?"],
}


TRAIN_PEOPLE = [*range(0, 16), *range(20, 50)]
DEV_PEOPLE = [*range(16, 20), *range(50, N_PEOPLE)]


def write_questions(path: Path, people, triples, *, paths: bool = True) -> None:
    """JSONL questions with gold paths (unless ``paths`` is false); answers = every endpoint of
    the chain."""
    facts = Facts(*np.array(triples).T, len(RELATIONS))
    lines = []
    for chain, templates in TEMPLATES.items():
        for x in people:
            d = derive(facts, [x], [REL[r] for r in chain])
            if not d.derivable:
                continue
            for t in templates:
                lines.append({"question": t.format(x=ENTITY_NAMES[x]),
                              "path": list(chain) if paths else [],
                              "topic_entities": [f"e{x}"],
                              "answers": [ENTITY_NAMES[e] for e in d.endpoints]})
    path.write_text("".join(json.dumps(q) + "\n" for q in lines))


def write_tables(root: Path, triples) -> dict[str, str]:
    """The staged tables the stage reads (entities, relations, relation_map, triples)."""
    n = len(ENTITY_NAMES)
    tables = {
        "entities": pa.table({"id": list(range(n)), "key": [f"e{i}" for i in range(n)],
                              "name": ENTITY_NAMES, "aliases": [[] for _ in range(n)],
                              "description": [""] * n, "types": [[] for _ in range(n)],
                              "attributes": [[] for _ in range(n)]},
                             schema=TABLE_SCHEMAS["entities"]),
        "relations": pa.table({"id": list(range(len(RELATIONS))), "name": RELATIONS},
                              schema=TABLE_SCHEMAS["relations"]),
        "relation_map": pa.table({"id": list(range(len(RELATIONS))), "name": RELATIONS,
                                  "canonical_id": list(range(len(RELATIONS))),
                                  "canonical_name": RELATIONS},
                                 schema=TABLE_SCHEMAS["relation_map"]),
        "triples": pa.table({c: [t[i] for t in triples] for i, c in enumerate("sro")},
                            schema=TABLE_SCHEMAS["triples"]),
    }
    root.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, table in tables.items():
        write_table(name, table, root / f"{name}.parquet")
        out[name] = str(root / f"{name}.parquet")
    return out


CONFIG = {"relation_knowledge": {"min_support": 2, "functional_tolerance": 0.05,
                                 "functional_min_subjects": 5, "exclusive_tolerance": 0.05,
                                 "exclusive_min_support": 20}}


def fitted_store(root: Path, triples, *, dev: bool = True, dev_paths: bool = True,
                 tables: dict | None = None, files: dict | None = None) -> tuple[Path, dict]:
    """Fit the stage (no encoder: the lexicon predicts) and publish a store with its artefact
    (and more ``tables`` and ``files``: name -> path, as ``Store.publish`` takes them);
    ``dev_paths`` false: the dev questions give their answers only."""
    inputs = write_tables(root / "tables", triples)
    write_questions(root / "train.jsonl", TRAIN_PEOPLE, triples)
    write_questions(root / "dev.jsonl", DEV_PEOPLE, triples, paths=dev_paths)
    cfg = {"relation_knowledge": {**CONFIG["relation_knowledge"],
                                  "questions": str(root / "train.jsonl"),
                                  "dev_questions": str(root / "dev.jsonl") if dev else None}}
    result = fit.run(cfg, inputs, str(root / "stage"))
    artefact = Path(result["outputs"]["relknow"])
    store = Store(root / "store")
    store.publish("toy", {**{t: Path(p) for t, p in inputs.items()}, **(tables or {})},
                  extra_files={**{f"models/relknow/{f.name}": f for f in artefact.iterdir()},
                               **(files or {})},
                  info={"config": cfg, "report": {"stages": {"relation_knowledge":
                                                             result["report"]}}})
    return root / "store", result["report"]

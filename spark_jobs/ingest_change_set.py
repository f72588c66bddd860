"""The change set of an ingest against the previous build's tables, as SQL on the build's
engine: what a refresh's later stages recompute from."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lokg.common.stage import previous_inputs
from lokg.spark_jobs.engine import Engine

#: Part of the change set → its columns (strings). ``changed_entities``: kept keys whose name,
#: aliases, description or attributes changed; ``touched_relations``: those of changed triples.
CHANGE_SET_PARTS = {"added_triples": ("s", "r", "o"), "removed_triples": ("s", "r", "o"),
                    "added_entities": ("key",), "removed_entities": ("key",),
                    "changed_entities": ("key",), "touched_relations": ("name",)}
_LITERALS = "key, name, aliases, description, attributes"
_TABLES = ("entities", "relations", "triples")


def _keyed(side: str) -> str:
    """Triples of id tables as (s key, relation name, o key): comparable across builds."""
    return f"""SELECT es.key AS s, r.name AS r, eo.key AS o FROM {side}_triples t
        JOIN {side}_relations r ON t.r = r.id JOIN {side}_entities es ON t.s = es.id
        JOIN {side}_entities eo ON t.o = eo.id"""


_PARTS = {
    "added_triples": "SELECT * FROM now_graph EXCEPT SELECT * FROM then_graph",
    "removed_triples": "SELECT * FROM then_graph EXCEPT SELECT * FROM now_graph",
    "added_entities": "SELECT key FROM now_entities EXCEPT SELECT key FROM then_entities",
    "removed_entities": "SELECT key FROM then_entities EXCEPT SELECT key FROM now_entities",
    "changed_entities": f"""SELECT key FROM (SELECT {_LITERALS} FROM now_entities
        EXCEPT SELECT {_LITERALS} FROM then_entities) WHERE key IN
        (SELECT key FROM then_entities)""",
    "touched_relations": """SELECT DISTINCT r AS name FROM (SELECT r FROM cs_added_triples
        UNION ALL SELECT r FROM cs_removed_triples)""",
}


def change_set(engine: Engine, inputs: dict, out: Path) -> dict | None:
    """The change set of this ingest (tables just written under ``out``) against the previous
    build's (``previous:`` inputs of a refresh): differences both ways of keyed triples and of
    entity keys, written as ``CHANGE_SET_PARTS`` under ``out/change_set``; its counts, or None
    (and empty parts) in a full build."""
    previous = previous_inputs(inputs, *_TABLES)
    if previous is None:
        write_empty_change_set(out / "change_set")
        return None
    for table in _TABLES:
        engine.register(f"now_{table}", out / f"{table}.parquet")
        engine.register(f"then_{table}", previous[table])
    for side in ("now", "then"):
        engine.view(f"{side}_graph", _keyed(side), materialise=True)
    root = out / "change_set"
    shutil.rmtree(root, ignore_errors=True)
    counts = {}
    for part, sql in _PARTS.items():
        engine.write(sql, root / part, order_by=list(CHANGE_SET_PARTS[part]))
        engine.register(f"cs_{part}", root / part)
        counts[part] = int(engine.fetch(f"SELECT count(*) AS n FROM cs_{part}")
                           .column("n")[0].as_py())
    return counts


def write_empty_change_set(root: Path) -> None:
    """A change set with no rows (a full build, or a reused ingest: nothing changed)."""
    shutil.rmtree(root, ignore_errors=True)
    for part, columns in CHANGE_SET_PARTS.items():
        (root / part).mkdir(parents=True)
        pq.write_table(pa.table({c: pa.array([], pa.string()) for c in columns}),
                       root / part / "part-00000.parquet")

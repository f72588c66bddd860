"""The names a store's tables give entities and relations, read once: what the
relation_knowledge stage fits questions against and what evaluation maps gold relation paths
with (the same ``relation_map``, so both read a hop alike)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from lokg.runtime.contract import read_table
from lokg.runtime.relknow import INVERSE_PREFIX, hop_id, split_hop


class StoreNames:
    """Entity keys, names and aliases, relation ids and canonical relation names of the tables
    ``entities``, ``relations`` and ``relation_map`` (table name → path)."""

    def __init__(self, tables: Mapping[str, str]):
        ent = read_table(Path(tables["entities"]), columns=["id", "key", "name", "aliases"])
        self.key_to_id = dict(zip(ent.column("key").to_pylist(), ent.column("id").to_pylist()))
        self.names = ent.column("name").to_pylist()
        self.keys = ent.column("key").to_pylist()
        self._aliases = ent.column("aliases")
        rel = read_table(Path(tables["relations"]), "relations")
        self.relation_ids = dict(zip(rel.column("name").to_pylist(), rel.column("id").to_pylist()))
        self.relation_names = {i: n for n, i in self.relation_ids.items()}
        rmap = read_table(Path(tables["relation_map"]), "relation_map")
        self.canonical = dict(zip(rmap.column("name").to_pylist(),
                                  rmap.column("canonical_name").to_pylist()))

    def canonical_hop(self, hop: str) -> str | None:
        """A gold hop (``rel`` or ``~rel``) with its relation's canonical name (None: unknown)."""
        relation, inverse = split_hop(hop)
        name = self.canonical.get(relation)
        return None if name is None else INVERSE_PREFIX * inverse + name

    def hop(self, name: str) -> int:
        return hop_id(name, self.relation_ids.__getitem__, len(self.relation_ids))

    def forms(self, entity: int) -> list[str]:
        """The names a question may call an entity by: its name, key and aliases."""
        return [self.names[entity], self.keys[entity], *(self._aliases[entity].as_py() or [])]

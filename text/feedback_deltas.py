"""Persisted feedback deltas: the triples and aliases one refresh adds, what became of each
sub-question it enriched, and every delta consolidated into the dump ingest reads."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lokg.runtime.feedback import now
from lokg.text.feedback_questions import SubQuestion

DELTA_SCHEMA = pa.schema([
    ("s_key", pa.string()), ("relation", pa.string()), ("o_key", pa.string()),
    ("s_name", pa.string()), ("o_name", pa.string()), ("phrase", pa.string()),
    ("chunk_id", pa.string()), ("sentence_id", pa.string()), ("sentence", pa.string()),
    ("feedback_ids", pa.list_(pa.string()))])
SOURCE_SCHEMA = pa.schema([
    ("s_key", pa.string()), ("relation", pa.string()), ("o_key", pa.string()),
    ("chunk_id", pa.string()), ("sentence_id", pa.string()), ("delta_id", pa.string()),
    ("feedback_id", pa.string())])


def deltas_dir(store_root: str | Path) -> Path:
    """Where a store's deltas persist: beside ``builds/`` and the log, never inside a build."""
    return Path(store_root) / "feedback" / "deltas"


@dataclass
class Delta:
    """The triples one refresh adds, and what became of each sub-question it enriched."""

    rows: list[dict] = field(default_factory=list)
    answered: dict[str, list[str]] = field(default_factory=dict)  # key -> feedback ids
    duplicates: int = 0
    # entity key -> {"name", "aliases"}: names questions wrote for the entity (aliases())
    aliases: dict[str, dict] = field(default_factory=dict)


@dataclass
class Tried:
    """What the latest earlier delta that enriched a sub-question made of it."""

    answered: bool
    fingerprint: str
    depth: int | None  # passages tried down to this rank (None: a delta before depths)
    from_build: str
    written: str  # when the delta was persisted (the log's time format)

    def asked_after(self, sq: SubQuestion) -> bool:
        """Whether a record of a later build than the one enriched from asked ``sq`` after the
        delta was written: its question still found something missing with the delta in."""
        return any(t > self.written and b != self.from_build for t, b in sq.asked)


def earlier(root: Path, own_id: str | None) -> dict[str, Tried]:
    """Sub-question key -> what the latest earlier delta enriching it made of it."""
    metas = [json.loads(m.read_text(encoding="utf-8"))
             for m in (sorted(root.glob("*.json")) if root.is_dir() else ()) if m.stem != own_id]
    state: dict[str, Tried] = {}
    for data in sorted(metas, key=lambda d: d.get("written", "")):
        depth = data.get("depth", {})
        for key in (*data["answered"], *data["found_nothing"]):
            state[key] = Tried(key in data["answered"], data["fingerprint"], depth.get(key),
                               data.get("from_build", ""), data.get("written", "~"))
    return state


def persist(root: Path, delta_id: str, delta: Delta, tried: list[SubQuestion],
            meta: dict, k: int) -> None:
    """``<id>.parquet`` then ``<id>.json`` (written last: a delta without it is not one), with
    how deep each sub-question's passages were tried and when."""
    root.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(delta.rows, schema=DELTA_SCHEMA),
                   root / f"{delta_id}.parquet")
    record = {**meta, "delta_id": delta_id, "triples": len(delta.rows), "aliases": delta.aliases,
              "answered": sorted(delta.answered),
              "found_nothing": sorted(sq.key for sq in tried if sq.key not in delta.answered),
              "feedback_ids": {sq.key: sq.feedback_ids for sq in tried},
              "depth": {sq.key: sq.skip + k for sq in tried}, "written": now()}
    tmp = root / f".{delta_id}.json.tmp"
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(root / f"{delta_id}.json")


def consolidated(root: Path, out: Path) -> dict:
    """Every persisted delta as one dump ingest reads (``triples.tsv``, ``entities.jsonl``)
    and the provenance ``triple_context`` maps onto the graph (``sources.parquet``)."""
    out.mkdir(parents=True, exist_ok=True)
    ids = sorted(p.stem for p in root.glob("*.json")) if root.is_dir() else []
    sources, lines, names = {c: [] for c in SOURCE_SCHEMA.names}, {}, {}
    aliases: dict[str, list[str]] = {}
    for delta_id in ids:
        for key, entry in json.loads((root / f"{delta_id}.json").read_text(
                encoding="utf-8")).get("aliases", {}).items():
            names.setdefault(key, entry["name"])
            aliases.setdefault(key, [])
            aliases[key] += [a for a in entry["aliases"] if a not in aliases[key]]
        for row in pq.read_table(root / f"{delta_id}.parquet").to_pylist():
            triple = (row["s_key"], row["relation"], row["o_key"])
            lines[triple] = f"{triple[0]}\t{triple[1]}\t{triple[2]}\n"
            names.setdefault(row["s_key"], row["s_name"])
            names.setdefault(row["o_key"], row["o_name"])
            for feedback_id in row["feedback_ids"]:
                for column, value in zip(SOURCE_SCHEMA.names, (*triple, row["chunk_id"],
                                         row["sentence_id"], delta_id, feedback_id)):
                    sources[column].append(value)
    (out / "triples.tsv").write_text("".join(lines[t] for t in sorted(lines)), encoding="utf-8")
    (out / "entities.jsonl").write_text("".join(
        json.dumps({"key": k, "name": names[k], **({"aliases": aliases[k]} if k in aliases
                                                   else {})}, ensure_ascii=False) + "\n"
        for k in sorted(names)), encoding="utf-8")
    pq.write_table(pa.table(sources, schema=SOURCE_SCHEMA), out / "sources.parquet")
    return {"deltas": len(ids), "delta_triples": len(lines),
            "delta_aliases": sum(map(len, aliases.values()))}


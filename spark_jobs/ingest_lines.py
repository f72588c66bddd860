"""A refresh's ingest without Spark: every line of the dump hashed, only the lines
the previous build never saw parsed, and ingest's tables derived on the driver.

Every build whose dump the line parsers of ``spark_jobs.formats`` read (``LINE_PARSERS``: the
tab- and ``|``-separated triple files and FB15k-237's names; plain or ``.gz``) keeps its
**line store**, the ``dump_lines`` output of ingest: one row per distinct line (parser, 64-bit
hash of its bytes) with what the parser made of it (kind, s, p, o, reason, text). A line's
parse depends on its bytes and its parser only, so a refresh takes the rows of the lines it
finds in the previous store and parses the others (``formats.parse_line``); file and line
number come from where the line is now, so removed and moved lines need nothing.

The tables are then derived from all the lines' rows with Arrow, by the rules of the Spark
ingest (``spark_jobs.ingest``'s docstring) — edges, type assertions, names and malformed lines
from these parsers; aliases, descriptions and attributes too from the N-Triples rows of
``spark_jobs.ingest_nt``, which derives its tables here (never records of an entities file).
tests/test_ingest_lines.py and tests/test_ingest_nt.py hold the result equal, row for row, to a
Spark ingest of the same dump. Two hashes of different lines colliding (odds about 2⁻⁶⁴ per
pair) would give one the other's parse.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lokg.common.stage import StageError
from lokg.spark_jobs import formats as fm

#: The line store's columns (``dump_lines``): a parsed row per distinct (parser, hash).
STORE_SCHEMA = pa.schema([("parser", pa.string()), ("hash", pa.int64()), ("kind", pa.string()),
                          ("s", pa.string()), ("p", pa.string()), ("o", pa.string()),
                          ("reason", pa.string()), ("text", pa.string())])
_PARSED = STORE_SCHEMA.names[2:]
#: The previous build's tables a driver ingest writes like (their schemas: Spark's).
TABLES = ("entities", "relations", "triples", "quarantine", "type_assertions")
_READABLE = ("", ".gz")  # file suffixes read here; others (.bz2 …) only Spark's codecs read


def unsupported(plan: fm.Plan) -> str | None:
    """Why the line path cannot read ``plan`` (a parser or a compression it lacks), or None."""
    for source in plan.sources:
        if source.parser not in fm.LINE_PARSERS:
            return f"parser {source.parser} has no line rules on the driver"
        for path in source.files:
            if path.suffix not in _READABLE and path.suffix in (".bz2", ".deflate", ".lz4",
                                                                ".snappy", ".zst", ".zstd"):
                return f"{path.name}: compression read by Spark only"
    return None


class UnreadableLines(StageError):
    """A dump file the driver cannot read (a truncated ``.gz``): the Spark ingest reports it."""


def file_lines(path: Path) -> list[bytes]:
    """A file's lines as Spark's text reader splits them (``\\n``, ``\\r\\n`` or ``\\r``),
    gzip read through."""
    try:
        data = path.read_bytes()
        return (gzip.decompress(data) if path.suffix == ".gz" else data).splitlines()
    except (OSError, EOFError, zlib.error) as exc:
        raise UnreadableLines(f"{path.name}: {exc}") from None


def line_hashes(lines: list[bytes]) -> np.ndarray:
    """64-bit hash of each line's bytes."""
    from pandas.util import hash_array

    if not lines:
        return np.zeros(0, np.int64)
    return hash_array(np.array(lines, dtype=object)).view(np.int64)


def read_store(path: Path | None) -> pa.Table:
    """The previous build's line store, or an empty one."""
    if path is None or not any(path.glob("*.parquet")):
        return STORE_SCHEMA.empty_table()
    return pq.read_table(path, schema=STORE_SCHEMA)


def write_store(store: pa.Table, path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(store.cast(STORE_SCHEMA), path / "part-00000.parquet")


class ParsedLines:
    """The rows of every line of a plan (file_idx, line, graph and ``_PARSED``), the store of
    their distinct lines, and how many distinct lines had to be parsed."""

    def __init__(self, plan: fm.Plan, previous: pa.Table):
        files = [(source, path) for source in plan.sources for path in source.files]
        tables, stores, self.parsed = [], [], 0
        for parser in dict.fromkeys(source.parser for source, _ in files):
            mine = [(i, source.graph, file_lines(path))
                    for i, (source, path) in enumerate(files) if source.parser == parser]
            lines = [line for _, _, lines in mine for line in lines]
            known = previous.filter(pc.equal(previous["parser"], parser))
            rows, kept = self._rows(parser, lines, known)
            where = np.concatenate([np.full(len(lines), i, np.int32) for i, _, lines in mine]
                                   or [np.zeros(0, np.int32)])
            tables.append(pa.table({
                "file_idx": where,
                "line": np.concatenate([np.arange(1, len(lines) + 1) for *_, lines in mine]
                                       or [np.zeros(0, np.int64)]).astype(np.int64),
                "graph": np.concatenate([np.full(len(lines), graph) for _, graph, lines in mine]
                                        or [np.zeros(0, bool)]),
                **{c: rows[c] for c in _PARSED}}))
            stores.append(kept)
        self.rows = pa.concat_tables(tables) if tables else None
        self.store = pa.concat_tables(stores) if stores else STORE_SCHEMA.empty_table()
        self.lines = self.rows.num_rows if self.rows is not None else 0

    @property
    def counts(self) -> dict[tuple[str, str | None, int], int]:
        return line_counts(self.rows)

    @property
    def malformed(self) -> pa.Table:
        return self.rows  # ``quarantine`` keeps the malformed ones

    def _rows(self, parser: str, lines: list[bytes], known: pa.Table
              ) -> tuple[pa.Table, pa.Table]:
        """The parsed rows of ``lines`` (known ones taken from the store, the others parsed)
        and the store rows they use."""
        hashes = line_hashes(lines)
        found = pc.index_in(pa.array(hashes), value_set=known["hash"])
        missing = np.flatnonzero(pc.is_null(found).to_numpy(zero_copy_only=False))
        new_hashes, first = np.unique(hashes[missing], return_index=True)
        self.parsed += len(new_hashes)
        new = [fm.parse_line(parser, lines[missing[i]]) for i in first]
        fresh = pa.table({"parser": pa.array([parser] * len(new), pa.string()),
                          "hash": pa.array(new_hashes, pa.int64()),
                          **{c: pa.array([row[j] for row in new], pa.string())
                             for j, c in enumerate(_PARSED)}}, schema=STORE_SCHEMA)
        known = pa.concat_tables([known, fresh])
        index = pc.index_in(pa.array(hashes), value_set=known["hash"])
        used = known.take(pc.unique(index))
        return known.take(index), used


# --------------------------------------------------------------------------------------------
# the tables, derived from the lines' rows


def line_counts(rows: pa.Table) -> dict[tuple[str, str | None, int], int]:
    """Rows counted by (kind, reason, escaped), as the Spark ingest counts its parse (these
    parsers never leave escapes)."""
    counted = rows.group_by(["kind", "reason"]).aggregate([("line", "count")])
    return {(kind, reason, fm.ESC_NONE): n for kind, reason, n in zip(
        *(counted[c].to_pylist() for c in ("kind", "reason", "line_count")))}


def quarantine(rows: pa.Table, plan: fm.Plan, limit: int) -> pa.Table:
    """The malformed lines by (file, line), their text cut to ``limit`` characters."""
    bad = rows.filter(pc.equal(rows["kind"], fm.MALFORMED)).sort_by([("file_idx", "ascending"),
                                                                       ("line", "ascending")])
    files = pa.array([str(f) for f in plan.files], pa.string())
    return pa.table({"file": files.take(bad["file_idx"]), "line": bad["line"],
                     "reason": bad["reason"], "text": pc.utf8_slice_codeunits(bad["text"], 0, limit)})


def _graph(rows: pa.Table, kind: str) -> pa.Table:
    return rows.filter(pc.and_(pc.equal(rows["kind"], kind), rows["graph"]))


#: Kinds of lines whose subject is an entity though they state no edge.
SUBJECT_KINDS = (*fm.LITERAL_KINDS, fm.FILTERED, fm.TYPE)


def graph_tables(rows: pa.Table) -> dict[str, pa.Table]:
    """Entity keys (sorted: id = rank), relation names (sorted), and the distinct triples and
    type assertions in those ids; entities are the ends of edges and the subjects of literal
    facts and types."""
    edges, types = _graph(rows, fm.EDGE), _graph(rows, fm.TYPE)
    subjects = rows.filter(pc.and_(pc.is_in(rows["kind"], pa.array(SUBJECT_KINDS)),
                                   rows["graph"]))["s"]
    keys = pc.unique(pa.chunked_array([*edges["s"].cast(pa.string()).chunks,
                                       *edges["o"].cast(pa.string()).chunks,
                                       *subjects.cast(pa.string()).chunks], pa.string()))
    keys = keys.take(pc.sort_indices(keys))
    names = pc.unique(edges["p"].combine_chunks() if edges.num_rows else pa.array([], pa.string()))
    names = names.take(pc.sort_indices(names))
    triples = pa.table({"s": pc.index_in(edges["s"], value_set=keys),
                        "r": pc.index_in(edges["p"], value_set=names),
                        "o": pc.index_in(edges["o"], value_set=keys)}).cast(
        pa.schema([(c, pa.int64()) for c in "sro"]))
    asserted = pa.table({"id": pc.index_in(types["s"], value_set=keys),
                         "type": types["o"]}).cast(pa.schema([("id", pa.int64()),
                                                              ("type", pa.string())]))
    return {"keys": keys, "relation_names": names, "edge_facts": edges.num_rows,
            "triples": _distinct(triples), "type_assertions": _distinct(asserted)}


def _distinct(table: pa.Table) -> pa.Table:
    columns = table.column_names
    return table.group_by(columns).aggregate([]).select(columns).sort_by(
        [(c, "ascending") for c in columns])


_ATTRIBUTE = pa.struct([("key", pa.string()), ("value", pa.string())])


def entities(rows: pa.Table, keys: pa.Array, name_rule: str) -> tuple[pa.Table, int]:
    """The entities in id order — name and description the first of the key by (file, line),
    else the fallback of ``name_rule`` and null; aliases and attributes in first-seen order,
    de-duplicated — and how many have a name of their own. Name, alias and description
    literals that are blank once trimmed are not used."""
    facts = _literals(rows)
    own = _first(facts, fm.NAME, keys)
    fallback = keys if name_rule == "key" else pc.replace_substring(keys, "_", " ")
    table = pa.table({
        "id": pa.array(np.arange(len(keys)), pa.int64()), "key": keys,
        "name": pc.coalesce(own, fallback),
        "aliases": _in_order(facts, fm.ALIAS, keys, {"o": None}),
        "description": _first(facts, fm.DESCRIPTION, keys),
        "types": _empty_lists(len(keys), pa.string()),
        "attributes": _in_order(facts, fm.ATTRIBUTE, keys, {"p": "key", "o": "value"}),
    })
    return table, len(keys) - own.null_count


def _literals(rows: pa.Table) -> pa.Table:
    """The literal facts that name or describe a key, in (file, line) order."""
    facts = rows.filter(pc.is_in(rows["kind"], pa.array(fm.LITERAL_KINDS)))
    facts = pa.table({"file_idx": facts["file_idx"], "line": facts["line"],
                      **{c: facts[c].cast(pa.string()) for c in ("kind", "s", "p", "o")}})
    blank = pc.and_(pc.not_equal(facts["kind"], fm.ATTRIBUTE),
                    pc.equal(pc.utf8_trim(facts["o"], " "), ""))  # Spark's trim: spaces
    kept = pc.and_(pc.is_valid(facts["o"]), pc.invert(blank))
    return facts.filter(kept).sort_by([("file_idx", "ascending"), ("line", "ascending")])


def _first(facts: pa.Table, kind: str, keys: pa.Array) -> pa.Array:
    """Per key, the text of its first ``kind`` fact (null: none)."""
    mine = facts.filter(pc.equal(facts["kind"], kind))
    if not mine.num_rows:
        return pa.nulls(len(keys), pa.string())
    return mine["o"].combine_chunks().take(pc.index_in(keys, value_set=mine["s"]))


def _in_order(facts: pa.Table, kind: str, keys: pa.Array, fields: dict[str, str | None]
              ) -> pa.Array:
    """Per key, the distinct values of its ``kind`` facts in first-seen order ([]: none): the
    column of the one field named None, else structs of the ``fields`` (column → name)."""
    mine = facts.filter(pc.equal(facts["kind"], kind))  # in (file, line) order
    mine = mine.append_column("at", pa.array(np.arange(mine.num_rows), pa.int64()))
    columns = list(fields)
    value_type = pa.string() if fields[columns[0]] is None else _ATTRIBUTE
    if not mine.num_rows:
        return _empty_lists(len(keys), value_type)
    firsts = mine.group_by(["s", *columns], use_threads=False).aggregate([("at", "min")])
    firsts = firsts.append_column("id", pc.index_in(firsts["s"], value_set=keys)).filter(
        pc.is_valid(pc.field("id"))).sort_by([("id", "ascending"), ("at_min", "ascending")])
    values = (firsts[columns[0]] if fields[columns[0]] is None else pc.make_struct(
        *(firsts[c] for c in columns), field_names=[fields[c] for c in columns]))
    sizes = np.bincount(firsts["id"].to_numpy(), minlength=len(keys))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.concat_arrays(
        values.chunks) if values.num_chunks else pa.array([], value_type)).cast(
        pa.list_(value_type))


def _empty_lists(n: int, value_type: pa.DataType) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)),
                                    pa.array([], value_type))

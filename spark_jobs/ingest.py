"""Stage ``ingest`` (Spark, DESIGN §2.1): a triple dump → integer-id graph tables.

``run(config, inputs, out_dir)`` reads ``inputs["dump"]`` in the format of ``config["ingest"]``
(see ``spark_jobs.formats``) and writes, as Parquet dataset directories under ``out_dir``:

* ``entities.parquet``   id, key, name, aliases, description, types (empty here), attributes
* ``relations.parquet``  id, name
* ``triples.parquet``    s, r, o — de-duplicated, sorted
* ``quarantine.parquet`` file, line, reason, text — every malformed line, never dropped
* ``type_assertions.parquet`` id, type — explicit type facts (``type.object.type``, ``rdf:type``)
* ``change_set/``        what changed since the previous build (a refresh, DESIGN §9): one
  dataset per part of ``CHANGE_SET_PARTS`` — triples by entity key and relation name (ids
  shift when entities come and go), entities by key; empty in a full build (report: null)
* ``dump_lines/``        the line store of a dump the driver's line rules read (TSV, FB15k-237):
  what a refresh's ingest takes its unchanged lines' parse from (``spark_jobs.ingest_lines``)

Three paths make the same tables (the report's ``refresh`` says which ran, and why not the
driver): an N-Triples dump up to ``ingest.driver_max_nt_mb`` is parsed on the driver,
vectorised (``spark_jobs.ingest_nt``), in every build; a line-format dump's refresh that changed
few lines derives them on the driver from its line store; everything else runs in Spark.

Rules:

* Entities are every subject/object of a graph triple, every subject of a literal fact and every
  subject of a type assertion; objects of type assertions are not entities (unless they are
  also subjects or objects elsewhere). Names/aliases/descriptions from ``entity2name.txt`` or
  the entities file never create entities.
* Ids are dense and deterministic: entities numbered 0..N-1 in key order, relations in name
  order (Spark and Python order strings alike: by code point).
* ``name`` is the first name literal by (file, line) — dump files first, entities file last;
  without one, the key (PathQuestion: the key with ``_`` → space), counted in ``names_missing``.
  ``aliases`` keep first-seen order, de-duplicated; ``attributes`` likewise.
* Line numbers in the quarantine are exact, 1-based within each file (gzip included): each line
  is numbered from the split it was read in (``_metadata.file_block_start``) and its order within
  that split, then split sizes are summed per file on the driver.
* More malformed lines than ``ingest.max_malformed_share`` of the non-blank, non-comment lines
  fails the stage with ``IngestError`` — after the quarantine is written; the driver keeps it
  at ``staging/<build_id>/failed/ingest/quarantine.parquet``, the path the message names.
* A line that is not valid UTF-8 is malformed (reason ``formats.R_INVALID_UTF8``), in every
  format; the quarantine keeps its text with U+FFFD for the bad bytes, so it always reads back.
* A dump file Spark cannot read (a truncated ``.gz``) fails the stage with ``IngestError``
  naming the file and the first cause.
"""

from __future__ import annotations

if __name__ == "__main__":  # spark-submit spark_jobs/ingest.py: import from the repository root
    import os as _os
    import sys as _sys

    _here = _os.path.dirname(_os.path.abspath(__file__))
    _sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
    _sys.path.insert(0, _os.path.dirname(_here))

import re
import shutil
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from py4j.protocol import Py4JJavaError
from pyspark import StorageLevel
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from lokg.pipeline.stage import PARTIAL_MAX_SHARE, Laps, StageError, previous_inputs
from lokg.runtime.contract import TABLE_SCHEMAS, read_table, write_table
from lokg.spark_jobs import formats as fm
from lokg.spark_jobs import ingest_lines as il
from lokg.spark_jobs import ingest_nt as nt
from lokg.spark_jobs.session import get_spark
from lokg.spark_jobs.settings import IngestSettings
from lokg.text.corpus import build_format

OUTPUTS = ("entities", "relations", "triples", "quarantine", "type_assertions", "change_set",
           "dump_lines")
#: Part of the change set → its columns (strings). ``changed_entities``: kept keys whose name,
#: aliases, description or attributes changed; ``touched_relations``: those of changed triples.
CHANGE_SET_PARTS = {"added_triples": ("s", "r", "o"), "removed_triples": ("s", "r", "o"),
                    "added_entities": ("key",), "removed_entities": ("key",),
                    "changed_entities": ("key",), "touched_relations": ("name",)}
_LITERALS = ("key", "name", "aliases", "description", "attributes")
TEXT_LIMIT = 500  # characters of a malformed line kept in the quarantine
_LOW33 = (1 << 33) - 1  # monotonically_increasing_id = partition << 33 | row within partition
_ATTRIBUTES = "array<struct<key:string,value:string>>"


class IngestError(StageError):
    """The dump cannot be ingested (missing, unreadable format, too many malformed lines)."""


# --------------------------------------------------------------------------------------------
# helpers


class _Cache:
    """DataFrames persisted during one run, released at its end."""

    def __init__(self) -> None:
        self.frames: list[DataFrame] = []

    def __call__(self, df: DataFrame) -> DataFrame:
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self.frames.append(df)
        return df

    def release(self) -> None:
        for df in self.frames:
            df.unpersist()
        self.frames.clear()


def _local_path(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("file", "") else uri


def dense_ids(spark: SparkSession, keys: DataFrame, key: str, cache: _Cache
              ) -> tuple[DataFrame, int]:
    """(key, id) for the distinct keys, id = rank in key order from 0, computed without
    funnelling the data through one partition: sort, number rows within each partition, then
    offset each partition by the sizes of the ones before it."""
    ordered = cache(
        keys.select(key).distinct().orderBy(key)
        .select(key, F.monotonically_increasing_id().alias("_mid"))
    )
    sizes = ordered.groupBy(F.shiftright("_mid", 33).alias("pid")).count().collect()
    offsets, total = [], 0
    for row in sorted(sizes, key=lambda r: r["pid"]):
        offsets.append((int(row["pid"]), total))
        total += int(row["count"])
    off = spark.createDataFrame(offsets, "pid long, base long")
    ids = ordered.join(F.broadcast(off), F.shiftright(ordered["_mid"], 33) == off["pid"]).select(
        F.col(key), (F.col("base") + F.col("_mid").bitwiseAND(F.lit(_LOW33))).alias("id")
    )
    return ids, total


_ENTITY, _RELATION = 0, 1  # tags of the vocabulary's rows


def vocabulary(edges: DataFrame, subjects: DataFrame, cache: _Cache) -> tuple[DataFrame, dict]:
    """The distinct entity keys and relation names, as (tag, name) rows, and their number per
    tag: one aggregation (partial, one exchange of the distinct names) over the cached parse
    instead of a de-duplication of the edges followed by one per vocabulary."""
    vocab = cache(
        edges.select(F.lit(_ENTITY).alias("tag"), F.col("s").alias("name"))
        .unionByName(edges.select(F.lit(_ENTITY).alias("tag"), F.col("o").alias("name")))
        .unionByName(subjects.select(F.lit(_ENTITY).alias("tag"), F.col("s").alias("name")))
        .unionByName(edges.select(F.lit(_RELATION).alias("tag"), F.col("p").alias("name")))
        .distinct()
    )
    sizes = {row["tag"]: row["count"] for row in vocab.groupBy("tag").count().collect()}
    return vocab, sizes


def numbered_on_driver(spark: SparkSession, names: pa.Table) -> DataFrame:
    """(key, id) of the entity rows of ``names``, id = rank in key order: sorted by Arrow on
    the driver (byte order of UTF-8 = code-point order = Spark's string order), as relations
    are, instead of a sampled range shuffle, a sort and a count per partition in Spark."""
    keys = names.filter(pc.equal(names["tag"], _ENTITY)).column("name")
    keys = keys.take(pc.sort_indices(keys))
    table = pa.table({"key": keys.combine_chunks(), "id": pa.array(range(len(keys)), pa.int64())})
    return spark.createDataFrame(table)


def entity_and_relation_ids(spark: SparkSession, edges: DataFrame, subjects: DataFrame,
                            driver_max: int, cache: _Cache) -> tuple[DataFrame, int, list[str]]:
    """(key, id) of the entities, their number and the relation names in id order. Up to
    ``driver_max`` entities the keys are numbered on the driver; above, by ``dense_ids``."""
    vocab, sizes = vocabulary(edges, subjects, cache)
    n_entities = sizes.get(_ENTITY, 0)
    if n_entities <= driver_max:
        names = vocab.toArrow()
        ent_ids = numbered_on_driver(spark, names)
    else:
        names = vocab.filter(F.col("tag") == _RELATION).toArrow()
        keys = vocab.filter(F.col("tag") == _ENTITY).select(F.col("name").alias("key"))
        ent_ids = cache(dense_ids(spark, keys, "key", cache)[0])
    rel_names = sorted(names.filter(pc.equal(names["tag"], _RELATION)).column("name").to_pylist())
    return ent_ids, n_entities, rel_names


_FAILED_READ = re.compile(r"\[FAILED_READ_FILE\.\w+\] Encountered error while reading file "
                          r"(\S+?)\.?\s")
_CAUSE = re.compile(r"Caused by: ([\w.$]+(?:: [^\n]*)?)")


def _unreadable_file(exc: Exception) -> str | None:
    """The dump file Spark failed to read and why, as ``<file>: <first cause>`` (a truncated
    or corrupt .gz, an I/O error), else None. Spark reports it as a Java exception whose text
    holds a 100-line stack; the user needs the file and the first cause only."""
    text = str(exc)
    found = _FAILED_READ.search(text)
    if found is None:
        return None
    cause = _CAUSE.search(text)
    why = cause.group(1).strip() if cause else "read error"
    return f"{_local_path(found.group(1))}: {why} (truncated or corrupt file?)"


def _write(df: DataFrame, path: Path) -> None:
    df.write.mode("overwrite").parquet(str(path))


def keyed_graph(entities: DataFrame, relations: DataFrame, triples: DataFrame) -> DataFrame:
    """Triples of id tables as (s key, relation name, o key): comparable across builds."""
    keys = entities.select("id", "key")
    return (triples.join(F.broadcast(relations.select(F.col("id").alias("r"), "name")), "r")
            .join(keys.select(F.col("id").alias("s"), F.col("key").alias("s_key")), "s")
            .join(keys.select(F.col("id").alias("o"), F.col("key").alias("o_key")), "o")
            .select(F.col("s_key").alias("s"), F.col("name").alias("r"), F.col("o_key").alias("o")))


def change_set(spark: SparkSession, inputs: dict, out: Path, small: bool) -> dict | None:
    """The change set of this ingest (tables just written under ``out``) against the previous
    build's (``previous:`` inputs of a refresh): anti-joins both ways on keyed triples and on
    entity keys, written as ``CHANGE_SET_PARTS`` under ``out/change_set``; its counts, or None
    (and empty parts) in a full build. ``small`` (the entities fit ``driver_max_entities``):
    computed with Arrow on the driver, as the ids are — a dozen Spark jobs cost more there."""
    previous = previous_inputs(inputs, "entities", "relations", "triples")
    if previous is None:
        write_empty_change_set(out / "change_set")
        return None
    if small:
        return driver_change_set(previous, out)
    now = {t: spark.read.parquet(str(out / f"{t}.parquet")) for t in ("entities", "relations",
                                                                      "triples")}
    then = {t: spark.read.parquet(str(path)) for t, path in previous.items()}
    graph_now, graph_then = (keyed_graph(**tables) for tables in (now, then))
    lits_now, lits_then = (t["entities"].select(*_LITERALS) for t in (now, then))
    keys_now, keys_then = (t.select("key") for t in (lits_now, lits_then))
    added, removed = (graph_now.join(graph_then, ["s", "r", "o"], "left_anti"),
                      graph_then.join(graph_now, ["s", "r", "o"], "left_anti"))
    parts = {
        "added_triples": added, "removed_triples": removed,
        "added_entities": keys_now.join(keys_then, "key", "left_anti"),
        "removed_entities": keys_then.join(keys_now, "key", "left_anti"),
        "changed_entities": lits_now.exceptAll(lits_then).select("key").join(keys_then, "key"),
        "touched_relations": added.unionByName(removed).select(F.col("r").alias("name"))
        .distinct(),
    }
    counts = {}
    for part, frame in parts.items():
        _write(frame.coalesce(1).sortWithinPartitions(*CHANGE_SET_PARTS[part]),
               out / "change_set" / part)
        counts[part] = spark.read.parquet(str(out / "change_set" / part)).count()
    return counts


def driver_change_set(previous: dict[str, Path], out: Path) -> dict:
    """``change_set`` in Arrow: the same parts, rows and order as the Spark path writes."""
    now, then = ({t: read_table(root[t], t) for t in ("entities", "relations", "triples")}
                 for root in ({t: out / f"{t}.parquet" for t in previous}, previous))
    graph_now, graph_then = _keyed_table(now), _keyed_table(then)
    keys_now, keys_then = now["entities"]["key"], then["entities"]["key"]
    added = graph_now.join(graph_then, ["s", "r", "o"], join_type="left anti")
    removed = graph_then.join(graph_now, ["s", "r", "o"], join_type="left anti")
    parts = {
        "added_triples": added, "removed_triples": removed,
        "added_entities": _keys(keys_now.filter(pc.invert(pc.is_in(keys_now, keys_then)))),
        "removed_entities": _keys(keys_then.filter(pc.invert(pc.is_in(keys_then, keys_now)))),
        "changed_entities": _keys(_changed_keys(now["entities"], then["entities"])),
        "touched_relations": pa.table({"name": pc.unique(pa.chunked_array(
            [*added["r"].chunks, *removed["r"].chunks], pa.string()))}),
    }
    root = out / "change_set"
    shutil.rmtree(root, ignore_errors=True)
    for part, table in parts.items():
        columns = CHANGE_SET_PARTS[part]
        (root / part).mkdir(parents=True)
        pq.write_table(table.select(list(columns)).sort_by([(c, "ascending") for c in columns]),
                       root / part / "part-00000.parquet")
    return {part: table.num_rows for part, table in parts.items()}


def _keyed_table(tables: dict[str, pa.Table]) -> pa.Table:
    """``keyed_graph`` of Arrow tables: ids are the rows of the tables in id order (dense)."""
    keys, names = (tables[t][c].take(pc.sort_indices(tables[t]["id"]))
                   for t, c in (("entities", "key"), ("relations", "name")))
    triples = tables["triples"]
    return pa.table({"s": keys.take(triples["s"]), "r": names.take(triples["r"]),
                     "o": keys.take(triples["o"])})


def _keys(keys) -> pa.Table:
    return pa.table({"key": pa.array(keys, pa.string()) if isinstance(keys, list) else keys})


def _changed_keys(now: pa.Table, then: pa.Table) -> list[str]:
    """Keys in both tables whose name, aliases, description or attributes differ."""
    columns = _LITERALS[1:]
    before = dict(zip(then["key"].to_pylist(), zip(*(then[c].to_pylist() for c in columns))))
    return [key for key, *row in zip(now["key"].to_pylist(), *(now[c].to_pylist()
                                                               for c in columns))
            if key in before and tuple(row) != before[key]]


def write_empty_change_set(root: Path) -> None:
    """A change set with no rows (a full build, or a reused ingest: nothing changed)."""
    shutil.rmtree(root, ignore_errors=True)
    for part, columns in CHANGE_SET_PARTS.items():
        (root / part).mkdir(parents=True)
        pq.write_table(pa.table({c: pa.array([], pa.string()) for c in columns}),
                       root / part / "part-00000.parquet")


def on_reuse(out_dir: str, outputs: dict, report: dict) -> dict:
    """A reused ingest (its input and settings unchanged: pipeline.refresh): nothing changed
    since the previous build, whose change set was linked with its outputs."""
    write_empty_change_set(Path(outputs["change_set"]))
    return {**report, "change_set": dict.fromkeys(CHANGE_SET_PARTS, 0)}


def _number_lines(spark: SparkSession, parsed: DataFrame, plan: fm.Plan
                  ) -> tuple[DataFrame, dict[tuple[str, str | None, int], int]]:
    """Exact (file_idx, file, line) for every parsed row; row counts by (kind, reason, escaped)."""
    stats = parsed.groupBy("fp", "bs", "kind", "reason", "escaped").agg(
        F.count("*").alias("n"), F.min("mid").alias("m0")
    ).collect()
    index = {str(f): i for i, f in enumerate(plan.files)}
    blocks: dict[tuple[str, int], list[int]] = {}  # (fp, bs) -> [rows, min mid]
    counts: dict[tuple[str, str | None, int], int] = {}
    for row in stats:
        block = blocks.setdefault((row["fp"], row["bs"]), [0, row["m0"]])
        block[0] += row["n"]
        block[1] = min(block[1], row["m0"])
        group = (row["kind"], row["reason"], row["escaped"])
        counts[group] = counts.get(group, 0) + row["n"]
    by_file: dict[str, list[tuple[int, int, int]]] = {}
    for (fp, bs), (n, m0) in blocks.items():
        by_file.setdefault(fp, []).append((bs, n, m0))
    rows = []
    for fp, parts in by_file.items():
        local = _local_path(fp)
        if local not in index:
            raise IngestError(f"internal: Spark read {fp}, which is not one of {list(index)}")
        before = 0
        for bs, n, m0 in sorted(parts):
            rows.append((fp, bs, index[local], local, before - m0 + 1))
            before += n
    table = spark.createDataFrame(rows, "fp string, bs long, file_idx int, file string, base long")
    numbered = parsed.join(F.broadcast(table), ["fp", "bs"]).withColumn(
        "line", F.col("mid") + F.col("base")
    )
    return numbered, counts


def _literal_facts(numbered: DataFrame, literals_as_edges: bool, records: bool,
                   python: bool) -> DataFrame:
    """(file_idx, line, kind, s, p, o) name/alias/description/attribute facts, text unescaped.

    ``records``: the plan has an entities file; ``python``: some literal has ``\\U`` escapes."""
    cols = ["file_idx", "line", "kind", "s", "p", "o"]
    lits = numbered.filter(F.col("kind").isin(*fm.LITERAL_KINDS)).select(*cols, "escaped")
    facts = fm.unescape_literals(lits, python).select(*cols)
    rec = numbered.filter(F.col("kind") == fm.RECORD)
    from_records = [] if not records else [
        rec.select("file_idx", "line", F.lit(fm.NAME).alias("kind"), "s",
                   F.lit(None).cast("string").alias("p"), "o"),
        rec.select("file_idx", "line", F.lit(fm.DESCRIPTION).alias("kind"), "s",
                   F.lit(None).cast("string").alias("p"), F.col("p").alias("o")),
        rec.select("file_idx", "line", F.lit(fm.ALIAS).alias("kind"), "s",
                   F.lit(None).cast("string").alias("p"), F.explode("extra").alias("o")),
    ]
    for frame in from_records:
        facts = facts.unionByName(frame)
    if literals_as_edges:  # attributes became edges to literal nodes; those nodes get names
        attrs = facts.filter(F.col("kind") == fm.ATTRIBUTE)
        facts = facts.filter(F.col("kind") != fm.ATTRIBUTE).unionByName(
            attrs.select("file_idx", "line", F.lit(fm.NAME).alias("kind"),
                         _literal_key(F.col("o")).alias("s"), F.col("p"), F.col("o"))
        )
    named = F.col("kind").isin(fm.NAME, fm.ALIAS, fm.DESCRIPTION)
    return facts.filter(F.col("o").isNotNull() & ~(named & (F.trim(F.col("o")) == "")))


def _aggregate_literals(facts: DataFrame) -> DataFrame:
    """Per key: first name and description by (file, line); aliases and attributes in
    first-seen order, de-duplicated."""
    kind = F.col("kind")

    def first(k: str):
        return F.min(F.when(kind == k, F.struct("file_idx", "line", "o")))["o"]

    def in_order(k: str, *fields: str):
        ordered = F.struct("file_idx", "line", *fields)
        return F.array_sort(F.collect_list(F.when(kind == k, ordered)))

    return facts.groupBy(F.col("s").alias("key")).agg(
        first(fm.NAME).alias("name"),
        first(fm.DESCRIPTION).alias("description"),
        F.array_distinct(F.transform(in_order(fm.ALIAS, "o"), lambda x: x["o"])).alias("aliases"),
        F.array_distinct(F.transform(
            in_order(fm.ATTRIBUTE, "p", "o"),
            lambda x: F.struct(x["p"].alias("key"), x["o"].alias("value")),
        )).alias("attributes"),
    )


def _literal_key(text):
    """Key of a literal node when ``literals_as_edges`` is set: the quoted text."""
    return F.concat(F.lit('"'), text, F.lit('"'))


def feedback_sources(delta: str | None) -> list[fm.Source]:
    """The feedback deltas' dump (``feedback_enrich``) as two more sources of the plan: its
    triples are graph edges like the dump's, its names come after the dump's (first wins)."""
    if not delta or not (Path(delta) / "triples.tsv").stat().st_size:
        return []
    return [fm.Source("triples_tsv", (Path(delta) / "triples.tsv",), True),
            fm.Source("entities", (Path(delta) / "entities.jsonl",), False)]


def feedback_added(parsed: DataFrame, delta: list[fm.Source]) -> dict:
    """Edges and entities that only the feedback deltas state (the build report's "added by
    feedback"); {} when no delta was read."""
    if not delta:
        return {}
    ours = F.regexp_replace("fp", "^file:(//)?", "") == str(delta[0].files[0].resolve())
    edge = (F.col("kind") == fm.EDGE) & F.col("graph")
    added = parsed.filter(edge & ours).select("s", "p", "o").subtract(
        parsed.filter(edge & ~ours).select("s", "p", "o"))
    known = parsed.filter(F.col("graph") & ~ours).select(F.col("s").alias("key")).union(
        parsed.filter(edge & ~ours).select(F.col("o").alias("key")))
    ends = added.select(F.col("s").alias("key")).union(added.select(F.col("o").alias("key")))
    return {"feedback_edges_added": added.count(),
            "feedback_nodes_added": ends.subtract(known).count()}


# --------------------------------------------------------------------------------------------
# the stage


class _LineCounts:
    """The parsed lines counted by kind, the malformed ones by reason, and whether some
    literal needs the Python unescape (``\\U`` escapes)."""

    def __init__(self, counts: dict):
        self.kinds: dict[str, int] = {}
        self.reasons: dict[str, int] = {}
        self.python = False
        for (kind, reason, esc), n in counts.items():
            self.python = self.python or esc == fm.ESC_PYTHON
            self.kinds[kind] = self.kinds.get(kind, 0) + n
            if kind == fm.MALFORMED:
                self.reasons[reason] = self.reasons.get(reason, 0) + n
        self.lines = sum(n for k, n in self.kinds.items() if k != fm.SKIP)
        self.malformed = self.kinds.get(fm.MALFORMED, 0)
        self.share = self.malformed / self.lines if self.lines else 0.0


def _source_plan(inputs: dict, cfg: dict) -> tuple[str | Path, dict, fm.Plan]:
    """What to read: the dump (or, for documents, what triple_extract made of them) and its
    resolved format plan."""
    dump = inputs.get("dump")
    if not dump:
        raise IngestError("stage ingest needs a dump: inputs['dump'] (lokg build --dump PATH)")
    if build_format(cfg["format"], Path(dump)) == "docs":  # read what triple_extract made
        extracted = Path(inputs.get("extracted") or "")
        if not (extracted / "triples.tsv").is_file():
            raise IngestError(f"ingest of documents {dump} needs stage triple_extract first")
        dump, cfg = extracted / "triples.tsv", {**cfg, "format": "tsv",
                                                 "entities_file": extracted / "entities.jsonl"}
    try:
        return dump, cfg, fm.resolve(dump, cfg["format"] or "auto", cfg.get("entities_file"))
    except fm.FormatError as exc:
        raise IngestError(str(exc)) from None


def run(config: dict, inputs: dict, out_dir: str) -> dict:
    started = time.perf_counter()
    dump, cfg, plan = _source_plan(inputs, IngestSettings.of(config, IngestError))
    delta = feedback_sources(inputs.get("feedback_delta"))
    plan.sources.extend(delta)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / f"{name}.parquet" for name in OUTPUTS}
    paths["change_set"] = out / "change_set"
    lap = Laps()
    lines, why = _parsed_lines(plan, inputs, cfg)
    lap("dump_lines")
    if why is None:
        stats = _driver_ingest(lines, inputs, cfg, dump, plan, paths, lap)
    else:
        stats = _spark_ingest(config, inputs, cfg, dump, plan, delta, paths, lap)
    if lines is None or lines.store is None:  # only the line formats keep a line store
        del paths["dump_lines"]
    else:
        il.write_store(lines.store, paths["dump_lines"])
    report = _report(plan, cfg, stats, started, lap)
    report["refresh"] = {"ingest": "driver" if why is None else "spark", "why": why,
                         "lines": lines.lines if lines else None,
                         "parsed_lines": lines.parsed if lines else None}
    return {"outputs": {name: str(path) for name, path in paths.items()}, "report": report}


def _parsed_lines(plan: fm.Plan, inputs: dict, cfg: dict
                  ) -> tuple[il.ParsedLines | nt.ParsedDump | None, str | None]:
    """Every line of the dump parsed on the driver (None: it is above
    ``ingest.driver_max_dump_mb`` (line formats) or ``ingest.driver_max_nt_mb`` (N-Triples), or
    no driver rules read the plan), and why the tables are made by Spark (None: on the driver).
    N-Triples: parsed block by block, vectorised (``spark_jobs.ingest_nt``); the line formats:
    from the previous build's line store where it has the line, on the driver in a refresh
    whose changed lines are few."""
    size_mb = sum(path.stat().st_size for path in plan.files) / 2**20
    line_formats = il.unsupported(plan) is None
    limit = "driver_max_dump_mb" if line_formats else "driver_max_nt_mb"
    if size_mb > float(cfg[limit]):
        return None, f"{size_mb:.0f} MB of dump, above ingest.{limit}"
    if line_formats:
        return _stored_lines(plan, inputs)
    cannot = nt.unsupported(plan, cfg)
    if cannot is not None:
        return None, cannot
    try:
        return nt.ParsedDump(plan, _languages(cfg)), None
    except nt.Unsupported as exc:
        return None, f"not parsed on the driver: {exc}"
    except il.UnreadableLines as exc:  # Spark names the file and its cause for the user
        return None, f"unreadable on the driver: {exc}"


def _stored_lines(plan: fm.Plan, inputs: dict) -> tuple[il.ParsedLines | None, str | None]:
    """``_parsed_lines`` of a dump the line parsers read."""
    previous = previous_inputs(inputs, "dump_lines", *il.TABLES)
    try:
        lines = il.ParsedLines(plan, il.read_store(previous and previous["dump_lines"]))
    except il.UnreadableLines as exc:  # Spark names the file and its cause for the user
        return None, f"unreadable on the driver: {exc}"
    if previous is None:
        return lines, "no previous build with a line store (a full build)"
    if lines.parsed > PARTIAL_MAX_SHARE * lines.lines:
        return lines, (f"{lines.parsed} of {lines.lines} lines changed (more than "
                       f"{PARTIAL_MAX_SHARE:.0%})")
    return lines, None


def _report(plan: fm.Plan, cfg: dict, stats: dict, started: float, lap: Laps) -> dict:
    """The stage report, from either path's counts (``stats``)."""
    counted = stats.pop("counted")
    return {
        **stats.pop("feedback"),
        "format": plan.format,
        "files": [str(f) for f in plan.files],
        "lines": counted.lines,
        "skipped_lines": counted.kinds.get(fm.SKIP, 0),
        "malformed": counted.malformed,
        "malformed_share": round(counted.share, 6),
        "max_malformed_share": float(cfg["max_malformed_share"]),
        "malformed_by_reason": dict(sorted(counted.reasons.items())),
        "filtered_literals": counted.kinds.get(fm.FILTERED, 0),
        "languages": _languages(cfg),
        "literals_as_edges": bool(cfg["literals_as_edges"]),
        "entities": stats["entities"],
        "relations": stats["relations"],
        "triples": stats["triples"],
        "duplicate_triples_removed": stats["edge_facts"] - stats["triples"],
        "type_assertions": stats["type_assertions"],
        "names_missing": stats["entities"] - stats["names_found"],
        "name_fallback": "key" if plan.name_rule == "key" else "key with '_' as spaces",
        "change_set": stats["change_set"],
        "seconds": round(time.perf_counter() - started, 3),
        "step_seconds": lap.seconds,
    }


def _languages(cfg: dict) -> list[str | None]:
    languages = cfg["languages"]
    return [languages] if isinstance(languages, str) or languages is None else list(languages)


def _driver_ingest(lines: il.ParsedLines | nt.ParsedDump, inputs: dict, cfg: dict, dump,
                   plan: fm.Plan, paths: dict[str, Path], lap: Laps) -> dict:
    """The tables from the parsed lines with Arrow (``spark_jobs.ingest_lines``), each written
    in the schema Spark's ingest writes it in."""
    counted = _LineCounts(lines.counts)
    _write_arrow(il.quarantine(lines.malformed, plan, TEXT_LIMIT), "quarantine", paths)
    _refuse(counted, dump, plan, float(cfg["max_malformed_share"]), paths["quarantine"])
    lap("quarantine")
    graph = il.graph_tables(lines.rows)
    entities, names_found = il.entities(lines.rows, graph["keys"], plan.name_rule)
    relations = pa.table({"id": pa.array(range(len(graph["relation_names"])), pa.int64()),
                          "name": graph["relation_names"]})
    for table, rows in (("entities", entities), ("relations", relations),
                        ("triples", graph["triples"]),
                        ("type_assertions", graph["type_assertions"])):
        _write_arrow(rows, table, paths)
    lap("tables")
    previous = previous_inputs(inputs, "entities", "relations", "triples")
    if previous is None:
        write_empty_change_set(paths["change_set"])
        changes = None
    else:
        changes = driver_change_set(previous, paths["change_set"].parent)
    lap("change_set")
    return {"counted": counted, "feedback": {}, "entities": entities.num_rows,
            "relations": relations.num_rows, "triples": graph["triples"].num_rows,
            "edge_facts": graph["edge_facts"], "type_assertions":
            graph["type_assertions"].num_rows, "names_found": names_found, "change_set": changes}


#: Ingest's tables not in the contract (``runtime.contract.TABLE_SCHEMAS``).
_OWN_SCHEMAS = {"type_assertions": pa.schema([("id", pa.int64()), ("type", pa.string())])}


def spark_schema(table: str) -> pa.Schema:
    """The schema Spark's ingest writes ``table`` in: the contract's, with list columns
    non-null and their items named ``element`` as Spark's Parquet writer names them."""
    schema = _OWN_SCHEMAS.get(table) or TABLE_SCHEMAS[table]
    return pa.schema([
        pa.field(f.name, pa.list_(pa.field("element", f.type.value_type)), nullable=False)
        if pa.types.is_list(f.type) else f for f in schema])


def _write_arrow(rows: pa.Table, table: str, paths: dict[str, Path]) -> None:
    """One output table as one part file, in Spark's schema of it."""
    schema = spark_schema(table)
    shutil.rmtree(paths[table], ignore_errors=True)
    paths[table].mkdir(parents=True)
    pq.write_table(rows.select(schema.names).cast(schema), paths[table] / "part-00000.parquet")


def _spark_ingest(config: dict, inputs: dict, cfg: dict, dump, plan: fm.Plan,
                  delta: list[fm.Source], paths: dict[str, Path], lap: Laps) -> dict:
    """The tables by Spark, from a parse of every line (DESIGN §2.1)."""
    languages = _languages(cfg)
    literals_as_edges = bool(cfg["literals_as_edges"])
    spark = get_spark(config, "lokg-ingest")
    lap("spark_session")
    cache = _Cache()
    try:
        parsed = cache(fm.parse_plan(spark, plan, languages))
        numbered, counts = _number_lines(spark, parsed, plan)
        counted = _LineCounts(counts)
        lap("parse_and_count_lines")
        _quarantine(numbered, counted, dump, plan, float(cfg["max_malformed_share"]),
                    paths["quarantine"])
        lap("quarantine")
        edges, edge_facts = _graph_edges(parsed, counted, literals_as_edges)
        subject_kinds = (*fm.LITERAL_KINDS, fm.FILTERED, fm.TYPE)
        subjects = parsed.filter(F.col("kind").isin(*subject_kinds) & F.col("graph")).select("s")
        added = feedback_added(parsed, delta)
        lap("feedback_added")
        ent_ids, n_entities, rel_names = entity_and_relation_ids(
            spark, edges, subjects, int(cfg["driver_max_entities"]), cache)
        small = n_entities <= int(cfg["driver_max_entities"])
        relations = _write_relations(spark, rel_names, paths["relations"])
        lap("ids")
        n_triples = _write_triples(edges, ent_ids, relations, small, paths["triples"])
        lap("triples")
        facts = _literal_facts(numbered, literals_as_edges,
                               any(source.parser == "entities" for source in plan.sources),
                               counted.python)
        names_found = _write_entities(ent_ids, facts, plan.name_rule, small, paths["entities"])
        lap("entities")
        n_types = _write_type_assertions(parsed, ent_ids, counted, small,
                                         paths["type_assertions"])
        lap("type_assertions")
        out = paths["change_set"].parent
        changes = change_set(spark, inputs, out, small)  # what changed since the previous build
        lap("change_set")
    except (Py4JJavaError, PySparkException) as exc:
        unreadable = _unreadable_file(exc)
        if unreadable is None:
            raise
        raise IngestError(f"ingest: cannot read {unreadable}") from None
    finally:
        cache.release()
    return {"counted": counted, "feedback": added, "entities": n_entities,
            "relations": len(rel_names), "triples": n_triples, "edge_facts": edge_facts,
            "type_assertions": n_types, "names_found": names_found, "change_set": changes}


def _quarantine(numbered: DataFrame, counted: _LineCounts, dump, plan: fm.Plan, ceiling: float,
                path: Path) -> None:
    """Write the malformed lines first (the quarantine must exist even when the stage then
    fails), then refuse a dump over the malformed ceiling or with no statement at all."""
    malformed = F.col("kind") == fm.MALFORMED if counted.malformed else F.lit(False)
    _write(  # none counted: an empty filter, which Spark answers without scanning the parse
        numbered.filter(malformed)
        .select("file_idx", "file", "line", "reason",
                F.substring("text", 1, TEXT_LIMIT).alias("text"))
        .coalesce(1)
        .sortWithinPartitions("file_idx", "line")
        .drop("file_idx"),
        path,
    )
    _refuse(counted, dump, plan, ceiling, path)


def _refuse(counted: _LineCounts, dump, plan: fm.Plan, ceiling: float, path: Path) -> None:
    """Refuse a dump over the malformed ceiling (its quarantine written at ``path``) or with
    no statement at all."""
    if counted.share > ceiling:
        raise IngestError(
            f"ingest of {dump}: {counted.malformed} of {counted.lines} lines are malformed "
            f"(share {counted.share:.4%}), above the ceiling {ceiling:.4%} set by "
            f"ingest.max_malformed_share; see the quarantine at {path} "
            f"(reasons: {dict(sorted(counted.reasons.items(), key=lambda kv: -kv[1]))})",
            kept=[path],
        )
    if counted.lines == 0:
        raise IngestError(f"ingest of {dump}: no statements in {[str(f) for f in plan.files]}")


def _graph_edges(parsed: DataFrame, counted: _LineCounts, literals_as_edges: bool
                 ) -> tuple[DataFrame, int]:
    """The graph's (s, p, o) edges as keys — literal attributes too when they count as edges —
    and how many edge facts the lines held (duplicates included)."""
    graph = F.col("graph")
    edges = parsed.filter((F.col("kind") == fm.EDGE) & graph).select("s", "p", "o")
    edge_facts = counted.kinds.get(fm.EDGE, 0)
    if literals_as_edges:
        attrs = parsed.filter((F.col("kind") == fm.ATTRIBUTE) & graph)
        attrs = fm.unescape_literals(attrs.select("s", "p", "o", "escaped"), counted.python)
        edges = edges.unionByName(attrs.select("s", "p", _literal_key(F.col("o")).alias("o")))
        edge_facts += counted.kinds.get(fm.ATTRIBUTE, 0)
    return edges, edge_facts


def _ids_side(small: bool):
    """Entity-id joins broadcast the ids while they fit the driver."""
    return F.broadcast if small else (lambda df: df)


def _write_relations(spark: SparkSession, rel_names: list[str], path: Path) -> DataFrame:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    write_table("relations", pa.table({"id": pa.array(range(len(rel_names)), pa.int64()),
                                       "name": pa.array(rel_names, pa.string())}),
                path / "part-00000.parquet")
    return spark.createDataFrame(list(enumerate(rel_names)), "id long, name string")


def _write_triples(edges: DataFrame, ent_ids: DataFrame, relations: DataFrame, small: bool,
                   path: Path) -> int:
    """Ids looked up, then de-duplicated as three longs; the count observed while writing."""
    ids = _ids_side(small)
    s_ids = ent_ids.select(F.col("key").alias("s"), F.col("id").alias("s_id"))
    o_ids = ent_ids.select(F.col("key").alias("o"), F.col("id").alias("o_id"))
    r_ids = relations.select(F.col("name").alias("p"), F.col("id").alias("r_id"))
    written = Observation("triples")
    triples = (
        edges.join(ids(s_ids), "s").join(ids(o_ids), "o").join(F.broadcast(r_ids), "p")
        .select(F.col("s_id").alias("s"), F.col("r_id").alias("r"), F.col("o_id").alias("o"))
        .distinct()
    )
    _write(triples.observe(written, F.count("*").alias("n")), path)
    return int(written.get["n"])


def _write_entities(ent_ids: DataFrame, facts: DataFrame, name_rule: str, small: bool,
                    path: Path) -> int:
    """Entities with names, aliases, descriptions and attributes, in id order; returns how many
    have a name of their own (counted while writing: no extra pass)."""
    agg = _aggregate_literals(facts)
    fallback = F.col("key") if name_rule == "key" else F.regexp_replace("key", "_", " ")
    named = Observation("names")
    entities = (
        ent_ids.join(agg, "key", "left")  # ids preserved: a broadcast could only build agg
        .select(
            F.col("id"),
            F.col("key"),
            F.coalesce(F.col("name"), fallback).alias("name"),
            F.coalesce(F.col("aliases"), F.array().cast("array<string>")).alias("aliases"),
            F.col("description"),
            F.array().cast("array<string>").alias("types"),
            F.coalesce(F.col("attributes"), F.array().cast(_ATTRIBUTES)).alias("attributes"),
            F.col("name").isNotNull().alias("_named"),
        )
    )
    # row order = id order; up to driver_max_entities in one file, sorted in one task
    entities = (entities.coalesce(1).sortWithinPartitions("id") if small
                else entities.orderBy("id"))
    _write(entities.observe(named, F.count_if(F.col("_named")).alias("named")).drop("_named"),
           path)
    return int(named.get["named"])


def _write_type_assertions(parsed: DataFrame, ent_ids: DataFrame, counted: _LineCounts,
                           small: bool, path: Path) -> int:
    """(id, type) of the graph lines' type assertions, distinct. None counted by the parse: the
    same (empty) query with a filter that is always false, which Spark answers without a pass
    over the parse or the ids, and no observation (an empty write need not report one)."""
    any_type = bool(counted.kinds.get(fm.TYPE))
    asserted = (F.col("kind") == fm.TYPE) & F.col("graph") if any_type else F.lit(False)
    assertions = fm.unescape_literals(
        parsed.filter(asserted).select("s", "o", "escaped"), counted.python,
    ).select("s", F.col("o").alias("type")).distinct()
    rows = assertions.join(_ids_side(small)(ent_ids.withColumnRenamed("key", "s")), "s") \
        .select("id", "type")
    if not any_type:
        _write(rows, path)
        return 0
    typed = Observation("types")
    _write(rows.observe(typed, F.count("*").alias("n")), path)
    return int(typed.get["n"])


if __name__ == "__main__":
    from lokg.pipeline.driver import stage_main

    stage_main("ingest")

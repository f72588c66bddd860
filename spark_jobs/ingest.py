"""Stage ``ingest`` (Spark): a triple dump → integer-id graph tables.

``run(config, inputs, out_dir)`` reads ``inputs["dump"]`` in the format of ``config["ingest"]``
(see ``spark_jobs.formats``) and writes, as Parquet dataset directories under ``out_dir``:

* ``entities.parquet``   id, key, name, aliases, description, types (empty here), attributes
* ``relations.parquet``  id, name
* ``triples.parquet``    s, r, o — de-duplicated, sorted
* ``quarantine.parquet`` file, line, reason, text — every malformed line, never dropped
* ``type_assertions.parquet`` id, type — explicit type facts (``type.object.type``, ``rdf:type``)
* ``change_set/``        what changed since the previous build (a refresh): one
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

import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lokg.common.dumps import build_format
from lokg.common.stage import PARTIAL_MAX_SHARE, Laps, previous_inputs
from lokg.runtime.contract import TABLE_SCHEMAS
from lokg.spark_jobs import formats as fm
from lokg.spark_jobs import ingest_lines as il
from lokg.spark_jobs import ingest_nt as nt
from lokg.spark_jobs.formats_spark import parse_plan
from lokg.spark_jobs.ingest_change_set import (CHANGE_SET_PARTS, change_set, driver_change_set,
                                               write_empty_change_set)
from lokg.spark_jobs.ingest_checks import (TEXT_LIMIT, IngestError, LineCounts, number_lines,
                                           refuse, unreadable_file)
from lokg.spark_jobs.ingest_ids import Cache, entity_and_relation_ids
from lokg.spark_jobs.ingest_tables import (feedback_added, graph_edges, literal_facts,
                                           write_entities, write_quarantine, write_relations,
                                           write_triples, write_type_assertions)
from lokg.spark_jobs.session import get_spark
from lokg.common.dumps import IngestSettings

OUTPUTS = ("entities", "relations", "triples", "quarantine", "type_assertions", "change_set",
           "dump_lines")


def feedback_sources(delta: str | None) -> list[fm.Source]:
    """The feedback deltas' dump (``feedback_enrich``) as two more sources of the plan: its
    triples are graph edges like the dump's, its names come after the dump's (first wins)."""
    if not delta or not (Path(delta) / "triples.tsv").stat().st_size:
        return []
    return [fm.Source("triples_tsv", (Path(delta) / "triples.tsv",), True),
            fm.Source("entities", (Path(delta) / "entities.jsonl",), False)]


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
    counted = LineCounts(lines.counts)
    _write_arrow(il.quarantine(lines.malformed, plan, TEXT_LIMIT), "quarantine", paths)
    refuse(counted, dump, plan, float(cfg["max_malformed_share"]), paths["quarantine"])
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
    """The tables by Spark, from a parse of every line (``spark_jobs.ingest_tables``); a dump
    file Spark cannot read fails with its name and first cause."""
    spark = get_spark(config, "lokg-ingest")
    lap("spark_session")
    cache = Cache()
    try:
        return _spark_tables(spark, cache, inputs, cfg, dump, plan, delta, paths, lap)
    except (Py4JJavaError, PySparkException) as exc:
        unreadable = unreadable_file(exc)
        if unreadable is None:
            raise
        raise IngestError(f"ingest: cannot read {unreadable}") from None
    finally:
        cache.release()


def _spark_tables(spark: SparkSession, cache: Cache, inputs: dict, cfg: dict, dump,
                  plan: fm.Plan, delta: list[fm.Source], paths: dict[str, Path],
                  lap: Laps) -> dict:
    """``_spark_ingest``'s tables, step by step; the stats ``_report`` reads."""
    literals_as_edges = bool(cfg["literals_as_edges"])
    parsed = cache(parse_plan(spark, plan, _languages(cfg)))
    numbered, counts = number_lines(spark, parsed, plan)
    counted = LineCounts(counts)
    lap("parse_and_count_lines")
    write_quarantine(numbered, counted, dump, plan, float(cfg["max_malformed_share"]),
                     paths["quarantine"])
    lap("quarantine")
    edges, edge_facts = graph_edges(parsed, counted, literals_as_edges)
    subject_kinds = (*fm.LITERAL_KINDS, fm.FILTERED, fm.TYPE)
    subjects = parsed.filter(F.col("kind").isin(*subject_kinds) & F.col("graph")).select("s")
    added = feedback_added(parsed, delta)
    lap("feedback_added")
    ent_ids, n_entities, rel_names = entity_and_relation_ids(
        spark, edges, subjects, int(cfg["driver_max_entities"]), cache)
    small = n_entities <= int(cfg["driver_max_entities"])
    relations = write_relations(spark, rel_names, paths["relations"])
    lap("ids")
    n_triples = write_triples(edges, ent_ids, relations, small, paths["triples"])
    lap("triples")
    facts = literal_facts(numbered, literals_as_edges,
                          any(source.parser == "entities" for source in plan.sources),
                          counted.python)
    names_found = write_entities(ent_ids, facts, plan.name_rule, small, paths["entities"])
    lap("entities")
    n_types = write_type_assertions(parsed, ent_ids, counted, small,
                                    paths["type_assertions"])
    lap("type_assertions")
    out = paths["change_set"].parent
    changes = change_set(spark, inputs, out, small)  # what changed since the previous build
    lap("change_set")
    return {"counted": counted, "feedback": added, "entities": n_entities,
            "relations": len(rel_names), "triples": n_triples, "edge_facts": edge_facts,
            "type_assertions": n_types, "names_found": names_found, "change_set": changes}


def on_reuse(out_dir: str, outputs: dict, report: dict) -> dict:
    """A reused ingest (its input and settings unchanged: pipeline.refresh): nothing changed
    since the previous build, whose change set was linked with its outputs."""
    write_empty_change_set(Path(outputs["change_set"]))
    return {**report, "change_set": dict.fromkeys(CHANGE_SET_PARTS, 0)}

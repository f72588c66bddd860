"""Stage ``ingest``: a triple dump → integer-id graph tables, as SQL on the build's engine.

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
* ``dump_lines/``        the line store of a line-format dump (TSV, PathQuestion, MetaQA,
  FB15k-237): one row per distinct line (parser, 64-bit hash of its bytes) with its parse

One path makes the tables, on DuckDB or Spark (``spark_jobs.engine``, chosen per build): the
dump's lines are read into one Parquet table (``spark_jobs.ingest_read``), classified by the
SQL of ``spark_jobs.ingest_sql`` and turned into the tables by that of
``spark_jobs.ingest_tables``. A refresh whose previous build kept a line store parses only the
lines the store lacks, with the same SQL, and takes the others' parse from the store (the
report's ``refresh``: ``partial``, and how many distinct lines were parsed).

Rules:

* Entities are every subject/object of a graph triple, every subject of a literal fact and every
  subject of a type assertion; objects of type assertions are not entities (unless they are
  also subjects or objects elsewhere). Names/aliases/descriptions from ``entity2name.txt`` or
  the entities file never create entities.
* Ids are dense and deterministic: entities numbered 0..N-1 in key order, relations in name
  order (both engines order strings alike: by code point).
* ``name`` is the first name literal by (file, line) — dump files first, entities file last;
  without one, the key (PathQuestion: the key with ``_`` → space), counted in ``names_missing``.
  ``aliases`` keep first-seen order, de-duplicated; ``attributes`` likewise.
* Line numbers in the quarantine are exact, 1-based within each file (gzip included); lines
  end at ``\\n``, ``\\r\\n`` or ``\\r``.
* More malformed lines than ``ingest.max_malformed_share`` of the non-blank, non-comment lines
  fails the stage with ``IngestError`` — after the quarantine is written; the driver keeps it
  at ``staging/<build_id>/failed/ingest/quarantine.parquet``, the path the message names.
* A line that is not valid UTF-8 is malformed (reason ``formats.R_INVALID_UTF8``), in every
  format; the quarantine keeps its text with U+FFFD for the bad bytes, so it always reads back.
* A dump file that cannot be read (a truncated ``.gz``) fails the stage with ``IngestError``
  naming the file and the cause.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from lokg.common.dumps import IngestSettings, build_format
from lokg.common.stage import Laps, previous_inputs
from lokg.spark_jobs import formats as fm
from lokg.spark_jobs import ingest_sql as sql
from lokg.spark_jobs import ingest_tables as tables
from lokg.spark_jobs.engine import Engine, open_engine
from lokg.spark_jobs.ingest_change_set import CHANGE_SET_PARTS, change_set, write_empty_change_set
from lokg.spark_jobs.ingest_checks import IngestError, LineCounts, refuse
from lokg.spark_jobs.ingest_read import write_lines

OUTPUTS = ("entities", "relations", "triples", "quarantine", "type_assertions", "change_set",
           "dump_lines")
#: The previous build's tables a refresh's ingest reads beside its line store.
STORE_TABLES = ("entities", "relations", "triples", "quarantine", "type_assertions")


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
    if not _keeps_store(plan):
        del paths["dump_lines"]
    lap = Laps()
    work = Path(tempfile.mkdtemp(prefix="ingest-lines-", dir=out))
    try:
        n_lines = write_lines(plan, work / "lines.parquet")
        lap("read_lines")
        with open_engine(config, out) as engine:
            stats = _tables(engine, work, inputs, cfg, dump, plan, paths, lap)
            stats["refresh"]["lines"] = n_lines
            stats["feedback"] = tables.feedback_added(
                engine, len(plan.files) - 2 if delta else None)
            lap("feedback_added")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = _report(plan, cfg, stats, started, lap)
    report["engine"] = engine.name
    return {"outputs": {name: str(path) for name, path in paths.items()}, "report": report}


def _keeps_store(plan: fm.Plan) -> bool:
    """Whether the build keeps a line store (``dump_lines``): every parser of the plan is a
    line parser (``formats.LINE_PARSERS``)."""
    return all(source.parser in fm.LINE_PARSERS for source in plan.sources)


def _parse(engine: Engine, work: Path, inputs: dict, cfg: dict, plan: fm.Plan) -> dict:
    """Table ``parsed``: every line classified (``ingest_sql``); a refresh whose previous
    build kept a line store parses only the lines the store lacks. Returns the report's
    ``refresh`` (which, and how many distinct lines were parsed)."""
    engine.register("lines", work / "lines.parquet")
    engine.register_arrow("files", pa.table({
        "file_idx": pa.array(range(len(plan.files)), pa.int32()),
        "file": pa.array([str(f) for f in plan.files], pa.string())}))
    engine.function("nt_unescape", fm.unescape_nt, ["VARCHAR"], "VARCHAR")
    parsers = list(dict.fromkeys(source.parser for source in plan.sources))
    languages = _languages(cfg)
    previous = previous_inputs(inputs, "dump_lines", *STORE_TABLES) if _keeps_store(plan) \
        else None
    if previous is None:
        engine.view("parsed", sql.parse("lines", parsers, languages), materialise=True)
        why = ("no previous build with a line store" if _keeps_store(plan)
               else "no line store for parsers " + ", ".join(parsers))
        return {"ingest": "full", "why": why,
                "parsed_lines": tables.scalar(engine, "SELECT count(*) AS n FROM lines")}
    engine.register("store", previous["dump_lines"])
    engine.view("fresh", """SELECT * FROM lines l WHERE NOT EXISTS (SELECT 1 FROM store st
                            WHERE st.parser = l.parser AND st.hash = l.hash)""",
                materialise=True)
    engine.view("parsed", f"{sql.parse('fresh', parsers, languages)} UNION ALL "
                          f"{sql.from_store('lines', 'store')}", materialise=True)
    return {"ingest": "partial", "why": None, "parsed_lines": tables.scalar(
        engine, "SELECT count(*) AS n FROM (SELECT DISTINCT parser, hash FROM fresh)")}


def _tables(engine: Engine, work: Path, inputs: dict, cfg: dict, dump, plan: fm.Plan,
            paths: dict[str, Path], lap: Laps) -> dict:
    """The stage's tables on ``engine``, step by step; the stats ``_report`` reads."""
    refresh = _parse(engine, work, inputs, cfg, plan)
    counted = LineCounts(tables.counts(engine))
    lap("parse")
    tables.write_quarantine(engine, paths["quarantine"])
    refuse(counted, dump, plan, float(cfg["max_malformed_share"]), paths["quarantine"])
    lap("quarantine")
    literals_as_edges = bool(cfg["literals_as_edges"])
    tables.ids(engine, literals_as_edges)
    tables.write_relations(engine, paths["relations"])
    tables.write_triples(engine, paths["triples"])
    lap("triples")
    names_found = tables.write_entities(engine, plan.name_rule, literals_as_edges,
                                        paths["entities"])
    lap("entities")
    tables.write_type_assertions(engine, paths["type_assertions"])
    if "dump_lines" in paths:
        engine.write("SELECT DISTINCT parser, hash, kind, s, p, o, reason, text FROM parsed",
                     paths["dump_lines"])
    lap("type_assertions")
    changes = change_set(engine, inputs, paths["change_set"].parent)
    lap("change_set")
    sizes = {name: tables.scalar(engine, f"SELECT count(*) AS n FROM {table}")
             for name, table in (("entities", "ent"), ("relations", "rel"), ("triples", "edges"))}
    edge_facts = counted.kinds.get(fm.EDGE, 0) + (
        counted.kinds.get(fm.ATTRIBUTE, 0) if literals_as_edges else 0)
    return {"counted": counted, **sizes, "edge_facts": edge_facts, "refresh": refresh,
            "type_assertions": tables.scalar(engine, f"""SELECT count(*) AS n FROM (SELECT
                DISTINCT s, o FROM parsed WHERE kind = '{fm.TYPE}' AND graph) t
                JOIN ent ON t.s = ent.key"""),
            "names_found": names_found, "change_set": changes}


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
        "refresh": stats["refresh"],
        "seconds": round(time.perf_counter() - started, 3),
        "step_seconds": lap.seconds,
    }


def _languages(cfg: dict) -> list[str | None]:
    languages = cfg["languages"]
    return [languages] if isinstance(languages, str) or languages is None else list(languages)


def on_reuse(out_dir: str, outputs: dict, report: dict) -> dict:
    """A reused ingest (its input and settings unchanged: pipeline.refresh): nothing changed
    since the previous build, whose change set was linked with its outputs."""
    write_empty_change_set(Path(outputs["change_set"]))
    return {**report, "change_set": dict.fromkeys(CHANGE_SET_PARTS, 0)}

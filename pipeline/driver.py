"""The build driver: runs the stages of ``pipeline.registry`` in order, then validates and
publishes the build atomically.

A stage is a module exposing ``run(config, inputs, out_dir) -> dict``:

* ``config``  — the whole build config (pipeline/config.py); a stage reads its own section;
* ``inputs``  — artefact name → path for exactly the artefacts the registry says it reads
  (``dump``: the raw dump; ``store``: the store root, for a stage that reads what lies beside
  the builds — the feedback log — or the published build, ``CURRENT``);
* ``out_dir`` — a fresh directory of its own, renamed to ``staging/<build_id>/<stage>/`` after.

It returns ``{"outputs": {artefact: path}, "report": {...}}`` with exactly its declared outputs.
The driver records that as ``out_dir/_stage.json`` so that a later stage — in this process, in
another Airflow task, or in a rerun — finds its inputs without re-running anything. Re-running a
stage replaces only its own directory. Stage modules are imported by name when they run: this
module never imports pyspark or torch.
"""

from __future__ import annotations

import importlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pyarrow.parquet as pq

from lokg.pipeline.config import RefreshSettings
from lokg.pipeline.peak_rss import PeakRss
from lokg.pipeline.refresh import (UNHASHABLE, content_hash, fingerprint, link_tree, same_rows,
                              same_settings, staged_location)
from lokg.pipeline.registry import STAGE_NAMES, Stage, producers, stage
from lokg.common.stage import PREVIOUS, BuildError, StageError
from lokg.spark_jobs.engine import with_engine
from lokg.runtime.contract import (REQUIRED_TABLES, Build, Store, StoreError, build_lease,
                                   new_build_id, read_table, sha256_file)
from lokg.runtime.linker import LINKER_FORMS_FILE, folded_forms, surface_forms
from lokg.runtime.query_stats import QUERY_STATS_FILE, query_stats

#: Artefacts published as contract tables (a later stage's artefact of the same name wins:
#: scos_merge's rewritten ``triples``/``relations`` replace ingest's).
PUBLISHED_TABLES = ("entities", "relations", "triples", "relation_map", "relation_stats",
                    "relation_pairs", "node_gain", "edges", "entity_ids", "path_cache",
                    "documents", "chunks", "sentences", "triple_sources", "triple_context",
                    "feedback_lineage")
#: Artefact → path inside the build, for audit reports and trained models.
REPORT_ARTEFACTS = {"quarantine": "reports/quarantine.parquet",
                    "document_quarantine": "reports/document_quarantine.parquet",
                    "extraction_quarantine": "reports/extraction_quarantine.parquet",
                    "merge_log": "reports/merge_log.parquet",
                    "change_set": "reports/change_set"}
MODEL_ARTEFACTS = {"transe_run": "models/transe",
                   "relation_embeddings": "models/relation_embeddings.npy",
                   "entity_index": "entity.faiss",
                   "entity_vectors": "entity_vectors.npy",
                   "chunk_vectors": "chunk_vectors.npy",
                   "sentence_vectors": "sentence_vectors.npy",
                   "encoder": "models/encoder.json",
                   "query_encoder": "models/query_encoder.onnx",
                   "span_encoder": "models/span_encoder.onnx",
                   "gat_run": "models/gat",
                   "relknow": "models/relknow"}

STAGE_RECORD = "_stage.json"
#: Under ``staging/<build_id>/``: what failed stages left for the user (``StageError.kept``).
FAILED_DIR = "failed"


def _known(name: str) -> Stage:
    try:
        return stage(name)
    except KeyError as exc:
        raise BuildError(exc.args[0]) from None


def _load_module(name: str) -> ModuleType:
    return importlib.import_module(_known(name).module)


def collect_inputs(store: Store, build_id: str, dump: str | None, name: str) -> dict[str, str]:
    """The artefacts stage ``name`` declares, read from the records of the stages producing
    them; a required one that is missing is one error naming the artefact and its producer."""
    spec, made = _known(name), producers(name)
    inputs: dict[str, str] = {}
    records: dict[str, dict] = {}
    for artefact in (*spec.inputs, *spec.optional):
        if artefact == "dump":
            if dump is None:
                raise BuildError(f"stage '{name}' needs the dump (lokg build --dump PATH)")
            inputs["dump"] = str(dump)
            continue
        if artefact == "store":  # the store being refreshed: its feedback, its published build
            inputs["store"] = str(store.root)
            continue
        producer = made.get(artefact)
        if producer is None:
            raise BuildError(f"stage '{name}' reads '{artefact}', which no earlier stage makes")
        if artefact in spec.optional and not _recorded(store, build_id, producer):
            continue  # optional: passed when an earlier stage made it, and that one has not run
        if producer not in records:
            records[producer] = _record(store, build_id, producer, needed_by=name)
        outputs = records[producer]["outputs"]
        if artefact in outputs:
            inputs[artefact] = outputs[artefact]
        elif artefact not in spec.optional:
            raise BuildError(f"stage '{name}' needs '{artefact}' from stage '{producer}', whose "
                             f"record lists only {sorted(outputs)}")
    return inputs


def _record_path(store: Store, build_id: str, producer: str) -> Path:
    return store.staging_dir(build_id) / producer / STAGE_RECORD


def _recorded(store: Store, build_id: str, producer: str) -> bool:
    return _record_path(store, build_id, producer).is_file()


def _record(store: Store, build_id: str, producer: str, *, needed_by: str) -> dict:
    path = _record_path(store, build_id, producer)
    if not path.is_file():
        raise BuildError(f"stage '{needed_by}' needs stage '{producer}' first: {path} missing")
    return json.loads(path.read_text())


def _checked_outputs(name: str, result: dict) -> dict:
    """The stage's outputs as the registry declares them: every output, optional ones only
    when written (a stage bug otherwise)."""
    spec = _known(name)
    declared, got = set(spec.outputs), set(result.get("outputs", {}))
    if not declared <= got <= declared | set(spec.optional_outputs):
        raise BuildError(f"stage '{name}' returned outputs {sorted(got)}; pipeline/registry.py "
                         f"declares {sorted(declared)} (missing {sorted(declared - got)}, "
                         f"undeclared {sorted(got - declared - set(spec.optional_outputs))})")
    return result["outputs"]


def run_stage(store: Store, build_id: str, name: str, config: dict, dump: str | None) -> dict:
    """Run one stage of a build idempotently and record its outputs, report and timing.

    The stage writes into a fresh hidden directory beside ``staging/<build_id>/<name>``; its
    record goes in last and the directory then replaces ``<name>`` by a rename. So a stage
    directory always holds a finished stage, and an orphaned process of a killed attempt keeps
    writing into its own hidden directory, never into the one a retry produces.

    A refresh (``refresh.mode`` auto, a cached previous build: ``pipeline.refresh``) links the
    cached outputs instead when the stage's fingerprint is the cached record's, and gives a
    ``partial`` stage the cached outputs as ``previous:<artefact>`` inputs when only its
    input data changed. The record says which (``refresh``: reused, partial or full), and
    which outputs of a rerun kept the cached hash, their rows being the cached ones
    (``cut_off``: ``pipeline.refresh.same_rows``).
    """
    spec = _known(name)
    config = with_engine(config, dump)  # the same engine in every stage of the build
    inputs = collect_inputs(store, build_id, dump, name)
    printed = fingerprint(config, (name, *spec.config_sections),
                          input_hashes(store, build_id, name, inputs))
    base = _cached_record(store, config, spec)
    final = store.staging_dir(build_id) / name
    final.parent.mkdir(parents=True, exist_ok=True)
    work = final.with_name(f".{name}.tmp-{secrets.token_hex(4)}")
    work.mkdir()
    try:
        record = _made_record(store, build_id, spec, config, inputs, base, printed, work, final)
        (work / STAGE_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True))
        _replace_dir(work, final)
    except BaseException as exc:
        if isinstance(exc, StageError) and exc.kept:
            _keep_failed(exc, store.staging_dir(build_id) / FAILED_DIR / name)
        shutil.rmtree(work, ignore_errors=True)
        raise
    return record


def _made_record(store: Store, build_id: str, spec: Stage, config: dict, inputs: dict[str, str],
                 base: tuple[str, dict] | None, printed: dict, work: Path, final: Path) -> dict:
    """Make the stage's outputs in ``work`` (reused, partial or full) and return its record,
    the output paths as they will be once ``work`` is renamed to ``final``."""
    started = time.perf_counter()
    with PeakRss() as peak:
        result, how = _refreshed_or_run(store, build_id, spec, config, inputs, work, base, printed)
    outputs = _checked_outputs(spec.name, result)
    hashes = result.get("hashes") or {k: content_hash(v) for k, v in outputs.items()}
    kept = [] if how == "reused" or base is None else _cut_off(store, base, outputs, hashes)
    return {
        "stage": spec.name,
        "seconds": round(time.perf_counter() - started, 3),
        "peak_rss_mb": peak.mb,  # pipeline/peak_rss.py: how it is sampled, its limits
        "outputs": {k: _moved(v, work, final) for k, v in outputs.items()},
        "report": result.get("report", {}),
        "refresh": how,
        "refresh_base": base[0] if base and how != "full" else None,
        "fingerprint": printed,
        "hashes": hashes,
        "cut_off": kept,
    }


def _cut_off(store: Store, base: tuple[str, dict], outputs: dict[str, str],
             hashes: dict[str, str]) -> list[str]:
    """Early cut-off: each output table of a rerun stage that holds the cached build's rows
    takes the cached hash (in ``hashes``), so the stages reading it are reused. The artefacts
    it was done for."""
    base_id, record = base
    kept = []
    for artefact, path in outputs.items():
        cached_hash = record.get("hashes", {}).get(artefact)
        found = staged_location(record["outputs"].get(artefact, ""), base_id)
        if cached_hash in (None, hashes[artefact]) or found is None:
            continue
        if same_rows(path, store.refresh_dir(base_id) / found[0] / found[1]):
            hashes[artefact] = cached_hash
            kept.append(artefact)
    return kept


def input_hashes(store: Store, build_id: str, name: str, inputs: dict[str, str]) -> dict[str, str]:
    """Content hash of each input of stage ``name``: the producer's recorded hash of an
    artefact, the dump's files hashed here, and the store as never-equal (unhashable)."""
    made, hashes = producers(name), {}
    for artefact, path in inputs.items():
        if artefact == "store":
            hashes[artefact] = f"{UNHASHABLE}-{secrets.token_hex(8)}"
            continue
        recorded = {} if artefact == "dump" else _record(store, build_id, made[artefact],
                                                           needed_by=name).get("hashes", {})
        hashes[artefact] = recorded.get(artefact) or content_hash(path)
    return hashes


def _cached_record(store: Store, config: dict, spec: Stage) -> tuple[str, dict] | None:
    """(build id, record) of the stage in the store's refresh cache, when this build refreshes
    (``refresh.mode`` auto) and the stage can (its registry ``refresh`` is not full)."""
    if spec.refresh == "full" or RefreshSettings.of(config).mode == "full":
        return None
    base = store.refresh_base()
    path = None if base is None else store.refresh_dir(base) / spec.name / STAGE_RECORD
    if path is None or not path.is_file():
        return None
    return base, json.loads(path.read_text())


def _refreshed_or_run(store: Store, build_id: str, spec: Stage, config: dict,
                      inputs: dict[str, str], work: Path, base: tuple[str, dict] | None,
                      printed: dict) -> tuple[dict, str]:
    """The stage's result, and how it was made: the cached outputs linked (reused), or the
    stage run with the cached outputs as ``previous:`` inputs (partial), or in full."""
    module = _load_module(spec.name)
    if base is not None and base[1].get("fingerprint", {}).get("digest") == printed["digest"]:
        reused = _linked(store, base, spec.name, build_id, work)
        if reused is not None:
            hook = getattr(module, "on_reuse", None)  # outputs that describe the change
            if hook is not None:  # it rewrites outputs: their hashes are taken anew
                reused["report"] = hook(str(work), reused["outputs"], reused["report"])
                reused["hashes"] = None
            return reused, "reused"
    if (base is not None and spec.refresh == "partial"
            and same_settings(base[1].get("fingerprint", {}), printed)):
        previous = previous_inputs(store, base[0], spec.name)
        result = module.run(config, {**inputs, **previous}, str(work))
        return result, "full" if _ran_in_full(result["report"]) else "partial"
    return module.run(config, inputs, str(work)), "full"


def _ran_in_full(report: dict) -> bool:
    """A stage given the previous outputs may still not use them (entity ids shifted, too
    much touched, parameters that do not fit); its report says so: refresh mode full (Spark
    stages) or a cold start (learned stages)."""
    refresh = report.get("refresh")
    return isinstance(refresh, dict) and (refresh.get("mode") == "full"
                                          or refresh.get("start") == "cold")


def _linked(store: Store, base: tuple[str, dict], name: str, build_id: str,
            work: Path) -> dict | None:
    """The cached stage's result with its files hard-linked into ``work``; an output it passed
    on from an earlier stage (scos_merge's unmerged triples) is that stage's in this build.
    None when an output is found in neither (nothing is linked then)."""
    base_id, record = base
    cached = store.refresh_dir(base_id) / name
    outputs = {}
    for artefact, path in record["outputs"].items():
        found = staged_location(path, base_id)
        if found is None:
            return None
        stage_dir, rel = found
        own = stage_dir == name
        target = (work if own else store.staging_dir(build_id) / stage_dir) / rel
        if not (cached / rel if own else target).exists():
            return None
        outputs[artefact] = str(target)
    link_tree(cached, work, skip=(STAGE_RECORD,))
    return {"outputs": outputs, "report": record["report"], "hashes": record.get("hashes")}


def previous_inputs(store: Store, base: str, name: str) -> dict[str, str]:
    """``previous:<artefact>`` → path in the refresh cache, for the inputs and outputs of
    stage ``name`` in the cached build ``base`` (the latest producer's, as for this build)."""
    spec, made = _known(name), producers(name)
    wanted = {a: made[a] for a in (*spec.inputs, *spec.optional) if a in made}
    wanted.update(dict.fromkeys((*spec.outputs, *spec.optional_outputs), name))
    previous = {}
    for artefact, producer in wanted.items():
        path = store.refresh_dir(base) / producer / STAGE_RECORD
        outputs = json.loads(path.read_text())["outputs"] if path.is_file() else {}
        found = staged_location(outputs.get(artefact, ""), base)
        if found is not None:
            previous[PREVIOUS + artefact] = str(store.refresh_dir(base) / found[0] / found[1])
    return previous


def _keep_failed(exc: StageError, place: Path) -> None:
    """Move the files a failed stage's error names (``exc.kept``) out of its directory, which
    is about to be deleted, into ``place`` (replacing an earlier failure's), and make the
    message name them there: the user is told to inspect them."""
    new = place.with_name(f".{place.name}.tmp-{secrets.token_hex(4)}")
    new.mkdir(parents=True)
    message = str(exc)
    for path in exc.kept:
        if path.exists():
            os.rename(path, new / path.name)
            message = message.replace(str(path), str(place / path.name))
    _replace_dir(new, place)
    exc.args = (message,)


def _moved(path, work: Path, final: Path) -> str:
    """Where an output path ends up once ``work`` is renamed to ``final`` (inputs stay put)."""
    try:
        return str(final / Path(path).resolve().relative_to(work.resolve()))
    except ValueError:
        return str(path)


def _replace_dir(new: Path, final: Path) -> None:
    """Put directory ``new`` in the place of ``final``, whose old content is then deleted."""
    if final.exists():
        old = final.with_name(f".{final.name}.old-{secrets.token_hex(4)}")
        os.rename(final, old)
        os.rename(new, final)
        shutil.rmtree(old)
    else:
        os.rename(new, final)


def stage_records(store: Store, build_id: str) -> dict[str, dict]:
    """The records of the stages of a build staged so far, in stage order."""
    records = {}
    for name in STAGE_NAMES:
        path = _record_path(store, build_id, name)
        if path.is_file():
            records[name] = json.loads(path.read_text())
    return records


def staged_outputs(records: dict[str, dict]) -> dict[str, str]:
    """Artefact → path over staged records in stage order: a later stage's artefact of the
    same name wins, as at publish."""
    artefacts: dict[str, str] = {}
    for record in records.values():
        artefacts.update(record["outputs"])
    return artefacts


def publish_build(store: Store, build_id: str, config: dict, *, sources: list[dict] | None = None,
                  hook=None) -> Build:
    """Validate the staged outputs of a build and publish them atomically, holding the store's
    build lease (refused while another build runs on the store).

    Safe to retry: a retry after a crash past the rename finishes the CURRENT swap
    (``Store.publish``), and one after the staging directory moved finds the build published
    and verifies it. Once published, the staging directory becomes the store's refresh cache
    (``refresh/<build_id>/``, replacing the one before): the next build refreshes from it.
    """
    with build_lease(store.root, build_id):
        return _publish_staged(store, build_id, config, sources=sources, hook=hook)


def _publish_staged(store: Store, build_id: str, config: dict, *,
                    sources: list[dict] | None = None, hook=None) -> Build:
    """:func:`publish_build` under the build lease its caller holds."""
    if not store.staging_dir(build_id).is_dir():
        if build_id in store.build_ids():
            return store.build(build_id, verify=True)
        raise BuildError(f"build {build_id}: no such staged build ({store.staging_dir(build_id)} "
                         "does not exist; stage one with lokg build --stage NAME --build-id ID)")
    expected = store.current_id()  # compare-and-swap: refused if CURRENT moves meanwhile
    records = stage_records(store, build_id)
    artefacts = staged_outputs(records)
    tables = _published_tables(build_id, artefacts)
    extra = {dest: Path(artefacts[a]) for a, dest in {**REPORT_ARTEFACTS, **MODEL_ARTEFACTS}.items()
             if a in artefacts}
    report, extra["reports/build_report.json"] = _write_build_report(
        store.staging_dir(build_id), records)
    extra[QUERY_STATS_FILE] = _write_query_stats(store.staging_dir(build_id), tables)
    extra[LINKER_FORMS_FILE] = _write_linker_forms(store.staging_dir(build_id), tables)
    build = store.publish(
        build_id,
        tables,
        extra_files=extra,
        info={"config": config, "sources": sources or [], "report": report},
        keep=config["publish"]["keep"],
        hook=hook,
        expect_current=expected,
    )
    store.keep_for_refresh(build_id)  # the next build's refresh cache, in one rename
    return build


def _published_tables(build_id: str, artefacts: dict[str, str]) -> dict[str, Path]:
    """The staged tables a build publishes; BuildError when a required one is missing."""
    missing = [t for t in REQUIRED_TABLES if t not in artefacts]
    if missing:
        raise BuildError(f"build {build_id}: cannot publish, tables missing: {missing}")
    return {t: Path(artefacts[t]) for t in PUBLISHED_TABLES if t in artefacts}


def _write_build_report(staging: Path, records: dict[str, dict]) -> tuple[dict, Path]:
    """The build report (each stage's report, time and peak RSS in MiB — None in a record made
    before it was kept — what was refreshed) and its file."""
    report = {
        "stages": {n: {**r["report"], "seconds": r["seconds"], "peak_rss_mb": r.get("peak_rss_mb")}
                   for n, r in records.items()},
        "refresh": refresh_summary(records),
    }
    path = staging / "build_report.json"
    path.write_text(json.dumps(report, indent=2, sort_keys=True))
    return report, path


def refresh_summary(records: dict[str, dict]) -> dict:
    """What a build refreshed from: the cached build it reused from (None: a full build), how
    each stage was made (reused, partial, full) and the counts of ingest's change set."""
    bases = {r.get("refresh_base") for r in records.values()} - {None}
    return {"base": min(bases) if bases else None,
            "stages": {n: r.get("refresh", "full") for n, r in records.items()},
            "changes": records.get("ingest", {}).get("report", {}).get("change_set")}


def _write_query_stats(staging: Path, tables: dict[str, Path]) -> Path:
    """The runtime's per-store statistics (σ*, H(O|R)) of the triples about to be published,
    once their ids are checked: a build that fails the check never becomes CURRENT."""
    relations = read_table(tables["relations"], "relations", columns=["id"])
    n_relations = int(relations.column("id").to_numpy().max(initial=-1)) + 1
    triples = read_table(tables["triples"], "triples")
    n_entities = read_table(tables["entities"], "entities", columns=["id"]).num_rows
    for name in ("triples", "triple_sources", "triple_context", "feedback_lineage"):
        if name in tables:
            _check_ids(triples if name == "triples" else read_table(tables[name], name),
                       tables[name], n_entities, relations.num_rows)
    stats = query_stats(triples, n_relations)
    path = staging / "query_stats.json"
    path.write_text(json.dumps(stats, sort_keys=True))
    return path


def _check_ids(triples: pa.Table, where: Path, n_entities: int, n_relations: int) -> None:
    """Every triple's s, o and r is a row of the entity and relation tables."""
    import pyarrow.compute as pc

    if not triples.num_rows:
        return
    for col, bound in (("s", n_entities), ("o", n_entities), ("r", n_relations)):
        lo, hi = pc.min(triples[col]).as_py(), pc.max(triples[col]).as_py()
        if lo < 0 or hi >= bound:
            raise StoreError(f"{where}: column {col} has ids in [{lo}, {hi}], outside [0, {bound})")


def _write_linker_forms(staging: Path, tables: dict[str, Path]) -> Path:
    """Every entity name, key and alias folded for the linker, once here instead of at every
    open (folding 29k forms of FB15k-237 took half a second of each open)."""
    ent = read_table(tables["entities"], "entities", columns=["name", "key", "aliases"])
    ids, forms = folded_forms(surface_forms(*(ent.column(c).to_pylist()
                                              for c in ("name", "key", "aliases"))))
    path = staging / "linker_forms.parquet"
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "form": pa.array(forms, pa.string())}),
                   path)
    return path


def source_fingerprints(dump: str) -> list[dict]:
    """Size and sha256 of every input file of a dump (a file or a directory)."""
    root = Path(dump)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return [{"path": str(p), "bytes": p.stat().st_size, "sha256": sha256_file(p)} for p in files]


def build(dump: str, store_root: str, config: dict, *, until: str | None = None,
          build_id: str | None = None, log: Callable[[str], None] = print) -> Build | None:
    """Run every stage (or up to ``until``) and publish. Returns the build, or None if stopped.

    A rerun of a build id published already (killed past the rename of ``Store.publish``)
    runs no stage again, whose files would differ (their timings): it finishes the publish of
    what is staged, as ``lokg publish`` does."""
    if until is not None and until not in STAGE_NAMES and until != "publish":
        raise BuildError(f"--until {until}: unknown stage (stages: {', '.join(STAGE_NAMES)}, "
                         "publish)")
    if not Path(dump).exists():
        raise BuildError(f"dump not found: {dump}")
    store = Store(store_root)
    build_id = build_id or new_build_id()
    with build_lease(store.root, build_id):  # a second build on the store is refused here
        if until in (None, "publish") and build_id in store.build_ids():
            log(f"build {build_id} is published already; finishing its publish")
            return _publish_staged(store, build_id, config, sources=source_fingerprints(dump))
        for number, name in enumerate(STAGE_NAMES, 1):
            log(f"[{number}/{len(STAGE_NAMES)}] {name} …")
            record = run_stage(store, build_id, name, config, dump)
            log(f"[{number}/{len(STAGE_NAMES)}] {name} done in {record['seconds']:.1f}s")
            if name == until:
                log(f"stopped after '{name}'; staged outputs in {store.staging_dir(build_id)}")
                return None
        published = _publish_staged(store, build_id, config, sources=source_fingerprints(dump))
    log(f"published build {build_id} to {store.root}")
    return published

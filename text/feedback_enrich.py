"""Stage ``feedback_enrich``: what questions found missing, looked up in the store's own
documents and written as a **delta** of triples the next build takes in.

It reads the store being refreshed, not this build: the feedback log beside its builds
(``runtime.feedback.read_log``, which skips torn or malformed lines with a reason) and the
chunk index of the **published** build (``CURRENT``: its ``chunks``, ``sentences``,
``chunk_vectors.npy`` and encoder) — this build's own chunk vectors only exist after
``triple_context``. The driver hands the store root over as the pseudo-input ``store``.

For each open sub-question (e, r, ?) (``~r``: (?, r, e); a bare topic mention when nothing
linked) the ``k`` chunks nearest its text by cosine are extracted with the configured backend
(the ``triple_extract`` backends and their cache, ``precomputed``: the passage's own OpenIE
triples, from ``feedback_enrich.precomputed_file`` when set, else triple_extract's file). A
triple is kept when it answers the sub-question: the entity on the side the relation asks about
(by folded name or alias) and the extracted phrase close to the relation (cosine of the two
texts with the store's encoder ≥ ``relation_min_cosine``); it is written with the sub-question's
own relation, so it lands in the graph's relation, not beside it. A mention has no relation: its
triples keep the graph relation nearest their phrase, else the phrase. Kept triples closer than
``dedupe_threshold`` (normalised edit distance of "h · r · t") to a triple of the graph about
the same entity, or to one already kept, are dropped.

A name a question wrote that nothing linked (a record's ``unlinked``: "Aschenbrodel" where the
graph has "Aschenbrödel", "Hayek" where it has "Friedrich Hayek") asks which entity it names
(relation :data:`ALIAS`): the one entity the graph's names allow — the same name with accents
dropped, else the shortest names holding its words that are at least half made of them —
written in a passage among the ``k`` nearest the name, becomes an **alias** of that entity in
the delta (``entities.jsonl``), which the next build links. Its re-opening, closing and depth
are those of any sub-question.

Deltas persist in ``<store>/feedback/deltas/<id>.parquet`` + ``<id>.json``; the id is the
published build enriched from, so a retried refresh replaces its own delta. A sub-question an
earlier delta answered is closed; one that found nothing is recorded with the fingerprint of
what it was tried on (chunk set, backend, k) and retried only when that changes — the same
passages and extractor give the same nothing. The stage's output is every persisted delta in one
dump (``triples.tsv``, ``entities.jsonl`` for new entities and aliases) plus the provenance with
the feedback ids (``sources.parquet``): a delta's triples stay in every later build.

The sub-questions (``text.feedback_questions``), the published build (``text.feedback_published``),
the triples and names that answer them (``text.feedback_answers``) and the deltas
(``text.feedback_deltas``) live beside this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from lokg.common.stage import (Laps, StageError, published_encoder, stage_input,
                               torch_threads)
from lokg.runtime.contract import Build, Store
from lokg.runtime.feedback import BRIDGE, log_dir, read_log
from lokg.runtime.query_settings import QuerySettings
from lokg.text.feedback_answers import aliases, deduplicated, retrieved, with_relations
from lokg.text.feedback_deltas import Tried, consolidated, deltas_dir, earlier, persist
from lokg.text.feedback_published import Published
from lokg.text.feedback_questions import ALIAS, SubQuestion, alias_questions, sub_questions
from lokg.text.settings import FeedbackEnrichSettings, TripleExtractSettings
from lokg.text.triple_extract import (ChunkCache, as_triple, cache_root, openie_passages,
                                      precomputed_file)

STAGE = "feedback_enrich"


class Extraction:
    """Each retrieved chunk's extracted triples with the configured backend, once per chunk."""

    def __init__(self, config: Mapping, backend: str, dump: Path, out: Path):
        extract_cfg = {**TripleExtractSettings.of(config, StageError), "backend": backend}
        # an OpenIE file of its own: the build may read a sparser one than enrichment does
        own = FeedbackEnrichSettings.of(config, StageError).precomputed_file
        extract_cfg["precomputed_file"] = own or extract_cfg["precomputed_file"]
        self.backend, self.failed = backend, 0
        self.calls = 0  # chunks an LLM backend extracted (a cached chunk makes no call)
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}
        self.results: dict[str, list] = {}
        if backend == "precomputed":
            self.by_doc = _openie_by_document(precomputed_file(extract_cfg, dump))
        else:
            from lokg.text.extractors import make_extractor

            self.extractor = make_extractor(extract_cfg)
            self.cache = ChunkCache(cache_root(extract_cfg, out), self.extractor.fingerprint)

    def triples(self, chunk: dict) -> list:
        """The chunk's triples (precomputed: its document's); a failing chunk has none."""
        if chunk["chunk_id"] not in self.results:
            if self.backend == "precomputed":
                found = self.by_doc.get(chunk["doc_id"], [])
            else:
                from lokg.text.triple_extract import extract_one

                result, cached, reason = extract_one(self.extractor, self.cache, chunk)
                self.failed += bool(reason)
                usage = {} if cached else result.get("usage") or {}
                self.calls += bool(usage)
                for k in self.usage:
                    self.usage[k] += int(usage.get(k, 0))
                found = [] if reason else result.get("triples") or []
            self.results[chunk["chunk_id"]] = [t for t in found if as_triple(t)]
        return self.results[chunk["chunk_id"]]


def _openie_by_document(path: Path) -> dict[str, list]:
    """A HippoRAG-style OpenIE file's triples by the document id its passage has."""
    return {doc_id: doc.get("extracted_triples") or []
            for doc_id, doc in openie_passages(path, STAGE) if doc_id is not None}


def published(store: Store) -> tuple[Build | None, str]:
    """The CURRENT build when it has a chunk index to retrieve from, else why not."""
    current = store.current_id()
    if current is None:
        return None, "nothing to enrich from: the store has no published build"
    build = store.build(current)
    problem = chunk_index_problem(build)
    return (None, f"nothing to enrich from: {problem}") if problem else (build, "")


def chunk_index_problem(build: Build) -> str:
    """Why ``build`` has no chunk index to retrieve passages from ("" when it has one)."""
    if not build.manifest["tables"].get("chunks", {}).get("rows") or \
            not (build.path / "chunk_vectors.npy").is_file():
        return f"build {build.build_id} has no chunks (no documents)"
    return ""


def _open(sqs: list[SubQuestion], state: dict[str, Tried], fingerprint: str,
          cfg: Mapping) -> tuple[list[SubQuestion], dict]:
    """The sub-questions to enrich, most asked first — new ones; ones that found nothing on
    other passages; and, **re-opened** at the next ``k`` passages (down to ``max_passages``),
    ones asked again after their delta was written (its question still lacks something) —
    and how many were closed as answered, as tried, or re-opened."""
    deepest = int(cfg["max_passages"])
    todo, counts = [], {"closed_answered": 0, "closed_tried": 0, "reopened": 0}
    for sq in sqs:
        st = state.get(sq.key)
        if st is not None and st.depth is not None and st.depth < deepest \
                and st.asked_after(sq) and not sq.passages:  # a question's passages: all tried
            sq.skip = st.depth
            counts["reopened"] += 1
        elif st is not None and (st.answered or st.fingerprint == fingerprint):
            counts["closed_answered" if st.answered else "closed_tried"] += 1
            continue
        todo.append(sq)
    limit = int(cfg["max_sub_questions"])
    return sorted(todo, key=lambda sq: -len(sq.feedback_ids))[:limit], counts


def bridge_ranks(config: Mapping, cfg: Mapping) -> range:
    """The ranks of a question's passages that get a bridge: past the runtime's own passage
    seeds (``query.passages``: their triples already enter the question's context), at most
    ``bridge_passages`` of them: a bridge to every passage crowds the contexts and loses more
    golds than it joins (docs/BENCHMARKS.md "Documents: LOKG against dense chunk retrieval")."""
    seeds = QuerySettings.of(config, StageError).passages
    return range(seeds, seeds + int(cfg["bridge_passages"]))


def enrich(config: Mapping, cfg: Mapping, build: Build, sqs: list[SubQuestion],
           dump: Path, out: Path) -> dict:
    """Enrich the open sub-questions from ``build``'s passages; persist the delta."""
    backend = cfg["backend"] or TripleExtractSettings.of(config, StageError).backend
    root, k = deltas_dir(build.root), int(cfg["k"])
    with torch_threads(cfg.get("threads")):
        pub = Published(build, published_encoder(STAGE, build, cfg["device"]))
        fingerprint = pub.fingerprint(cfg, backend)
        todo, closed = _open(sqs, earlier(root, build.build_id), fingerprint, cfg)
        extraction = Extraction(config, backend, dump, out)
        named = aliases([sq for sq in todo if sq.relation == ALIAS], pub, k)
        found = retrieved([sq for sq in todo if sq.relation != ALIAS], pub, extraction, k,
                          bridge_ranks(config, cfg))
        cands = with_relations([c for c in found if c.relation != BRIDGE], pub,
                               float(cfg["relation_min_cosine"]))
        cands += [c for c in found if c.relation == BRIDGE]
        delta = deduplicated(cands, pub, float(cfg["dedupe_threshold"]))
        delta.answered.update(named.answered)
        delta.aliases = named.aliases
    if todo:
        persist(root, build.build_id, delta, todo,
                {"from_build": build.build_id, "fingerprint": fingerprint, "backend": backend}, k)
    return {"backend": backend, **closed, "enriched": len(todo), "answered": len(delta.answered),
            "found_nothing": len(todo) - len(delta.answered), "candidates": len(cands),
            "delta_triples_new": len(delta.rows), "duplicates": delta.duplicates,
            "aliases_new": sum(len(e["aliases"]) for e in delta.aliases.values()),
            "failed_chunks": extraction.failed}


def run(config: Mapping, inputs: Mapping[str, str], out_dir: str) -> dict:
    cfg = FeedbackEnrichSettings.of(config, StageError)
    store = Store(stage_input(inputs, STAGE, "store"))
    out, lap = Path(out_dir), Laps()
    log = read_log(log_dir(store.root))
    sqs = sub_questions(log.records) + alias_questions(log.records)
    report: dict = {"log_records": len(log.records), "skipped_log_lines": len(log.skipped),
                    "skipped": [f"{where}: {why}" for where, why in log.skipped[:20]],
                    "sub_questions": len(sqs)}
    build, reason = published(store)
    if build is not None and sqs:
        report.update(from_build=build.build_id,
                      **enrich(config, cfg, build, sqs, stage_input(inputs, STAGE, "dump"), out))
    else:
        report["nothing_to_enrich"] = reason or "no feedback in the log"
    lap("enrich")
    report.update(consolidated(deltas_dir(store.root), out / "feedback_delta"))
    lap("write")
    report["step_seconds"] = lap.seconds
    return {"outputs": {"feedback_delta": str(out / "feedback_delta")}, "report": report}

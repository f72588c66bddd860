"""The stages of a build, in execution order — a table with no imports (the DAG reads it).

A stage's name is its module's name (``spark_jobs/<name>.py`` or ``training/<name>.py``) and
its config section's name. It declares the artefacts it reads (``inputs``: the ``dump``, the
``store`` root (the store being refreshed: its feedback log and published build) or the
outputs of earlier stages; ``optional`` ones are passed when an earlier stage produced them) and
the artefacts it writes (``outputs``, and ``optional_outputs`` it may leave out); the driver
checks both. An artefact produced by two stages
is the later one's from then on (``scos_merge`` rewrites ``triples`` and ``relations``).

``refresh`` says what a refresh build (``pipeline.refresh``) does with the stage when a cached
previous build exists: ``reuse`` — its outputs are linked from the cache when its fingerprint
(code, config, input hashes) is the cached one, else it runs in full; ``partial`` — as reuse,
and when only its input data changed it runs with the cached outputs as ``previous:<artefact>``
inputs and recomputes only what changed; ``full`` — it always runs in full (it reads the store,
or nothing more is built for it yet). ``config_sections``: sections other than its own that
its outputs depend on (part of the fingerprint).
"""

from __future__ import annotations

from typing import NamedTuple


class Stage(NamedTuple):
    """One stage: where its module lives and which artefacts it reads and writes."""

    name: str
    package: str  # spark_jobs (run with spark-submit) | training (GPU-capable) | text: python -m
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    optional: tuple[str, ...] = ()
    #: outputs a stage writes only when its input allows (entity_encode's exported question
    #: model: BERT models only; ingest's line store: dumps the line rules read); the others it
    #: must always write
    optional_outputs: tuple[str, ...] = ()
    refresh: str = "full"  # reuse | partial | full (above)
    config_sections: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return f"lokg.{self.package}.{self.name}"

    @property
    def kind(self) -> str:
        """How a task runs it: spark (spark-submit), train (python -m, GPU-capable), python."""
        return {"spark_jobs": "spark", "training": "train"}.get(self.package, "python")


STAGES: tuple[Stage, ...] = (
    Stage("documents", "text", ("dump",),
          ("documents", "chunks", "sentences", "document_quarantine"),
          refresh="reuse", config_sections=("ingest",)),
    Stage("triple_extract", "text", ("dump", "documents", "chunks", "sentences"),
          ("extracted", "extraction_sources", "extraction_quarantine"),
          refresh="reuse", config_sections=("ingest",)),
    Stage("feedback_enrich", "text", ("dump", "store"), ("feedback_delta",)),  # reads the store
    # partial: parses only the lines its line store (dump_lines) lacks, derives the tables from
    # all lines' rows with the same SQL, and diffs them with the previous build's (change set)
    Stage("ingest", "spark_jobs", ("dump",),
          ("entities", "relations", "triples", "quarantine", "type_assertions", "change_set"),
          optional=("extracted", "feedback_delta"), optional_outputs=("dump_lines",),
          refresh="partial"),
    Stage("entity_types", "spark_jobs", ("entities", "relations", "triples"), ("entities",),
          optional=("type_assertions",), refresh="reuse"),
    # partial: warm-starts from the previous vectors by key (entities: their keys), a few epochs
    Stage("transe", "training", ("triples", "relations", "entities"),
          ("relation_embeddings", "transe_run"), refresh="partial"),
    Stage("relation_stats", "spark_jobs", ("entities", "relations", "triples"),
          ("relation_stats", "relation_pairs"), optional=("relation_embeddings",),
          refresh="reuse"),
    # partial: the cosine term keeps the previous relation vectors while the warm TransE moved
    # them less than scos_merge.refresh_max_vector_shift; the merge itself always reruns
    Stage("scos_merge", "spark_jobs",
          ("entities", "relations", "triples", "relation_stats", "relation_pairs"),
          ("relation_map", "merge_log", "triples", "relations"), optional=("relation_embeddings",),
          refresh="partial", config_sections=("relation_stats",)),
    # partial: recomputes the rows of the changed triples' endpoints, copies the others
    Stage("node_gain", "spark_jobs", ("entities", "relations", "triples"), ("node_gain",),
          refresh="partial"),
    Stage("entity_encode", "training", ("entities",),
          ("entity_vectors", "entity_index", "entity_ids", "encoder"),
          optional_outputs=("query_encoder", "span_encoder"), refresh="partial"),
    Stage("triple_context", "text",
          ("entities", "relations", "relation_map", "triples", "documents", "chunks",
           "sentences", "extraction_sources", "encoder"),
          ("triple_sources", "triple_context", "chunk_vectors", "sentence_vectors",
           "feedback_lineage"),
          optional=("feedback_delta", "query_encoder"), refresh="reuse"),
    Stage("gat", "training",
          ("entities", "relations", "triples", "relation_map", "relation_embeddings",
           "entity_ids", "entity_vectors"), ("edges", "gat_run"),
          refresh="partial"),  # warm-starts from the previous parameters, a few epochs
    # partial: searches the heads near a changed edge weight, copies the others' rows
    Stage("path_cache", "spark_jobs", ("edges", "node_gain", "entities"), ("path_cache",),
          refresh="partial"),
    Stage("relation_knowledge", "training", ("entities", "relations", "relation_map", "triples"),
          ("relknow",), optional=("encoder",), refresh="reuse"),
)

STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)


def stage(name: str) -> Stage:
    """The stage called ``name``; KeyError listing the stages otherwise."""
    for s in STAGES:
        if s.name == name:
            return s
    raise KeyError(f"unknown stage '{name}' (stages: {', '.join(STAGE_NAMES)})")


def producers(name: str) -> dict[str, str]:
    """Artefact → the stage before ``name`` whose output it is (the latest such stage)."""
    made: dict[str, str] = {}
    for s in STAGES:
        if s.name == name:
            return made
        made.update(dict.fromkeys((*s.outputs, *s.optional_outputs), s.name))
    raise KeyError(f"unknown stage '{name}' (stages: {', '.join(STAGE_NAMES)})")


def upstream(name: str) -> list[str]:
    """The stages ``name`` reads from, in execution order (its DAG dependencies)."""
    s, made = stage(name), producers(name)
    wanted = {made[a] for a in (*s.inputs, *s.optional) if a in made}
    return [n for n in STAGE_NAMES if n in wanted]

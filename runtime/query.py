"""The query runtime: ``Runtime.open(store).ask(question, budget=...)`` → an auditable Answer.

One question goes through the four steps of DESIGN §4 and makes at most one LLM call:

1. **link** (runtime/linker.py): caller-given ids or keys, else exact/normalised name match,
   else the vector fallback when the store's encoder is installed;
2. **retrieve** — ``taimr`` (default): the cached top paths of each linked head (cold heads are
   computed on demand by the same scorer the offline job used, runtime/taimr.py); every entity
   reached is a candidate answer ranked by S_final = S_topo(best path) + λ_q·cos(enc(q), enc(a))
   (the semantic term needs the encoder extra; without it S_final = S_topo and the Answer says
   so); the triples supporting the best paths of the top ``max_candidates`` candidates form the
   candidate set. ``similarity`` (ablation "w/o TAIMR") ranks the same reachable entities by the
   cosine alone; ``neighbourhood`` (baseline) takes the linked entities' 1-hop triples;
3. **encode** — ``ittc``: ITTC under the knowledge budget B (runtime/ittc.py; σ* and H(O|R) come
   with the build, runtime/query_stats.py); ``uniform`` (ablation "w/o ITTC"): every triple at
   the balanced template in s-r-o order, cut by rank to fit B;
4. **read** — one call to the chosen backend (``none``: no call, the top-ranked candidate is the
   answer). A failed call returns the ``none`` answer with ``fallback`` set and the reason.

``ask`` is one chain of steps, each a method: check the request → link → relation plan →
retrieve → encode → read → answer. The relation plan (runtime/relknow.py, on stores with
relation knowledge) is computed once, before retrieval: it may be the answer itself (a passed
gate, or policy precision's abstention); otherwise every later step reads what it decided
(the compact context, the query-relation term, the boosted facts). The question is embedded
at most once per form, the masked form (relation knowledge) and the plain one (the semantic
term) in one encoder batch.

The prompt is the fixed instructions + ``Knowledge:`` + the encoded lines + the question; the
knowledge never exceeds B tokens (cl100k_base, counted on the final text), so the whole prompt
is at most B plus its fixed overhead, which the Answer reports separately.

Bad input never surfaces as a traceback: invalid arguments raise :class:`QueryError` (a
ValueError whose message names the argument), and questions the store cannot answer (nothing
linked, no path) return a well-formed Answer whose ``status`` says why.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from lokg.runtime import feedback, ittc, object_store, overlay, pins, relknow, taimr
from lokg.runtime.answer import Answer
from lokg.runtime.answers import (ANSWER_MAX_TOKENS, Prompt, build_prompt, choice_lines,
                             parse_answers, prompt_overhead)
from lokg.runtime.config import DEFAULT_BUDGET, ENCODINGS, MAX_BUDGET, POLICIES, RETRIEVALS
from lokg.runtime.contract import (INCOMING_TYPE_PREFIX, Build, Store, StoreError, is_url,
                              read_parquet, to_numpy)
from lokg.runtime.environment import limit_blas_threads
from lokg.runtime.encoder import EncoderError
from lokg.runtime.errors import LokgError
from lokg.runtime.linker import (FALLBACK, LINKER_FORMS_FILE, Link, Linker, common_nouns, normalise,
                            spelled_topics, surface_forms, vector_fallback)
from lokg.runtime.llm import LLM, LLMError, make_llm
from lokg.runtime.path_cache import PathCache, PathRow, path_rows, path_triples
from lokg.runtime.provenance import Provenance
from lokg.runtime.query_settings import QuerySettings
from lokg.runtime.query_stats import QUERY_STATS_FILE, query_stats, read_query_stats
from lokg.runtime.question_encoder import CachedEmbeddings, query_encoder
from lokg.runtime.question_text import hop_runs, mask_topic
from lokg.runtime.relknow import Triple
from lokg.runtime.tokens import count_tokens

#: Hard limits on a request; beyond them ask() refuses with a QueryError.
MAX_QUESTION_CHARS = 4096
MAX_GIVEN_ENTITIES = 32
#: Heads missing from the path cache whose computed paths are kept in memory, as taimr's flat
#: arrays (~10 KiB a head on FB15k-237, ~40 MiB when full; as rows they would be ~7x that).
COLD_HEADS_KEPT = 4096


class QueryError(LokgError, ValueError):
    """A request the runtime refuses (bad argument); the message names the argument."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def _refuse_lone_surrogates(question: str) -> None:
    """A lone surrogate (what undecodable bytes on a command line or a JSON ``"\\ud800"``
    escape become) is not text: the question encoder's tokenizer raises on it, and replacing
    it would answer a question nobody asked, so it is refused, saying where it is."""
    found = _SURROGATE.search(question)
    if found is not None:
        raise QueryError(f"question is not valid Unicode text: lone surrogate "
                         f"U+{ord(found.group()):04X} at character {found.start() + 1} "
                         "(undecodable bytes, e.g. from a non-UTF-8 terminal); send UTF-8 text")


@dataclass(frozen=True)
class Candidate:
    """One candidate answer: the entity, its scores and the best path that reaches it."""

    id: int
    name: str
    s_final: float
    s_topo: float
    cos: float
    path: tuple[int, PathRow] | None = None  # (head, best path); None for a derived endpoint

    @property
    def triples(self) -> list[Triple]:
        """The KG triples of the best path (none for a derived endpoint)."""
        return path_triples(*self.path) if self.path is not None else []

    def to_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "s_final": self.s_final,
                "s_topo": self.s_topo, "cos": self.cos}


@dataclass(frozen=True)
class RelationPlan:
    """What the relation knowledge decided for one question, once, before retrieval; the later
    steps read it instead of re-deriving it. The default is "not consulted" (policy lokg with
    the feeds off, or a store without relation knowledge)."""

    knowledge: relknow.RelationKnowledge | None = None
    assessment: relknow.Assessment | None = None
    route: dict | None = None  # Answer.route before the read; None: not consulted
    passed: bool = False  # the policy's gate passed: the derived endpoints are the answer
    final: bool = False  # the plan is the answer: passed, or policy precision abstains
    compact: bool = False  # policy route past its gate: read the derived chain's facts only
    relation_weight: float = 0.0  # λ_rel of the query-relation term (0: no term)
    boosted: tuple[Triple, ...] = ()  # the derived chain's facts: in the context, in focus

    def relation_term(self, path: PathRow) -> float:
        """λ_rel·q_rel(p), added to a path's S_topo to rank its endpoint."""
        return self.relation_weight * self.knowledge.relation_term(
            self.assessment.prediction, path[1], path[2])


@dataclass(frozen=True)
class _Request:
    """The arguments of one ask(), checked, with the settings' defaults filled in."""

    question: str
    budget: int
    reader: LLM
    policy: str
    retrieval: str
    encoding: str
    relation_weight: float
    chain_boost: bool
    source_sentences: bool  # restored source sentences offered as the verbose granularity


@dataclass(frozen=True)
class _Retrieval:
    """Step 2's result: the ranked candidate answers and the candidate set of triples, each
    with its retrieval score (the S_final of the candidate whose path brought it first)."""

    candidates: list[Candidate]
    triples: list[Triple]
    scores: list[float]
    sources: dict[int, str]  # head → cache | computed
    semantic: bool  # a question vector was at hand (Answer.encoding.semantic)


def _why_no_call(reader, listed: list[Candidate],
                 supported: frozenset[int] | None) -> str | None:
    """Why the reader is not called (None: it is): no model, a forced choice with the top
    candidate alone, or none of the others reached by the predicted chain."""
    if not reader.calls_model:
        return "no LLM"
    if len(listed) == 1:
        return "no other candidate within query.choice_margin of the top one, no call"
    if supported is not None and not any(c.id in supported for c in listed[1:]):
        return ("no other near-tied candidate is reached by the predicted relation chain "
                "(query.choice_check), no call")
    return None


@dataclass(frozen=True)
class _Reading:
    """Step 4's result: the answers, how they were obtained, and the prompt they came from."""

    answers: list[str]
    answer_ids: list[int | None]
    status: str
    message: str
    fallback_reason: str | None
    calls: int
    completion: int  # tokens of the reply
    prompt: Prompt
    choices: tuple[str, ...] = ()  # the candidates listed for a forced choice
    vetoed: bool = False  # a forced choice's pick the derivation does not reach: the top kept


class _Timer:
    """Milliseconds per step of one ask() (each since the previous lap), and the total."""

    def __init__(self):
        self.timings: dict[str, float] = {}
        self._started = self._last = time.perf_counter()

    def mark(self) -> None:
        """Start the next step here: the time before it counts in the total only."""
        self._last = time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.timings[step] = round((now - self._last) * 1000.0, 3)
        self._last = now

    def done(self) -> dict[str, float]:
        self.timings["total"] = round((time.perf_counter() - self._started) * 1000.0, 3)
        return self.timings


NO_ENTITY = ("no entity of the store was found in the question; pass entity ids to ask about "
             "a specific entity")
NO_FACTS = "the linked entities have no facts in the store"
NO_RELATION_KNOWLEDGE = "the store has no relation knowledge (stage relation_knowledge)"
READ_FAILED = "LLM call failed or gave no answer; top retrieval answer returned"


def _current(store: Store) -> str:
    """The id CURRENT names (read once, no manifest); Store.build's error when there is none."""
    return store.current_id() or store.build().build_id


def _pinned_build(store: Store, build_id: str | None, verify: bool):
    """The build to open and its pin. CURRENT is read again once if the build it named was
    removed between reading CURRENT and pinning (a publish with retention in that gap)."""
    wanted = build_id if build_id is not None else _current(store)
    try:
        held = store.pin(wanted)
    except StoreError:
        if build_id is not None:
            raise
        wanted = _current(store)
        held = store.pin(wanted)
    try:
        return store.build(wanted, verify=verify), held
    except BaseException:
        pins.release(held)
        raise


def _opened_build(store_root: str | Path, build_id: str | None, verify: bool):
    """The build to open and the pins that hold it. A store on object storage is first
    synced into its local cache (runtime/object_store.py), which is then opened as a local
    store; the object pin keeps the build from retention there too."""
    if is_url(store_root):
        cache, build_id, held = object_store.RemoteStore(str(store_root)).sync(
            build_id, verify=verify)
        try:
            return cache.build(build_id, verify=False), held
        except BaseException:
            object_store.release(*held)
            raise
    root = Path(store_root)
    if not root.is_dir():
        raise StoreError(f"{root}: not a directory — not a LOKG store")
    build, held = _pinned_build(Store(root), build_id, verify)
    return build, [held]


def _logging_feedback(ask: Callable[..., Answer]) -> Callable[..., Answer]:
    """``Runtime.ask``, then what its answer found missing to the feedback log (every outcome,
    from no entity to a full reading; an append never fails the answer)."""

    @functools.wraps(ask)
    def logged(self: Runtime, *args, **kwargs) -> Answer:
        answer = ask(self, *args, **kwargs)
        if self.feedback is not None:
            self.feedback.append_missing(answer)
        return answer

    return logged


class Runtime:
    """A published build, opened once: tables in memory, vectors memory-mapped, LLMs cached."""

    def __init__(self, build: Build, settings: dict, open_ms: float):
        self.build = build
        self.build_id = build.build_id
        self.settings = settings
        self.open_ms = open_ms
        self._llms: dict[str, LLM] = {}
        self._llm_lock = threading.Lock()
        self._encoder = None
        self._spans: CachedEmbeddings | None = None
        self._encoder_error: str | None = None
        self._fields: dict[int, tuple[str, str, tuple, tuple]] = {}
        self._cold: OrderedDict[int, taimr.Paths] = OrderedDict()
        self._cold_lock = threading.Lock()
        self._domains: relknow.HopDomains | None = None
        self._asked = threading.local()  # .vector: (question, its plain vector) this thread embedded
        if settings["threads"]:
            limit_blas_threads(int(settings["threads"]))
        self._load()

    # ---------------------------------------------------------------- opening

    @classmethod
    def open(cls, store_root: str | Path, *, build_id: str | None = None, verify: bool = True,
             **settings) -> Runtime:
        """Resolve CURRENT (or ``build_id``) once, pin it, verify the manifest, load the build.

        The pin (runtime/pins.py) keeps retention from deleting the build while this Runtime
        exists; :meth:`close` (or the Runtime's collection) releases it. Raises StoreError
        (naming the file) for anything that is not a complete, intact build. An ``s3://``
        ``store_root`` is served from its verified local cache (runtime/object_store.py).
        ``settings`` override the ``query`` section of the config defaults.
        """
        started = time.perf_counter()
        unknown = set(settings) - set(QuerySettings.rules())
        if unknown:
            raise QueryError(f"unknown runtime settings: {sorted(unknown)}")
        build, held = _opened_build(store_root, build_id, verify)
        try:
            config = build.manifest.get("config") or {}
            runtime = cls(build, {**QuerySettings.merged(config), **settings}, 0.0)
        except BaseException:
            object_store.release(*held)
            raise
        runtime._release = weakref.finalize(runtime, object_store.release, *held)
        runtime.open_ms = (time.perf_counter() - started) * 1000.0
        return runtime

    def with_triples(self, extra: Sequence[overlay.ExtraTriple]) -> Runtime:
        """This build plus ``extra`` triples held in memory, as a Runtime that answers over
        both (runtime/overlay.py: the online feedback loop's graph); the store is not written
        and this Runtime is unchanged."""
        return overlay.overlaid(self, extra)

    def close(self) -> None:
        """Release the build's pin (tables already in memory stay usable; lazily read files,
        such as path-cache buckets, may be gone once retention runs)."""
        release = getattr(self, "_release", None)
        if release is not None:
            release()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _load(self) -> None:
        """Everything a question needs, read once. The triples table is read only by what
        needs it: statistics of a build without its stats file, a graph without TAIMR
        artefacts, the relation knowledge's facts."""
        b = self.build
        tables = b.manifest.get("tables", {})
        self._load_entities(b.read("entities"))
        rel = b.read("relations")
        self.name_relations(dict(zip(rel.column("id").to_pylist(), rel.column("name").to_pylist())))
        self.n_relations = max(self.relation_names, default=-1) + 1
        triples = functools.cache(lambda: b.read("triples"))
        self.order, self.tail_entropy = self._query_stats(triples)
        self.has_taimr = "edges" in tables and "node_gain" in tables
        self.graph = self._graph(triples)
        self.linker = self._linker(triples)
        # the build's own path_cache settings (its manifest records the resolved config)
        cache_cfg = (b.manifest.get("config") or {}).get("path_cache") or {}
        self.path_settings = {k: cache_cfg[k] for k in
                              ("max_hops", "k_top", "beam_width", "lambda_topo") if k in cache_cfg}
        self.path_cache = None
        if "path_cache" in tables:
            report = b.manifest.get("report", {}).get("stages", {}).get("path_cache", {})
            buckets = int(report.get("buckets") or cache_cfg["buckets"])
            self.path_cache = PathCache(b.table_path("path_cache"), buckets,
                                        keep=int(self.settings["cached_buckets"]))
        vec_path = b.path / "entity_vectors.npy"
        self.vectors = np.load(vec_path, mmap_mode="r") if vec_path.is_file() else None
        enc_path = b.path / "models" / "encoder.json"
        self.encoder_spec = json.loads(enc_path.read_text()) if enc_path.is_file() else None
        self.relknow = self._relation_knowledge(triples)
        self.provenance = Provenance(b)
        self.feedback = self._feedback_log()
        # Decoding the tables leaves Arrow's allocator holding the freed decode buffers (~35
        # MiB on FB15k-237); none of it is in use once they are loaded, so it goes back.
        pa.default_memory_pool().release_unused()

    def name_relations(self, names: dict[int, str]) -> None:
        """The relations' names, and the ids of the feedback bridges among them (ranked apart
        from the facts, :meth:`_rank`)."""
        self.relation_names = names
        self._bridge_relations = frozenset(i for i, name in names.items()
                                           if name == feedback.BRIDGE)

    def _feedback_log(self) -> feedback.FeedbackLog | None:
        """This process's appender to the store's feedback log (setting ``query.feedback``)."""
        s = self.settings
        if not s["feedback"]:
            return None
        try:  # the LLM that lists missing facts (runtime/feedback_llm.py): only when named
            identify = self.llm(s["feedback_llm"]) if s["feedback_llm"] else None
        except LLMError as exc:
            raise QueryError(f"query.feedback_llm: {exc}") from None
        return feedback.FeedbackLog(s["feedback_dir"] or feedback.log_dir(self.build.root),
                                    keep_questions=bool(s["feedback_questions"]),
                                    segment_bytes=int(s["feedback_segment_mb"]) << 20,
                                    max_bytes=int(s["feedback_max_mb"]) << 20,
                                    bridges=int(s["feedback_bridges"]), identify=identify,
                                    passages=functools.partial(self.question_passages,
                                                               n=int(s["feedback_passages"])))

    def _load_entities(self, ent: pa.Table) -> None:
        ids = to_numpy(ent.column("id"))
        self.n_entities = len(ids)
        if not np.array_equal(ids, np.arange(self.n_entities)):
            raise StoreError(f"{self.build.table_path('entities')}: entity ids are not 0..n-1 "
                             "in order")
        # Rendering fields as Python lists once: per-row Arrow access costs ~60 µs an entity.
        # The table itself is not kept: its buffers would duplicate the lists and pin pages
        # of Arrow's allocator (~11 MiB resident on FB15k-237).
        self._types = ent.column("types").to_pylist()
        self._descriptions = ent.column("description").to_pylist()
        self._aliases = ent.column("aliases").to_pylist()
        self._attributes = ent.column("attributes").to_pylist()
        self.names: list[str] = ent.column("name").to_pylist()
        self.keys: list[str] = ent.column("key").to_pylist()

    def _query_stats(self, triples: Callable[[], pa.Table]) -> tuple[tuple[str, ...], np.ndarray]:
        """σ* and H(O|R) from the build's stats file; builds published before it had one get
        them computed here, as every open did before."""
        path = self.build.path / QUERY_STATS_FILE
        if path.is_file():
            return read_query_stats(path, self.n_relations)
        stats = query_stats(triples(), self.n_relations)
        return tuple(stats["component_order"]), np.asarray(stats["tail_entropy_bits"])

    def _graph(self, triples: Callable[[], pa.Table]) -> taimr.EdgeGraph:
        if self.has_taimr:
            return taimr.EdgeGraph.from_tables(self.build.read("edges"),
                                               self.build.read("node_gain"))
        edges = taimr.uniform_edges(triples())  # no TAIMR artefacts: uniform attention, μ = 1
        return taimr.EdgeGraph(*(to_numpy(edges.column(c))
                                 for c in ("s", "r", "o", "inverse", "attention")),
                               np.ones(self.n_entities))

    def _linker(self, triples: Callable[[], pa.Table]) -> Linker:
        """The surface-form index, from the forms the build folded at publish (builds
        published before that have their names, keys and aliases folded here); the common
        nouns only feedback added link as a fallback (runtime/linker.py); in a graph extracted
        from documents (its triples have sources) a written name also links its qualified
        forms, which such a graph splits one thing over (a curated KG's names are its own:
        "The Long Road II" is the sequel, not "The Long Road")."""
        degree = self.graph.out_degree()
        fallback = common_nouns(self.names, feedback.feedback_entities(self.build, triples))
        extracted = self.build.manifest.get("tables", {}).get("triple_sources", {}).get("rows")
        qualified = int(self.settings["qualified_links"]) if extracted else 0
        path = self.build.path / LINKER_FORMS_FILE
        if path.is_file():
            table = read_parquet(path)
            forms = zip(table.column("id").to_pylist(), table.column("form").to_pylist())
            return Linker(forms, degree, folded=True, fallback=fallback, max_qualified=qualified,
                          names=self.names)
        return Linker(surface_forms(self.names, self.keys, self._aliases), degree,
                      fallback=fallback, max_qualified=qualified, names=self.names)

    def _relation_knowledge(self, triples: Callable[[], pa.Table]
                            ) -> tuple[relknow.RelationKnowledge, relknow.Facts] | None:
        path = self.build.path / "models" / relknow.ARTEFACT
        if not path.is_dir():
            return None
        names = {name: i for i, name in self.relation_names.items()}
        try:
            know = relknow.RelationKnowledge.load(path, names)
        except relknow.RelknowError as exc:
            raise StoreError(str(exc)) from None
        table = triples()
        return know, relknow.Facts(*(to_numpy(table.column(c)) for c in "sro"), self.n_relations)

    # ---------------------------------------------------------------- optional encoder

    def encoder(self):
        """The store's question encoder (numpy for BERT models, else sentence-transformers:
        ``query.encoder_backend``), or None when it cannot be loaded (the reason is kept)."""
        if self._encoder is None and self._encoder_error is None:
            if self.encoder_spec is None:
                self._encoder_error = "the store has no encoder"
            else:
                try:
                    from lokg.runtime.onnx_bert import exported_model

                    self._encoder = query_encoder(
                        self.encoder_spec, self.settings["encoder_backend"],
                        threads=self.settings["threads"],
                        exported=exported_model(self.encoder_spec, self.build.path / "models"))
                except Exception as exc:  # ImportError without torch, or a bad model path
                    self._encoder_error = f"encoder unavailable: {exc}"
        return self._encoder

    def _span_embedder(self) -> CachedEmbeddings | None:
        """The encoder for question spans, through a cache: spans recur across questions. Spans
        are compared with relation names the build embedded in float32, so an int8 ONNX
        question encoder gives way here to the float32 numpy one on the same weights (zero-shot
        H@1 0.867 / 0.873 / 0.847 on three stores in any question order, docs/BENCHMARKS.md
        "int8 vectors independent of the batch"); where that cannot run, the question encoder."""
        if self._spans is None and self.encoder() is not None:
            encoder = self.encoder()
            if getattr(encoder, "backend", None) == "onnx":
                with contextlib.suppress(EncoderError):
                    encoder = query_encoder(self.encoder_spec, "numpy")
            self._spans = CachedEmbeddings(encoder)
        return self._spans

    def _embed(self, masked: str | None, plain: str | None
               ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The question's masked form (relation knowledge) and plain form (entity vectors) as
        vectors, from one encoder batch: an encoder call costs far more than a second text in
        it. A form passed as None, or either without the encoder, comes back None."""
        enc = self.encoder()
        texts = [t for t in (masked, plain) if t is not None]
        if enc is None or not texts:
            return None, None
        vectors = list(enc.encode_queries(texts))
        masked_vec = vectors.pop(0) if masked is not None else None
        plain_vec = np.asarray(vectors.pop(0), dtype=np.float32) if plain is not None else None
        if plain_vec is not None:
            self._asked.vector = (plain, plain_vec)
        return masked_vec, plain_vec

    def question_passages(self, question: str, n: int) -> list[str]:
        """The ids of the ``n`` chunks nearest the question (none without chunks or encoder):
        the passages a feedback record names for the refresh to extract. The vector is the one
        this thread's query embedded for the same question where it embedded one (the log's
        append then costs no encoder forward), else embedded now."""
        if n <= 0 or self.provenance.chunk_vectors is None:
            return []
        asked, vector = getattr(self._asked, "vector", (None, None))
        if asked != question:  # the query answered without embedding it: no vector to reuse
            vector = self._embed(None, question)[1]
        return [] if vector is None else self.provenance.nearest_chunks(vector, n)

    def _search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores = np.asarray(self.vectors @ query[0], dtype=np.float32)
        top = np.argsort(-scores, kind="stable")[:k]
        return scores[top][None, :], top[None, :]

    # ---------------------------------------------------------------- LLMs

    def llm(self, spec: str | LLM) -> LLM:
        if not isinstance(spec, str):
            return spec
        key = spec.strip().lower()
        with self._llm_lock:
            if key not in self._llms:
                self._llms[key] = make_llm(key)
            return self._llms[key]

    # ---------------------------------------------------------------- ask

    @_logging_feedback
    def ask(self, question: str, *, entities: Sequence[int | str] | None = None,
            budget: int = DEFAULT_BUDGET, llm: str | LLM = "none", policy: str | None = None,
            retrieval: str = "taimr", encoding: str = "ittc", relation_weight: float | None = None,
            chain_boost: bool | None = None, source_sentences: bool = True) -> Answer:
        """Answer one question with at most one LLM call (module docstring). Default ``policy``:
        ``route`` on a store with relation knowledge, else ``lokg``. ``"precision"`` returns the
        derived answer (runtime/relknow.py) where the precision gate passes, else abstains;
        ``"route"`` returns it where the routing gate passes, else makes the one call on the
        compact context of the instantiated chain (else the LOKG context). ``relation_weight``
        adds λ_rel·q_rel(p_a) to S_final; ``chain_boost`` gives ITTC's λ_boost to the chain's
        facts; ``source_sentences``: restored sentences as ITTC's verbose rendering (§8)."""
        timer = _Timer()
        req = self._check(question, budget, llm, policy, retrieval, encoding, relation_weight,
                          chain_boost, source_sentences)
        timer.mark()
        links, linked_vec = self._link(question, entities)
        timer.lap("link")
        base = self._common_fields(req, links)
        heads = list(dict.fromkeys(link.id for link in links))
        if not heads:
            return Answer.empty("no_entity", NO_ENTITY, timer.done(), budget=req.budget, **base)
        topics = spelled_topics(question, links, self._surface_forms)
        plan, batch_vec = self._plan(req, heads, topics, linked_vec)
        if plan.route is not None:
            timer.lap("relknow")
        base["route"] = plan.route
        if plan.final:
            return self._derived(req, base, plan, heads, (linked_vec, batch_vec), timer)
        q_vec = self._question_vector(req, plan, linked_vec, batch_vec)
        timer.lap("embed")
        found = self._retrieve(req, heads, q_vec, plan)
        timer.lap("retrieve")
        if not found.triples:
            return Answer.empty("no_paths", NO_FACTS, timer.done(), budget=req.budget, **base)
        knowledge, enc = self._encode(req, heads, found, plan)
        timer.lap("encode")
        reading = self._read(req, enc, found.candidates, plan)
        timer.lap("llm")
        return self._answer(req, base, plan, found, (knowledge, enc), reading, timer.done())

    # ---------------------------------------------------------------- 0. the request

    def _check(self, question, budget, llm, policy, retrieval, encoding, relation_weight,
               chain_boost, source_sentences=True) -> _Request:
        """Every argument checked (a QueryError naming it) before any work is done."""
        if not isinstance(question, str):
            raise QueryError(f"question must be a string; got {type(question).__name__}")
        if not question.strip():
            raise QueryError("question is empty")
        if len(question) > MAX_QUESTION_CHARS:
            raise QueryError(f"question is {len(question)} characters; the limit is "
                             f"{MAX_QUESTION_CHARS}")
        _refuse_lone_surrogates(question)
        if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
            raise QueryError(f"budget must be an integer number of tokens; got {budget!r}")
        if not 1 <= budget <= MAX_BUDGET:
            raise QueryError(f"budget must be between 1 and {MAX_BUDGET} tokens; got {budget}")
        if policy is None:
            policy = "route" if self.relknow is not None else "lokg"
        for name, value, allowed in (("policy", policy, POLICIES),
                                     ("retrieval", retrieval, RETRIEVALS),
                                     ("encoding", encoding, ENCODINGS)):
            if value not in allowed:
                raise QueryError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
        raw = self.settings["relation_weight"] if relation_weight is None else relation_weight
        try:
            weight = float(raw)
        except (TypeError, ValueError):
            weight = math.nan
        if not math.isfinite(weight) or weight < 0:
            raise QueryError(f"relation_weight must be a finite number >= 0; got {raw!r}")
        boost = bool(self.settings["chain_boost"] if chain_boost is None else chain_boost)
        try:
            reader = self.llm(llm)
        except LLMError as exc:
            raise QueryError(f"llm: {exc}") from None
        return _Request(question, int(budget), reader, policy, retrieval, encoding, weight, boost,
                        bool(source_sentences))

    def _common_fields(self, req: _Request, links: list[Link]) -> dict:
        """The Answer fields every outcome shares, from the no-entity one to a full reading."""
        reader = req.reader
        return dict(question=req.question,
                    llm={"backend": getattr(reader, "name", "?"),
                         "model": getattr(reader, "model", None),
                         "calls_model": bool(reader.calls_model)},
                    linked=[{**link.to_dict(), "key": self.keys[link.id],
                             "name": self.names[link.id]} for link in links],
                    build_id=self.build_id, retrieval=req.retrieval, policy=req.policy)

    # ---------------------------------------------------------------- 1. link

    def link(self, question: str, entities: Sequence[int | str] | None = None) -> list[Link]:
        """Step 1 alone: caller ids/keys, else string matches, else the vector fallback."""
        return self._link(question, entities)[0]

    def _link(self, question: str, entities) -> tuple[list[Link], np.ndarray | None]:
        """The links, and the plain question's vector when the vector fallback needed it."""
        if entities:
            return self._given(entities), None
        links, q_vec = self.linker.link(question), None
        if all(link.method == FALLBACK for link in links) and self.vectors is not None:
            q_vec = self._embed(None, question)[1]
            if q_vec is not None:
                links = vector_fallback(question, lambda _: q_vec[None, :], self._search,
                                        min_cosine=float(self.settings["min_link_cosine"])
                                        ) or links
        return links, q_vec

    def _given(self, entities: Sequence[int | str]) -> list[Link]:
        """Caller ids or keys as links (they skip the linker); unknown ones are refused."""
        if isinstance(entities, (str, int)):
            entities = [entities]
        if len(entities) > MAX_GIVEN_ENTITIES:
            raise QueryError(f"entities: at most {MAX_GIVEN_ENTITIES} ids; got {len(entities)}")
        links, unknown = [], []
        key_index = None
        for e in entities:
            if isinstance(e, bool):
                unknown.append(e)
            elif isinstance(e, (int, np.integer)):
                (links.append(Link(int(e), str(e), "given", 1.0))
                 if 0 <= e < self.n_entities else unknown.append(e))
            elif isinstance(e, str):
                if key_index is None:
                    key_index = {k: i for i, k in enumerate(self.keys)}
                (links.append(Link(key_index[e], e, "given", 1.0))
                 if e in key_index else unknown.append(e))
            else:
                unknown.append(e)
        if unknown:
            raise QueryError(f"entities: unknown entity ids or keys {unknown[:5]!r} "
                             f"(ids are 0..{self.n_entities - 1} in build {self.build_id})")
        return links

    # ---------------------------------------------------------------- 1b. relation plan

    def _plan(self, req: _Request, heads: list[int], topics: list[int],
              linked_vec: np.ndarray | None) -> tuple[RelationPlan, np.ndarray | None]:
        """The relation knowledge's view of the question, for the two policies that may answer
        from the graph and for the relation feeds; and the plain question's vector when
        retrieval may want it (embedded in the same batch as the masked question). The
        question is embedded with every linked mention masked; chains are derived from
        ``topics`` (the links the question spells exactly, linker.spelled_topics); without
        the encoder a labelled store still predicts from the lexicon."""
        feeds = req.relation_weight or req.chain_boost
        if req.policy == "lokg" and not (feeds and self.relknow is not None):
            return RelationPlan(), None
        if self.relknow is None:
            source = "abstain" if req.policy == "precision" else None
            return RelationPlan(route={"source": source, "reason": NO_RELATION_KNOWLEDGE},
                                final=req.policy == "precision"), None
        know, facts = self.relknow
        forms = [f for h in heads for f in self._surface_forms(h)]
        masked = mask_topic(req.question, forms)
        # the plain form rides along when the masked one is embedded (a derived answer
        # retrieves beside its chain unless query.derived_context is "chain"); alone it waits
        # for retrieval, which the compact context never runs
        by_vector = know.votes_by_question_vector
        with_plain = by_vector and self._wants_question_vector(req, linked_vec) and (
            req.policy != "precision" or self._derived_retrieves)
        masked_vec, batch_vec = self._embed(masked if by_vector else None,
                                            req.question if with_plain else None)
        assessment = know.assess(masked, topics, facts, q_vec=masked_vec,
                                 embed=self._span_embedder(), domains=self._hop_domains(),
                                 explain=req.policy == "precision",
                                 runs=hop_runs(req.question, forms))
        gate = know.precision_gate if req.policy == "precision" else know.route_gate
        passed, reason = (False, "") if req.policy == "lokg" else gate.check(
            assessment.prediction, assessment.derivation, assessment.consistency)
        d = assessment.derivation
        return RelationPlan(
            knowledge=know, assessment=assessment,
            route={**self._route_record(req.policy, gate, assessment, passed, reason),
                   "topics": [self.keys[e] for e in topics]},
            passed=passed, final=passed or req.policy == "precision",
            compact=req.policy == "route" and d is not None, relation_weight=req.relation_weight,
            boosted=tuple(d.facts) if req.chain_boost and d is not None else ()), batch_vec

    def _route_record(self, policy: str, gate: relknow.Gate, assessment: relknow.Assessment,
                      passed: bool, reason: str) -> dict:
        """Answer.route as the plan leaves it: the prediction, the derivation, the gate."""
        pred, d, cons = assessment.prediction, assessment.derivation, assessment.consistency
        name = self._relation_name

        def hops(chain):
            return [relknow.hop_name(h, name, self.n_relations) for h in chain]

        return {
            "source": ("derived" if passed else "abstain" if policy == "precision" else None),
            "reason": reason, "predictor": pred.source, "encoder": self._encoder_error,
            "chain": hops(pred.chain) if pred.chain else None,
            "vote_share": round(pred.share, 6), "vote_support": round(pred.support, 6),
            "votes": [{"chain": hops(v.chain), "weight": round(v.weight, 6),
                       "derivable": v.derivable} for v in pred.votes[:5]],
            "named_relations": sorted(name(r) for r in pred.named),
            "unexplained": list(pred.unexplained),  # looked for under precision only
            "derivable": bool(d is not None and d.derivable),
            "derived": [self.names[e] for e in d.endpoints[:10]] if d is not None else [],
            "derived_count": len(d.endpoints) if d is not None else 0,
            "consistency": cons.to_dict() if cons is not None else None,
            "flagged": bool(cons is not None and not cons.ok),
            "gate": {"name": policy, **gate.to_dict(), "passed": passed},
            "masked_question": assessment.masked,
            "hop_runs": [list(run) for run in assessment.runs.runs] if assessment.runs else None,
            "stopped": self._stopped(pred.stops, hops),
        }

    def _stopped(self, stops: Sequence[relknow.Derivation], hops: Callable) -> dict | None:
        """Where the best-voted chain whose walk stopped at a plausible gap found no fact (no
        voted chain instantiated; a shorter chain may have answered): the hop, and the entities it had reached whose types start that
        hop elsewhere in the graph — the missing facts of the feedback log. A stop no entity
        of those types could fill (an ill-typed vote) is no gap; None when every stop is one."""
        domains = self._hop_domains() if stops else None
        for d in stops:
            hop = d.chain[d.stop_hop]
            lacking = [e for e in d.stop_from if domains.fits(e, hop)]
            if lacking:
                return {"chain": hops(d.chain), "at": d.stop_hop + 1,
                        "hop": hops(d.chain)[d.stop_hop], "from_count": len(lacking),
                        "from": [{"key": self.keys[e], "name": self.names[e]}
                                 for e in lacking[:feedback.MAX_MISSING]]}
        return None

    def _hop_domains(self) -> relknow.HopDomains:
        """Hop domains over the entities' schema types: a type the build derived from the
        entity's own relations (entity_types' frequent_relation rule: a relation name, or
        ``~name`` of an incoming one — all of a text graph's) says nothing about a gap."""
        if self._domains is None:
            derived = set(self.relation_names.values())

            def schema_types(e: int) -> list[str]:
                return [t for t in self._types[e] or ()
                        if not t.startswith(INCOMING_TYPE_PREFIX) and t not in derived]

            self._domains = relknow.HopDomains(self.relknow[1], schema_types)
        return self._domains

    def _derived(self, req: _Request, base: dict, plan: RelationPlan, heads: list[int],
                 vectors: tuple[np.ndarray | None, np.ndarray | None], timer: _Timer) -> Answer:
        """The answer of a passed gate (the derived endpoints, no LLM call), or the abstention
        of policy precision. Its context is the chain's facts first, then the retrieval
        context in what they leave of the budget: a chain a refresh completed may be wrong,
        and the facts retrieval found stay before a reader of the answer."""
        reason = plan.route["reason"]
        if not plan.passed:
            return Answer.empty("abstained", f"abstained: {reason}", timer.done(),
                                budget=req.budget, **base)
        d = plan.assessment.derivation
        chain = self._retrieve(req, heads, None, replace(plan, compact=True))
        chain_enc = self._encode(req, heads, chain, plan)
        beside = self._retrieval_beside(req, heads, vectors, plan, req.budget - chain_enc[1].tokens
                                        ) if self._derived_retrieves else None
        timer.lap("context")
        parts = [(chain.triples, *chain_enc)] + ([beside] if beside is not None else [])
        lines = [self._lines(*part) for part in parts]
        encodings = [enc for _, _, enc in parts]
        knowledge, naive = sum(e.tokens for e in encodings), sum(e.naive_tokens for e in encodings)
        empty = Answer.empty("ok", f"derived from the graph: {reason}", timer.done(),
                             budget=req.budget, **base)
        return replace(
            empty,
            answers=[self.names[e] for e in d.endpoints], answer_ids=list(d.endpoints),
            triples=[t for triples, _ in lines for t in triples],
            candidates=[{"id": e, "name": self.names[e], "walks": w}
                        for e, w in zip(d.endpoints[:10], d.walks[:10])],
            tokens={**empty.tokens, "knowledge": knowledge, "naive": naive,
                    "tcr": knowledge / naive if naive else 1.0},
            citations=[c for _, citations in lines for c in citations])

    @property
    def _derived_retrieves(self) -> bool:
        return self.settings["derived_context"] == "retrieval"

    def _retrieval_beside(self, req: _Request, heads: list[int],
                          vectors: tuple[np.ndarray | None, np.ndarray | None],
                          plan: RelationPlan, budget: int
                          ) -> tuple[list[Triple], list[ittc.KnowledgeTriple], ittc.Encoding] | None:
        """The retrieval context of a derived answer, the chain's facts left out, encoded in
        ``budget`` tokens; None when no token is left or retrieval finds nothing else."""
        if budget < 1:
            return None
        looked = replace(plan, compact=False)
        q_vec = self._question_vector(req, looked, *vectors)
        found = self._retrieve(req, heads, q_vec, looked)
        chain = set(plan.assessment.derivation.facts)
        kept = [(t, s) for t, s in zip(found.triples, found.scores) if t not in chain]
        if not kept:
            return None
        found = replace(found, triples=[t for t, _ in kept], scores=[s for _, s in kept])
        return (found.triples, *self._encode(replace(req, budget=budget), heads, found, looked))

    def _lines(self, facts: list[Triple], knowledge: list[ittc.KnowledgeTriple],
               enc: ittc.Encoding) -> tuple[list[dict], list[dict]]:
        """Answer.triples and Answer.citations of one encoded context: the lines ITTC kept."""
        kept = [(f, k, e) for f, k, e in zip(facts, knowledge, enc.triples)
                if e.granularity is not None]
        triples = [{"s": k.subject, "r": k.relation, "o": k.object, "score": k.score,
                    "granularity": e.granularity, "cost": e.cost, "line": e.line}
                   for _, k, e in kept]
        return triples, self.provenance.citations((f, e.line) for f, _, e in kept)

    # ---------------------------------------------------------------- 2. retrieve

    def _wants_question_vector(self, req: _Request, q_vec: np.ndarray | None) -> bool:
        """Whether retrieval ranks with cos(enc(q), enc(a)) and has no question vector yet."""
        semantic = req.retrieval == "similarity" or float(self.settings["lambda_q"]) != 0.0
        return (q_vec is None and semantic and req.retrieval != "neighbourhood"
                and self.vectors is not None)

    def _question_vector(self, req: _Request, plan: RelationPlan, linked_vec: np.ndarray | None,
                         batch_vec: np.ndarray | None) -> np.ndarray | None:
        """The plain question's vector for the semantic term: linking's, else the relation
        plan's batch's, else embedded now. The compact context ranks nothing: it keeps
        linking's alone."""
        if plan.compact:
            return linked_vec
        q_vec = linked_vec
        if self._wants_question_vector(req, q_vec):
            q_vec = batch_vec if batch_vec is not None else self._embed(None, req.question)[1]
        if req.retrieval == "similarity" and q_vec is None:
            why = self._encoder_error if self.encoder() is None else "no entity vectors"
            raise QueryError(f"retrieval 'similarity' needs the store's encoder ({why})")
        return q_vec

    def _retrieve(self, req: _Request, heads: list[int], q_vec: np.ndarray | None,
                  plan: RelationPlan) -> _Retrieval:
        """The candidate answers and the candidate set: the derived chain's facts and endpoints
        (compact), the linked entities' 1-hop triples (neighbourhood), or the triples of the
        top candidates' best paths (taimr, similarity); then the boosted chain facts and, in a
        store built from documents, the triples of the ``query.passages`` chunks nearest the
        question (dense passage retrieval seeds what the paths from the links cannot reach), and
        the 1-hop triples of the top candidates' qualified forms (a split bridge's next hop)."""
        semantic, sources = q_vec is not None, {}
        if plan.compact:
            d = plan.assessment.derivation
            candidates = [Candidate(e, self.names[e], float(w), 0.0, 0.0)
                          for w, e in zip(d.walks, d.endpoints)]
            triples, scores = list(d.facts), [1.0] * len(d.facts)
        elif req.retrieval == "neighbourhood":
            candidates, triples = [], self._neighbourhood(heads)
            scores = [0.0] * len(triples)
        else:
            candidates, sources = self._rank(heads, q_vec, req.retrieval, plan)
            first: dict[Triple, float] = {}
            for c in candidates:
                for t in c.triples:
                    first.setdefault(t, c.s_final)
            triples, scores = list(first), list(first.values())
        extra = list(plan.boosted) if triples else []
        if q_vec is not None and not plan.compact and req.retrieval != "neighbourhood":
            extra += self.provenance.passage_triples(q_vec, int(self.settings["passages"]))
        if not plan.compact and req.retrieval != "neighbourhood":
            extra += self._qualified_neighbourhood(candidates)
        if triples and extra:
            present = set(triples)
            extra = [f for f in dict.fromkeys(extra) if f not in present]
            triples, scores = triples + extra, scores + [min(scores)] * len(extra)
        return _Retrieval(candidates, triples, scores, sources, semantic)

    def _rank(self, heads: list[int], q_vec: np.ndarray | None, retrieval: str,
              plan: RelationPlan) -> tuple[list[Candidate], dict[int, str]]:
        """The top ``max_candidates`` entities the heads' fact paths reach, best S_final first,
        then the top ``bridge_candidates`` that only paths through a feedback bridge reach, and
        where each head's paths came from. S_final = S_topo (+ the query-relation term) +
        λ_q·cos, or the cosine alone for ``similarity``. Bridges rank apart so that a linked
        name's many bridge edges never take the places of its facts' answers."""
        facts: dict[int, tuple[float, int, PathRow]] = {}
        bridged: dict[int, tuple[float, int, PathRow]] = {}
        sources = {}
        term = plan.relation_weight and plan.relation_term
        linked = set(heads)
        for h in heads:
            paths, sources[h] = self.paths(h)
            for p in paths:
                a = p[3][-1]
                if a in linked:
                    continue
                key = p[0] + term(p) if term else p[0]
                best = bridged if self._bridge_relations.intersection(p[1]) else facts
                held = best.get(a)
                if held is None or key > held[0]:
                    best[a] = (key, h, p)
        top = self._by_final(facts, q_vec, retrieval)[: int(self.settings["max_candidates"])]
        kept = {c.id for c in top}
        more = [c for c in self._by_final(bridged, q_vec, retrieval) if c.id not in kept]
        return top + more[: int(self.settings["bridge_candidates"])], sources

    def _by_final(self, best: dict[int, tuple[float, int, PathRow]], q_vec: np.ndarray | None,
                  retrieval: str) -> list[Candidate]:
        """Candidates from each entity's best (key, head, path), best S_final first."""
        lam = float(self.settings["lambda_q"])
        ranked = []
        for a, (key, h, p) in best.items():
            cos = float(self.vectors[a] @ q_vec) if q_vec is not None else 0.0
            ranked.append((cos if retrieval == "similarity" else key + lam * cos, a, cos, h, p))
        ranked.sort(key=lambda c: (-c[0], c[1]))
        return [Candidate(a, self.names[a], final, p[0], cos, (h, p))
                for final, a, cos, h, p in ranked]

    def _qualified_neighbourhood(self, candidates: list[Candidate]) -> list[Triple]:
        """The 1-hop triples of the qualified forms of the top ``focus_candidates`` names: a
        graph extracted from documents splits a bridge ("Fredericton, New Brunswick", where
        the question's person was born) from the name that holds its next hop
        ("Fredericton, New Brunswick, Canada", where the diocese is). None where the linker
        links no qualified forms (``query.qualified_links`` 0, a curated KG)."""
        if not self.linker.max_qualified:
            return []
        top = candidates[: int(self.settings["focus_candidates"])]
        forms = [e for c in top for e in self.linker.qualified_forms_of(self.names[c.id])]
        return self._neighbourhood(list(dict.fromkeys(forms)))

    def _neighbourhood(self, heads: list[int]) -> list[Triple]:
        g = self.graph
        out = []
        for h in heads:
            for j in range(g.indptr[h], g.indptr[h + 1]):
                o, r, inv = int(g.targets[j]), int(g.relations[j]), bool(g.inverse[j])
                out.append((o, r, h) if inv else (h, r, o))
        return list(dict.fromkeys(out))

    def paths(self, head: int) -> tuple[list[PathRow], str]:
        """Top paths of a head: from the cache, else computed now by the shared scorer."""
        if self.path_cache is not None:
            cached = self.path_cache.get(head)
            if cached is not None:
                return cached, "cache"
        with self._cold_lock:
            held = self._cold.get(head)
            if held is not None:
                self._cold.move_to_end(head)
        if held is None:
            held = taimr.top_paths(self.graph, head, **self.path_settings)
            with self._cold_lock:  # cold heads stay in a bounded in-memory LRU (DESIGN §2.9)
                self._cold[head] = held
                while len(self._cold) > COLD_HEADS_KEPT:
                    self._cold.popitem(last=False)
        return path_rows(held), "computed"

    # ---------------------------------------------------------------- 3. encode

    def _encode(self, req: _Request, heads: list[int], found: _Retrieval, plan: RelationPlan
                ) -> tuple[list[ittc.KnowledgeTriple], ittc.Encoding]:
        """The candidate set as ITTC knowledge — the linked entities, the top candidates and
        the boosted chain facts in focus — encoded under the budget."""
        top = found.candidates[: int(self.settings["focus_candidates"])]
        focus = set(heads) | {c.id for c in top}
        sentences = self.provenance.sentence if req.source_sentences else {}
        knowledge = self._knowledge(found.triples, found.scores, focus, set(plan.boosted),
                                    sentences)
        if req.encoding == "ittc":
            return knowledge, ittc.encode(knowledge, req.budget, self.order)
        return knowledge, ittc.encode_uniform(knowledge, req.budget)

    def _knowledge(self, triples: list[Triple], scores: list[float], focus: set[int],
                   boosted: set[Triple], sentences: dict[Triple, str]
                   ) -> list[ittc.KnowledgeTriple]:
        fields = {e: self._entity_fields(e) for t in triples for e in (t[0], t[2])}
        out = []
        for rank, ((s, r, o), score) in enumerate(zip(triples, scores)):
            st, sd, sa, sx = fields[s]
            ot, od, oa, ox = fields[o]
            out.append(ittc.KnowledgeTriple(
                subject=self.names[s], relation=self._relation_name(r),
                object=self.names[o], rank=rank, score=float(score),
                tail_entropy=float(self.tail_entropy[r]) if r < len(self.tail_entropy) else 0.0,
                focus=s in focus or o in focus or (s, r, o) in boosted, subject_type=st,
                object_type=ot,
                subject_description=sd, object_description=od, subject_aliases=sa,
                object_aliases=oa, subject_attributes=sx, object_attributes=ox,
                source=sentences.get((s, r, o), "")))
        return out

    def _entity_fields(self, i: int) -> tuple[str, str, tuple, tuple]:
        """(first type, description, aliases, attributes) of an entity, memoised per runtime."""
        fields = self._fields.get(i)
        if fields is None:
            types = self._types[i] or []
            attributes = tuple((a["key"], a["value"]) for a in self._attributes[i] or ())
            fields = self._fields[i] = (types[0] if types else "", self._descriptions[i] or "",
                                        tuple(self._aliases[i] or ()), attributes)
        return fields

    def _surface_forms(self, i: int) -> tuple[str, ...]:
        """An entity's name, key and aliases: what a question may write for it."""
        return (self.names[i], self.keys[i], *self._entity_fields(i)[2])

    def _relation_name(self, r: int) -> str:
        return self.relation_names.get(r, str(r))

    # ---------------------------------------------------------------- 4. read

    def _read(self, req: _Request, enc: ittc.Encoding, candidates: list[Candidate],
              plan: RelationPlan) -> _Reading:
        """The one call on the prompt, its reply parsed and grounded; without a model, when a
        forced choice has one candidate only, or when the call fails, its reply holds no answer
        or (forced choice) names no candidate, the top candidate. With ``choice_check``
        ``derivation`` a forced choice's pick other than the top counts only when the relation
        knowledge's derivation reaches it (:meth:`_supported`); when no listed candidate but
        the top could count, no call is made."""
        reader = req.reader
        listed = self._choices(candidates) if reader.calls_model and \
            self.settings["reader"] == "choice" else []
        choices = tuple(choice_lines([c.name for c in listed]))
        prompt = build_prompt(enc.text, req.question, choices=choices)
        top = candidates[:1]
        answers, ids = [c.name for c in top], [c.id for c in top]
        supported = self._supported(plan) if listed else None
        why_no_call = _why_no_call(reader, listed, supported)
        if why_no_call:
            return _Reading(answers, ids, "ok", f"answered from retrieval ({why_no_call})", None,
                            0, 0, prompt)
        options = {"choices": list(choices)} if choices and getattr(
            reader, "constrains_choices", False) else {}
        try:
            reply = reader.complete(prompt.user, system=prompt.system,
                                    max_tokens=ANSWER_MAX_TOKENS, **options)
        except LLMError as exc:
            return _Reading(answers, ids, "fallback", READ_FAILED, f"{exc.kind}: {exc}", 1, 0,
                            prompt, choices)
        completion = count_tokens(reply.text)
        parsed = parse_answers(reply.text)
        picked = self._picked(parsed, listed) if choices else None
        if not parsed or (choices and picked is None):
            why = "the LLM reply held no answer" if not parsed else \
                f"the LLM reply {parsed[0]!r} is none of the {len(choices)} candidates"
            return _Reading(answers, ids, "fallback", READ_FAILED, why, 1, completion, prompt,
                            choices)
        if picked is not None and picked.id != top[0].id and supported is not None and \
                picked.id not in supported:
            return _Reading(answers, ids, "ok", f"answered from retrieval ({reader.name} picked "
                            f"{picked.name!r}, which the predicted relation chain does not "
                            "reach: query.choice_check)", None, 1, completion, prompt, choices,
                            vetoed=True)
        answers, ids = ([picked.name], [picked.id]) if choices else self._ground(parsed,
                                                                                 candidates)
        return _Reading(answers, ids, "ok", f"answered by {reader.name}", None, 1, completion,
                        prompt, choices)

    def _choices(self, candidates: list[Candidate]) -> list[Candidate]:
        """A forced choice's candidates: the top ones (``choice_candidates``) whose S_final is
        within ``choice_margin`` of the best."""
        best = candidates[0].s_final if candidates else 0.0
        margin = float(self.settings["choice_margin"])
        return [c for c in candidates[:int(self.settings["choice_candidates"])]
                if best - c.s_final <= margin]

    def _supported(self, plan: RelationPlan) -> frozenset[int] | None:
        """The entities a forced choice may pick over retrieval's top one, or None for any:
        with ``choice_check`` ``derivation``, the endpoints of the relation knowledge's
        derivation (the predicted chain followed from the topic) when it has some. Chosen on
        PathQuestion dev (docs/BENCHMARKS.md): every pick of the embedded model that made a
        PQ-3H dev answer worse was one the chain does not reach, every one that made it
        better one it does."""
        if self.settings["choice_check"] != "derivation" or plan.assessment is None:
            return None
        derivation = plan.assessment.derivation
        return frozenset(derivation.endpoints) if derivation is not None and \
            derivation.derivable else None

    def _picked(self, parsed: list[str], listed: list[Candidate]) -> Candidate | None:
        """The listed candidate a forced-choice reply names: its first item, grounded (a
        backend without a grammar may wrap the name in a sentence)."""
        if not parsed:
            return None
        hit = self._ground(parsed[:1], listed)[1][0]
        return next((c for c in listed if c.id == hit), None)

    def _ground(self, items: list[str], candidates: list[Candidate]) -> tuple[list[str], list]:
        """LLM answers → entity names and ids. An item naming a candidate or any entity keeps
        its text; an item that only *mentions* a candidate ("The capital is Berlin.") becomes
        that candidate (the longest name found in it); anything else stays, id None."""
        names, ids = [], []
        for item in items:
            key = normalise(item)
            hit = next((c.id for c in candidates if normalise(c.name) == key), None)
            if hit is None:
                found = self.linker.lookup(item)
                hit = found[0] if found else None
            if hit is None:
                padded = f" {key} "
                inside = [c for c in candidates if f" {normalise(c.name)} " in padded]
                if inside:
                    best = max(inside, key=lambda c: len(normalise(c.name)))
                    item, hit = best.name, best.id
            if item.casefold() not in (n.casefold() for n in names):
                names.append(item)
                ids.append(hit)
        return names, ids

    # ---------------------------------------------------------------- 5. answer

    def _route_after_read(self, req: _Request, plan: RelationPlan, found: _Retrieval,
                          reading: _Reading) -> dict | None:
        """The plan's route record completed with what answered (route past its gate, or lokg
        with a relation feed) and, for the LOKG context, the consistency of what was read."""
        if plan.route is None:
            return None
        reason = plan.route["reason"] or f"policy {req.policy}"
        route = {**plan.route,
                 "source": "llm" if reading.calls and reading.status == "ok" and
                 not reading.vetoed else "retrieval",
                 "context": "compact" if plan.compact else "lokg",
                 "reason": reason + ("; one LLM call" if reading.calls else
                                     "; top retrieval answer")}
        if not plan.compact and self.relknow is not None:
            know, facts = self.relknow
            route["consistency"] = know.checker.check(found.triples, facts).to_dict()
        return route

    def _answer(self, req: _Request, base: dict, plan: RelationPlan, found: _Retrieval,
                encoded: tuple[list[ittc.KnowledgeTriple], ittc.Encoding], reading: _Reading,
                timings: dict) -> Answer:
        """The full Answer of a question that got as far as the read."""
        (knowledge, enc) = encoded
        triples, citations = self._lines(found.triples, knowledge, enc)
        overhead = prompt_overhead(req.question, choices=reading.choices)
        called = reading.calls > 0  # a prompt went out (a forced choice of one makes none)
        return Answer(
            **{**base, "route": self._route_after_read(req, plan, found, reading)},
            answers=reading.answers, answer_ids=reading.answer_ids,
            status=reading.status, message=reading.message, fallback=reading.status == "fallback",
            fallback_reason=reading.fallback_reason, llm_calls=reading.calls,
            prompt=reading.prompt.to_dict() if called else {"system": "", "user": ""},
            tokens={"prompt": overhead.total + enc.tokens if called else 0,
                    "completion": reading.completion, "knowledge": enc.tokens,
                    "naive": enc.naive_tokens, "tcr": enc.tcr, "budget": req.budget,
                    "overhead": overhead.to_dict()},
            triples=triples, candidates=[c.to_dict() for c in found.candidates[:10]],
            citations=citations,
            encoding={"mode": enc.mode, "order": list(enc.order), "dropped": enc.dropped,
                      "total_value": enc.total_value, "semantic": found.semantic,
                      "paths": found.sources, "solve_ms": enc.solve_ms},
            timings=timings)

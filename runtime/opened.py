"""The opened build: a published build's artefacts read once, and what a question looks up in them.

:func:`open_build` resolves and pins the build (a store on object storage is first synced
into its local cache); :class:`OpenedBuild` reads its tables (entities, relations, the query
statistics, the TAIMR graph, the linker's surface forms, the path cache, the entity vectors,
the relation knowledge, the provenance) and answers the lookups every step of a question
makes: an entity's fields and surface forms, a head's top paths, the 1-hop triples, the
question's vectors. The steps themselves are runtime/planning.py, runtime/retrieval.py and
runtime/reading.py; ``Runtime.ask`` (runtime/query.py) chains them.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from lokg.runtime import feedback, object_store, pins, relknow, taimr
from lokg.runtime.contract import (INCOMING_TYPE_PREFIX, Build, Store, StoreError, is_url,
                                   read_parquet, to_numpy)
from lokg.runtime.environment import limit_blas_threads
from lokg.runtime.linker import LINKER_FORMS_FILE, Linker, common_nouns, surface_forms
from lokg.runtime.llm import LLM, LLMError, make_llm
from lokg.runtime.path_cache import PathCache, PathRow, path_rows
from lokg.runtime.provenance import Provenance
from lokg.runtime.query_stats import QUERY_STATS_FILE, query_stats, read_query_stats
from lokg.runtime.question_encoder import CachedEmbeddings, float32_encoder, query_encoder
from lokg.runtime.relknow import Triple
from lokg.runtime.request import QueryError

#: Heads missing from the path cache whose computed paths are kept in memory, as taimr's flat
#: arrays (~10 KiB a head on FB15k-237, ~40 MiB when full; as rows they would be ~7x that).
COLD_HEADS_KEPT = 4096


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


def open_build(store_root: str | Path, build_id: str | None, verify: bool,
               pins_required: bool = True):
    """The build to open and the pins that hold it (None for a pin that could not be
    written). A store on object storage is first synced into its local cache
    (runtime/object_store.py), which is then opened as a local store; the object pin keeps the
    build from retention there too, unless not ``pins_required`` and the write was refused."""
    if is_url(store_root):
        cache, build_id, held = object_store.RemoteStore(str(store_root)).sync(
            build_id, verify=verify, pins_required=pins_required)
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


def _query_stats(build: Build, triples: Callable[[], pa.Table], n_relations: int
                 ) -> tuple[tuple[str, ...], np.ndarray]:
    """σ* and H(O|R) from the build's stats file; builds published before it had one get
    them computed here, as every open did before."""
    path = build.path / QUERY_STATS_FILE
    if path.is_file():
        return read_query_stats(path, n_relations)
    stats = query_stats(triples(), n_relations)
    return tuple(stats["component_order"]), np.asarray(stats["tail_entropy_bits"])


def _graph(build: Build, has_taimr: bool, triples: Callable[[], pa.Table],
           n_entities: int) -> taimr.EdgeGraph:
    if has_taimr:
        return taimr.EdgeGraph.from_tables(build.read("edges"), build.read("node_gain"))
    edges = taimr.uniform_edges(triples())  # no TAIMR artefacts: uniform attention, μ = 1
    return taimr.EdgeGraph(*(to_numpy(edges.column(c))
                             for c in ("s", "r", "o", "inverse", "attention")),
                           np.ones(n_entities))


def _path_cache(build: Build, keep: int) -> tuple[dict, PathCache | None]:
    """The path search's settings (the build's ``path_cache`` section) and its cache of top
    paths, None when the build has none."""
    cache_cfg = (build.manifest.get("config") or {}).get("path_cache") or {}
    settings = {k: cache_cfg[k] for k in ("max_hops", "k_top", "beam_width", "lambda_topo")
                if k in cache_cfg}  # a build without them: the path search's own defaults
    if "path_cache" not in build.manifest.get("tables", {}):
        return settings, None
    report = build.manifest.get("report", {}).get("stages", {}).get("path_cache", {})
    buckets = int(report.get("buckets") or cache_cfg["buckets"])
    return settings, PathCache(build.table_path("path_cache"), buckets, keep=keep)


def _relation_knowledge(build: Build, relation_names: dict[int, str],
                        triples: Callable[[], pa.Table], n_relations: int
                        ) -> tuple[relknow.RelationKnowledge, relknow.Facts] | None:
    path = build.path / "models" / relknow.ARTEFACT
    if not path.is_dir():
        return None
    names = {name: i for i, name in relation_names.items()}
    try:
        know = relknow.RelationKnowledge.load(path, names)
    except relknow.RelknowError as exc:
        raise StoreError(str(exc)) from None
    table = triples()
    return know, relknow.Facts(*(to_numpy(table.column(c)) for c in "sro"), n_relations)


class OpenedBuild:
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
        self._entity_ids: dict[str, int] | None = None  # entity_ids, on first use
        self._asked = threading.local()  # .vector: (question, plain vector) this thread embedded
        if settings["threads"]:
            limit_blas_threads(int(settings["threads"]))
        self._load()

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
        self.order, self.tail_entropy = _query_stats(b, triples, self.n_relations)
        self.has_taimr = "edges" in tables and "node_gain" in tables
        self.graph = _graph(b, self.has_taimr, triples, self.n_entities)
        self.linker = self._linker(triples)
        self.path_settings, self.path_cache = _path_cache(b, int(self.settings["cached_buckets"]))
        vec_path = b.path / "entity_vectors.npy"
        self.vectors = np.load(vec_path, mmap_mode="r") if vec_path.is_file() else None
        enc_path = b.path / "models" / "encoder.json"
        self.encoder_spec = json.loads(enc_path.read_text()) if enc_path.is_file() else None
        self.relknow = _relation_knowledge(b, self.relation_names, triples, self.n_relations)
        self.provenance = Provenance(b)
        self.feedback = self._feedback_log()
        # Decoding the tables leaves Arrow's allocator holding the freed decode buffers (~35
        # MiB on FB15k-237); none of it is in use once they are loaded, so it goes back.
        pa.default_memory_pool().release_unused()

    def name_relations(self, names: dict[int, str]) -> None:
        """The relations' names, and the ids of the feedback bridges among them (ranked apart
        from the facts, runtime/retrieval.py)."""
        self.relation_names = names
        self.bridge_relations = frozenset(i for i, name in names.items()
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

    # ---------------------------------------------------------------- entities and relations

    def entity_fields(self, i: int) -> tuple[str, str, tuple, tuple]:
        """(first type, description, aliases, attributes) of an entity, memoised per runtime."""
        fields = self._fields.get(i)
        if fields is None:
            types = self._types[i] or []
            attributes = tuple((a["key"], a["value"]) for a in self._attributes[i] or ())
            fields = self._fields[i] = (types[0] if types else "", self._descriptions[i] or "",
                                        tuple(self._aliases[i] or ()), attributes)
        return fields

    def entity_ids(self) -> dict[str, int]:
        """Each entity key's id, made once, on first use (entities given by key)."""
        if self._entity_ids is None:
            self._entity_ids = {k: i for i, k in enumerate(self.keys)}
        return self._entity_ids

    def surface_forms(self, i: int) -> tuple[str, ...]:
        """An entity's name, key and aliases: what a question may write for it."""
        return (self.names[i], self.keys[i], *self.entity_fields(i)[2])

    def relation_name(self, r: int) -> str:
        return self.relation_names.get(r, str(r))

    def hop_domains(self) -> relknow.HopDomains:
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

    # ---------------------------------------------------------------- the graph

    def neighbourhood(self, heads: list[int]) -> list[Triple]:
        """The 1-hop triples of ``heads``, in graph order, each once."""
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
            with self._cold_lock:  # cold heads stay in a bounded in-memory LRU
                self._cold[head] = held
                while len(self._cold) > COLD_HEADS_KEPT:
                    self._cold.popitem(last=False)
        return path_rows(held), "computed"

    # ---------------------------------------------------------------- the question's vectors

    def encoder(self):
        """The store's question encoder (its exported ONNX model, else sentence-transformers:
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

    @property
    def encoder_error(self) -> str | None:
        """Why :meth:`encoder` gave None (None: it has not, or it has not been asked yet)."""
        return self._encoder_error

    def span_embedder(self) -> CachedEmbeddings | None:
        """The encoder for question spans, through a cache: spans recur across questions. Spans
        are compared with relation names the build embedded in float32, so an int8 ONNX
        question encoder gives way here to the build's float32 export of the same weights
        (question_encoder.float32_encoder; docs/BENCHMARKS.md)."""
        if self._spans is None and self.encoder() is not None:
            self._spans = CachedEmbeddings(float32_encoder(
                self.encoder_spec, self.encoder(), threads=self.settings["threads"],
                models_dir=self.build.path / "models"))
        return self._spans

    def embed(self, masked: str | None, plain: str | None
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
            vector = self.embed(None, question)[1]
        return [] if vector is None else self.provenance.nearest_chunks(vector, n)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` entities whose vectors are nearest ``query`` [1, dim]: (scores, ids)."""
        scores = np.asarray(self.vectors @ query[0], dtype=np.float32)
        top = np.argsort(-scores, kind="stable")[:k]
        return scores[top][None, :], top[None, :]

    # ---------------------------------------------------------------- LLMs

    def llm(self, spec: str | LLM) -> LLM:
        """The reader a spec names, made once per runtime (an LLM passed in is used as is)."""
        if not isinstance(spec, str):
            return spec
        key = spec.strip().lower()
        with self._llm_lock:
            if key not in self._llms:
                self._llms[key] = make_llm(key)
            return self._llms[key]

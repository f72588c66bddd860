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
3. **encode** — ``ittc``: ITTC under the knowledge budget B (runtime/ittc.py; σ* and H(O|R) are
   computed from this store's triples when it is opened); ``uniform`` (ablation "w/o ITTC"):
   every triple at the balanced template in s-r-o order, cut by rank to fit B;
4. **read** — one call to the chosen backend (``none``: no call, the top-ranked candidate is the
   answer). A failed call returns the ``none`` answer with ``fallback`` set and the reason.

The prompt is the fixed instructions + ``Knowledge:`` + the encoded lines + the question; the
knowledge never exceeds B tokens (cl100k_base, counted on the final text), so the whole prompt
is at most B plus its fixed overhead, which the Answer reports separately.

Bad input never surfaces as a traceback: invalid arguments raise :class:`QueryError` (a
ValueError whose message names the argument), and questions the store cannot answer (nothing
linked, no path) return a well-formed Answer whose ``status`` says why.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from runtime import ittc, relknow, taimr
from runtime.answers import ANSWER_MAX_TOKENS, build_prompt, parse_answers, prompt_overhead
from runtime.config import ENCODINGS, POLICIES, RETRIEVALS, section
from runtime.contract import Build, Store, StoreError
from runtime.linker import Link, Linker, normalise, vector_fallback
from runtime.llm import LLM, LLMError, make_llm
from runtime.tokens import count_tokens

#: Hard limits on a request; beyond them ask() refuses with a QueryError.
MAX_QUESTION_CHARS = 4096
MAX_BUDGET = 131072
MAX_GIVEN_ENTITIES = 32
#: Heads missing from the path cache whose computed paths are kept in memory.
COLD_HEADS_KEPT = 4096


class QueryError(ValueError):
    """A request the runtime refuses (bad argument); the message names the argument."""


@dataclass
class Answer:
    """Everything about one answered question, JSON-serialisable with :meth:`to_dict`."""

    question: str
    answers: list[str]
    answer_ids: list[int | None]
    status: str  # ok | fallback | no_entity | no_paths | abstained (policy precision)
    message: str
    fallback: bool
    fallback_reason: str | None
    llm: dict  # backend, model, calls_model
    llm_calls: int
    prompt: dict  # system, user ("" when no prompt was built)
    tokens: dict  # prompt, completion, knowledge (T_after), naive (T_naive), tcr, overhead, budget
    triples: list[dict]
    linked: list[dict]
    candidates: list[dict]
    encoding: dict  # mode, order, dropped, total_value, semantic
    timings: dict  # ms per step
    build_id: str
    retrieval: str
    policy: str
    #: policies precision/route and the relation feeds: which path answered and why (None for
    #: policy lokg with the feeds off) — source derived | llm | retrieval | abstain, reason,
    #: chain, vote share, derived answers, consistency, gate
    route: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, **kw)


class _PathCache:
    """The published path_cache: one bucket file per ``head % buckets``, a few kept in memory."""

    def __init__(self, directory: Path, buckets: int, keep: int = 256):
        self.directory = directory
        self.buckets = buckets
        self.keep = keep
        self._loaded: OrderedDict[int, tuple[pa.Table, dict[int, tuple[int, int]]]] = OrderedDict()
        self._lock = threading.Lock()

    def _bucket(self, b: int) -> tuple[pa.Table, dict[int, tuple[int, int]]]:
        with self._lock:
            if b in self._loaded:
                self._loaded.move_to_end(b)
                return self._loaded[b]
        path = self.directory / f"bucket-{b:05d}.parquet"
        table = pq.read_table(path, memory_map=True).combine_chunks()
        heads = table.column("head").to_numpy()
        starts = np.flatnonzero(np.r_[True, heads[1:] != heads[:-1]]) if len(heads) else []
        ends = list(starts[1:]) + [len(heads)] if len(heads) else []
        offsets = {int(heads[s]): (int(s), int(e)) for s, e in zip(starts, ends)}
        # Flat numpy columns: slicing them per head is ~10x cheaper than Arrow's to_pydict.
        lists = {c: table.column(c).chunk(0) if table.num_rows else None
                 for c in ("relations", "inverses", "nodes")}
        flat = (table.column("score").to_numpy(),
                lists["relations"].offsets.to_numpy() if table.num_rows else np.zeros(1, np.int32),
                *(lists[c].values.to_numpy(zero_copy_only=False) if table.num_rows
                  else np.zeros(0) for c in ("relations", "inverses", "nodes")))
        with self._lock:
            self._loaded[b] = (flat, offsets)
            while len(self._loaded) > self.keep:
                self._loaded.popitem(last=False)
        return flat, offsets

    def get(self, head: int) -> list[PathRow] | None:
        """The cached paths of ``head``, or None when the head is not in the cache (cold)."""
        (score, offs, rel, inv, nodes), offsets = self._bucket(head % self.buckets)
        if head not in offsets:
            return None
        start, end = offsets[head]
        lo, hi = int(offs[start]), int(offs[end])
        rel_l, inv_l, nodes_l = (rel[lo:hi].tolist(), inv[lo:hi].tolist(), nodes[lo:hi].tolist())
        bounds = (offs[start:end + 1] - lo).tolist()
        return [(sc, rel_l[a:b], inv_l[a:b], nodes_l[a:b])
                for sc, a, b in zip(score[start:end].tolist(), bounds[:-1], bounds[1:])]


#: One path: (S_topo, relations, inverses, nodes) hop by hop, the head excluded from nodes.
PathRow = tuple[float, Sequence[int], Sequence[bool], Sequence[int]]


def path_rows(paths: taimr.Paths) -> list[PathRow]:
    """taimr's flat per-head result as one tuple per path (the cache's row shape)."""
    ends = np.cumsum(paths.lengths)
    rel, inv, nodes = paths.relations.tolist(), paths.inverses.tolist(), paths.nodes.tolist()
    out, start = [], 0
    for score, end in zip(paths.score.tolist(), ends.tolist()):
        out.append((score, rel[start:end], inv[start:end], nodes[start:end]))
        start = end
    return out


def path_triples(head: int, path: PathRow) -> list[tuple[int, int, int]]:
    """The KG triples a path walks (an inverse hop u -r⁻¹-> v is the triple (v, r, u))."""
    out, here = [], head
    for rel, inv, there in zip(path[1], path[2], path[3]):
        out.append((there, rel, here) if inv else (here, rel, there))
        here = there
    return out


def _tail_entropies_bits(triples: pa.Table, n_relations: int) -> np.ndarray:
    """H(O|R=r) in bits per canonical relation, from the store's triples."""
    r = triples.column("r").to_numpy()
    o = triples.column("o").to_numpy()
    out = np.zeros(n_relations, dtype=np.float64)
    if not len(r):
        return out
    span = int(o.max()) + 1
    keys, counts = np.unique(r.astype(np.int64) * span + o, return_counts=True)  # 1-D: fast
    rel = keys // span
    totals = np.bincount(rel, weights=counts, minlength=n_relations)
    p = counts / totals[rel]
    np.add.at(out, rel, -p * np.log2(p))
    return np.maximum(out, 0.0)


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
        self._encoder_error: str | None = None
        self._load()

    # ---------------------------------------------------------------- opening

    @classmethod
    def open(cls, store_root: str | Path, *, build_id: str | None = None, verify: bool = True,
             **settings) -> Runtime:
        """Resolve CURRENT (or ``build_id``) once, verify the manifest, load the build.

        Raises StoreError (naming the file) for anything that is not a complete, intact build.
        ``settings`` override the ``query`` section of the config defaults.
        """
        started = time.perf_counter()
        root = Path(store_root)
        if not root.is_dir():
            raise StoreError(f"{root}: not a directory — not a LOKG store")
        build = Store(root).build(build_id, verify=verify)
        unknown = set(settings) - set(section({}, "query"))
        if unknown:
            raise QueryError(f"unknown runtime settings: {sorted(unknown)}")
        config = build.manifest.get("config") or {}
        merged = {**section(config, "query"), **settings}
        runtime = cls(build, merged, 0.0)
        runtime.open_ms = (time.perf_counter() - started) * 1000.0
        return runtime

    def _load(self) -> None:
        b = self.build
        tables = b.manifest.get("tables", {})
        ent = b.read("entities")
        ids = ent.column("id").to_numpy()
        self.n_entities = len(ids)
        if not np.array_equal(ids, np.arange(self.n_entities)):
            raise StoreError(f"{b.table_path('entities')}: entity ids are not 0..n-1 in order")
        self._entities = ent
        # Rendering fields as Python lists once: per-row Arrow access costs ~60 µs an entity.
        self._types = ent.column("types").to_pylist()
        self._descriptions = ent.column("description").to_pylist()
        self._aliases = ent.column("aliases").to_pylist()
        self._attributes = ent.column("attributes").to_pylist()
        self._fields: dict[int, tuple[str, str, tuple, tuple]] = {}
        self._cold: OrderedDict[int, list[PathRow]] = OrderedDict()
        self._cold_lock = threading.Lock()
        self.names: list[str] = ent.column("name").to_pylist()
        self.keys: list[str] = ent.column("key").to_pylist()
        rel = b.read("relations")
        self.relation_names = dict(zip(rel.column("id").to_pylist(), rel.column("name").to_pylist()))
        self.n_relations = max(self.relation_names, default=-1) + 1
        triples = b.read("triples")
        self.tail_entropy = _tail_entropies_bits(triples, self.n_relations)
        self.order = ittc.component_order(np.stack(
            [triples.column(c).to_numpy() for c in ("s", "r", "o")], axis=1))
        self.has_taimr = "edges" in tables and "node_gain" in tables
        if self.has_taimr:
            self.graph = taimr.EdgeGraph.from_tables(b.read("edges"), b.read("node_gain"))
        else:  # a build without TAIMR artefacts: uniform attention, μ = 1
            edges = taimr.uniform_edges(triples)
            self.graph = taimr.EdgeGraph(*(edges.column(c).to_numpy(zero_copy_only=False)
                                           for c in ("s", "r", "o", "inverse", "attention")),
                                         np.ones(self.n_entities))
        degree = self.graph.out_degree()
        forms: list[tuple[int, str]] = []
        for i, (name, key, aliases) in enumerate(zip(self.names, self.keys,
                                                      self._aliases)):
            forms.append((i, name))
            forms.append((i, key))
            forms.extend((i, a) for a in aliases or ())
        self.linker = Linker(forms, degree)
        cache_cfg = section(b.manifest.get("config") or {}, "path_cache")
        self.path_settings = {k: cache_cfg[k] for k in
                              ("max_hops", "k_top", "beam_width", "lambda_topo")}
        self.path_cache = None
        if "path_cache" in tables:
            report = b.manifest.get("report", {}).get("stages", {}).get("path_cache", {})
            buckets = int(report.get("buckets") or cache_cfg["buckets"])
            self.path_cache = _PathCache(b.table_path("path_cache"), buckets)
        self.vectors = None
        vec_path = b.path / "entity_vectors.npy"
        if vec_path.is_file():
            self.vectors = np.load(vec_path, mmap_mode="r")
        enc_path = b.path / "models" / "encoder.json"
        self.encoder_spec = json.loads(enc_path.read_text()) if enc_path.is_file() else None
        self.relknow: tuple[relknow.RelationKnowledge, relknow.Facts] | None = None
        rk_path = b.path / "models" / relknow.ARTEFACT
        if rk_path.is_dir():
            names = {name: i for i, name in self.relation_names.items()}
            try:
                know = relknow.RelationKnowledge.load(rk_path, names)
            except relknow.RelknowError as exc:
                raise StoreError(str(exc)) from None
            self.relknow = (know, relknow.Facts(*(triples.column(c).to_numpy() for c in "sro"),
                                                self.n_relations))

    # ---------------------------------------------------------------- optional encoder

    def encoder(self):
        """The store's sentence encoder, or None when the encoder extra is not installed."""
        if self._encoder is None and self._encoder_error is None:
            if self.encoder_spec is None:
                self._encoder_error = "the store has no encoder"
            else:
                try:
                    from runtime.encoder import SentenceEncoder

                    threads = self.settings["encoder_threads"]
                    if threads:  # torch's default (all cores) is ~15x slower per question here
                        import torch

                        torch.set_num_threads(int(threads))
                    self._encoder = SentenceEncoder.from_spec(self.encoder_spec)
                except Exception as exc:  # ImportError without torch, or a bad model path
                    self._encoder_error = f"encoder unavailable: {exc}"
        return self._encoder

    def embed_question(self, question: str) -> np.ndarray | None:
        enc = self.encoder()
        if enc is None or self.vectors is None:
            return None
        return np.asarray(enc.encode_queries([question]), dtype=np.float32)[0]

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

    # ---------------------------------------------------------------- steps

    def _given(self, entities: Sequence[int | str]) -> list[Link]:
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

    def paths(self, head: int) -> tuple[list[PathRow], str]:
        """Top paths of a head: from the cache, else computed now by the shared scorer."""
        if self.path_cache is not None:
            cached = self.path_cache.get(head)
            if cached is not None:
                return cached, "cache"
        with self._cold_lock:
            rows = self._cold.get(head)
            if rows is not None:
                self._cold.move_to_end(head)
                return rows, "computed"
        rows = path_rows(taimr.top_paths(self.graph, head, **self.path_settings))
        with self._cold_lock:  # cold heads stay in a bounded in-memory LRU (DESIGN §2.9)
            self._cold[head] = rows
            while len(self._cold) > COLD_HEADS_KEPT:
                self._cold.popitem(last=False)
        return rows, "computed"

    def _entity_fields(self, i: int) -> tuple[str, str, tuple, tuple]:
        """(first type, description, aliases, attributes) of an entity, memoised per runtime."""
        fields = self._fields.get(i)
        if fields is None:
            types = self._types[i] or []
            attributes = tuple((a["key"], a["value"]) for a in self._attributes[i] or ())
            fields = self._fields[i] = (types[0] if types else "", self._descriptions[i] or "",
                                        tuple(self._aliases[i] or ()), attributes)
        return fields

    def _knowledge(self, triples: list[tuple[int, int, int]], scores: list[float],
                   focus: set[int], boosted: frozenset | set = frozenset()
                   ) -> list[ittc.KnowledgeTriple]:
        fields = {e: self._entity_fields(e) for t in triples for e in (t[0], t[2])}
        out = []
        for rank, ((s, r, o), score) in enumerate(zip(triples, scores)):
            st, sd, sa, sx = fields[s]
            ot, od, oa, ox = fields[o]
            out.append(ittc.KnowledgeTriple(
                subject=self.names[s], relation=self.relation_names.get(r, str(r)),
                object=self.names[o], rank=rank, score=float(score),
                tail_entropy=float(self.tail_entropy[r]) if r < len(self.tail_entropy) else 0.0,
                focus=s in focus or o in focus or (s, r, o) in boosted, subject_type=st,
                object_type=ot,
                subject_description=sd, object_description=od, subject_aliases=sa,
                object_aliases=oa, subject_attributes=sx, object_attributes=ox))
        return out

    def _retrieve_paths(self, heads: list[int], q_vec: np.ndarray | None, retrieval: str,
                        rel_term=None):
        """Candidates (entity, S_topo, cos, S_final, best path) ranked, and cache hits.
        ``rel_term(path)``: the query-relation term, added to S_topo for the final ranking."""
        best: dict[int, tuple[float, int, PathRow]] = {}
        sources = {}
        linked = set(heads)
        for h in heads:
            paths, source = self.paths(h)
            sources[h] = source
            for p in paths:
                a = p[3][-1]
                if a in linked:
                    continue
                key = p[0] if rel_term is None else p[0] + rel_term(p)
                held = best.get(a)
                if held is None or key > held[0]:
                    best[a] = (key, h, p)
        lam = float(self.settings["lambda_q"])
        cands = []
        for a, (key, h, p) in best.items():
            cos = float(self.vectors[a] @ q_vec) if q_vec is not None else 0.0
            final = cos if retrieval == "similarity" else key + lam * cos
            cands.append((final, p[0], cos, a, (h, p)))
        cands.sort(key=lambda c: (-c[0], c[3]))
        top = int(self.settings["max_candidates"])  # only these paths become triples
        cands[:top] = [(*c[:4], path_triples(*c[4])) for c in cands[:top]]
        return cands, sources

    def _neighbourhood(self, heads: list[int]) -> list[tuple[int, int, int]]:
        g = self.graph
        out = []
        for h in heads:
            for j in range(g.indptr[h], g.indptr[h + 1]):
                o, r, inv = int(g.targets[j]), int(g.relations[j]), bool(g.inverse[j])
                out.append((o, r, h) if inv else (h, r, o))
        return list(dict.fromkeys(out))

    def link(self, question: str, entities: Sequence[int | str] | None = None) -> list[Link]:
        """Step 1 alone: caller ids/keys, else string matches, else the vector fallback."""
        return self._link(question, entities)[0]

    def _link(self, question: str, entities) -> tuple[list[Link], np.ndarray | None]:
        if entities:
            return self._given(entities), None
        links, q_vec = self.linker.link(question), None
        if not links and self.vectors is not None:
            q_vec = self.embed_question(question)
            if q_vec is not None:
                links = vector_fallback(question, lambda _: q_vec[None, :], self._search,
                                        min_cosine=float(self.settings["min_link_cosine"]))
        return links, q_vec

    # ---------------------------------------------------------------- ask

    def ask(self, question: str, *, entities: Sequence[int | str] | None = None,
            budget: int = 2048, llm: str | LLM = "none", policy: str = "lokg",
            retrieval: str = "taimr", encoding: str = "ittc",
            relation_weight: float | None = None, chain_boost: bool | None = None) -> Answer:
        """Answer one question with at most one LLM call; see the module docstring.

        Relation knowledge (runtime/relknow.py, when the store has it): ``policy="precision"``
        returns the derived answer where the precision gate passes and abstains elsewhere;
        ``"route"`` returns it where the routing gate passes and otherwise makes the one call
        on the compact context of the instantiated chain (the LOKG context when none
        instantiates). ``relation_weight`` (λ_rel; settings ``relation_weight``) adds the
        query-relation term λ_rel·q_rel(p_a) to S_final; ``chain_boost`` (setting
        ``chain_boost``) gives ITTC's λ_boost to the facts of the predicted chain, added to
        the candidate set. ``Answer.route`` says which path answered and why."""
        t0 = time.perf_counter()
        timings: dict[str, float] = {}

        def lap(name: str, since: float) -> float:
            now = time.perf_counter()
            timings[name] = round((now - since) * 1000.0, 3)
            return now

        if not isinstance(question, str):
            raise QueryError(f"question must be a string; got {type(question).__name__}")
        if not question.strip():
            raise QueryError("question is empty")
        if len(question) > MAX_QUESTION_CHARS:
            raise QueryError(f"question is {len(question)} characters; the limit is "
                             f"{MAX_QUESTION_CHARS}")
        if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
            raise QueryError(f"budget must be an integer number of tokens; got {budget!r}")
        if not 1 <= budget <= MAX_BUDGET:
            raise QueryError(f"budget must be between 1 and {MAX_BUDGET} tokens; got {budget}")
        for name, value, allowed in (("policy", policy, POLICIES), ("retrieval", retrieval, RETRIEVALS),
                                     ("encoding", encoding, ENCODINGS)):
            if value not in allowed:
                raise QueryError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
        try:
            reader = self.llm(llm)
        except LLMError as exc:
            raise QueryError(f"llm: {exc}") from None

        # 1. link
        t = time.perf_counter()
        links, q_vec = self._link(question, entities)
        t = lap("link", t)
        heads = list(dict.fromkeys(link.id for link in links))
        base = dict(question=question, llm={"backend": getattr(reader, "name", "?"),
                                            "model": getattr(reader, "model", None),
                                            "calls_model": bool(reader.calls_model)},
                    linked=[{**link.to_dict(), "key": self.keys[link.id],
                             "name": self.names[link.id]} for link in links],
                    build_id=self.build_id, retrieval=retrieval, policy=policy)
        if not heads:
            timings["total"] = round((time.perf_counter() - t0) * 1000.0, 3)
            return self._empty(base, "no_entity", "no entity of the store was found in the "
                               "question; pass entity ids to ask about a specific entity", timings)

        # 1b. relation knowledge: the two policies that may answer from the graph, and the feeds
        rel_weight = float(self.settings.get("relation_weight", 0.0)
                           if relation_weight is None else relation_weight)
        boost = bool(self.settings.get("chain_boost", False) if chain_boost is None
                     else chain_boost)
        if not math.isfinite(rel_weight) or rel_weight < 0:
            raise QueryError(f"relation_weight must be a finite number >= 0; got {rel_weight!r}")
        assessment = None
        if policy != "lokg" or ((rel_weight or boost) and self.relknow is not None):
            assessment, base["route"], passed = self._assess(question, heads, policy)
            t = lap("relknow", t)
            if passed or policy == "precision":
                timings["total"] = round((time.perf_counter() - t0) * 1000.0, 3)
                return self._derived(base, assessment if passed else None, timings)
        compact = policy == "route" and assessment is not None and \
            assessment.derivation is not None

        # 2. retrieve
        semantic = retrieval == "similarity" or float(self.settings["lambda_q"]) != 0.0
        if retrieval != "neighbourhood" and q_vec is None and not compact and semantic:
            q_vec = self.embed_question(question)
        if retrieval == "similarity" and q_vec is None:
            raise QueryError("retrieval 'similarity' needs the store's encoder "
                             f"({self._encoder_error or 'no entity vectors'})")
        t = lap("embed", t)
        rel_term = None
        if rel_weight and assessment is not None:
            know, prediction = self.relknow[0], assessment.prediction
            rel_term = lambda p: rel_weight * know.relation_term(prediction, p[1], p[2])  # noqa: E731
        cands, sources = ([], {}) if retrieval == "neighbourhood" or compact else \
            self._retrieve_paths(heads, q_vec, retrieval, rel_term)
        top = cands[: int(self.settings["max_candidates"])]
        if compact:  # the facts of the instantiated chain; its endpoints are the candidates
            derivation = assessment.derivation
            support, scores = list(derivation.facts), [1.0] * len(derivation.facts)
            top = [(float(w), 0.0, 0.0, e, []) for w, e in zip(derivation.walks,
                                                               derivation.endpoints)]
        elif retrieval == "neighbourhood":
            support = self._neighbourhood(heads)
            scores = [0.0] * len(support)
        else:
            support, scores = [], []
            for final, _, _, _, path_triples in top:
                for trip in path_triples:
                    support.append(trip)
                    scores.append(final)
            seen: dict[tuple[int, int, int], float] = {}
            for trip, sc in zip(support, scores):
                seen.setdefault(trip, sc)
            support, scores = list(seen), list(seen.values())
        t = lap("retrieve", t)
        candidates = [{"id": a, "name": self.names[a], "s_final": f, "s_topo": s, "cos": c}
                      for f, s, c, a, _ in top]
        if not support:
            timings["total"] = round((time.perf_counter() - t0) * 1000.0, 3)
            return self._empty(base, "no_paths", "the linked entities have no facts in the store",
                               timings)

        # 3. encode
        focus = set(heads) | {c["id"] for c in candidates[: int(self.settings["focus_candidates"])]}
        boosted: set = set()
        if boost and assessment is not None and assessment.derivation is not None:
            boosted = set(assessment.derivation.facts)
            extra = [f for f in assessment.derivation.facts if f not in set(support)]
            scores = scores + [min(scores)] * len(extra)
            support = support + extra
        knowledge = self._knowledge(support, scores, focus, boosted)
        if encoding == "ittc":
            enc = ittc.encode(knowledge, int(budget), self.order)
        else:
            enc = ittc.encode_uniform(knowledge, int(budget))
        t = lap("encode", t)

        # 4. read
        none_answer = [candidates[0]["name"]] if candidates else []
        none_ids: list[int | None] = [candidates[0]["id"]] if candidates else []
        overhead = prompt_overhead(question)
        prompt = build_prompt(enc.text, question)
        answers, answer_ids, status, fallback_reason, completion = none_answer, none_ids, "ok", None, 0
        calls = 0
        message = "answered from retrieval (no LLM)"
        if reader.calls_model:
            calls = 1
            try:
                reply = reader.complete(prompt.user, system=prompt.system,
                                        max_tokens=ANSWER_MAX_TOKENS)
                completion = count_tokens(reply.text)
                parsed = parse_answers(reply.text)
                if parsed:
                    answers, answer_ids = self._ground(parsed, candidates)
                    message = f"answered by {reader.name}"
                else:
                    status, fallback_reason = "fallback", "the LLM reply held no answer"
            except LLMError as exc:
                status, fallback_reason = "fallback", f"{exc.kind}: {exc}"
            if status == "fallback":
                message = f"LLM call failed or gave no answer; top retrieval answer returned"
        lap("llm", t)
        if base.get("route") is not None:  # route past its gate, or lokg with a relation feed
            know_facts = self.relknow
            why = base["route"]["reason"] or f"policy {policy}"
            base["route"].update(
                source="llm" if calls and status == "ok" else "retrieval",
                context="compact" if compact else "lokg",
                reason=why + ("; one LLM call" if calls else "; top retrieval answer"))
            if not compact and know_facts is not None:
                base["route"]["consistency"] = know_facts[0].checker.check(
                    support, know_facts[1]).to_dict()
        prompt_tok = overhead.total + enc.tokens if reader.calls_model else 0
        timings["total"] = round((time.perf_counter() - t0) * 1000.0, 3)
        return Answer(
            **base, answers=answers, answer_ids=answer_ids, status=status, message=message,
            fallback=status == "fallback", fallback_reason=fallback_reason, llm_calls=calls,
            prompt=prompt.to_dict() if reader.calls_model else {"system": "", "user": ""},
            tokens={"prompt": prompt_tok, "completion": completion, "knowledge": enc.tokens,
                    "naive": enc.naive_tokens, "tcr": enc.tcr, "budget": int(budget),
                    "overhead": overhead.to_dict()},
            triples=[{"s": k.subject, "r": k.relation, "o": k.object, "score": k.score,
                      "granularity": e.granularity, "cost": e.cost, "line": e.line}
                     for k, e in zip(knowledge, enc.triples) if e.granularity is not None],
            candidates=candidates[:10],
            encoding={"mode": enc.mode, "order": list(enc.order), "dropped": enc.dropped,
                      "total_value": enc.total_value, "semantic": q_vec is not None,
                      "paths": sources, "solve_ms": enc.solve_ms},
            timings=timings)

    # ---------------------------------------------------------------- relation knowledge

    def _assess(self, question: str, heads: list[int], policy: str
                ) -> tuple[relknow.Assessment | None, dict, bool]:
        """The relation knowledge's view of a question: (assessment, route record, whether the
        policy's gate passed). The question is embedded with its topic mention masked; without
        the encoder a labelled store still predicts from the lexicon."""
        if self.relknow is None:
            return None, {"source": "abstain" if policy == "precision" else None,
                          "reason": "the store has no relation knowledge "
                                    "(stage relation_knowledge)"}, False
        know, facts = self.relknow
        forms = [f for h in heads for f in (self.names[h], self.keys[h],
                                            *self._entity_fields(h)[2])]
        masked = relknow.mask_topic(question, forms)
        enc = self.encoder()
        q_vec = None if enc is None else enc.encode_queries([masked])[0]
        assessment = know.assess(masked, heads, facts, q_vec=q_vec,
                                 embed=None if enc is None else enc.encode_queries)
        pred, d, cons = assessment.prediction, assessment.derivation, assessment.consistency
        gate = know.precision_gate if policy == "precision" else know.route_gate
        passed, reason = gate.check(pred, d, cons) if policy != "lokg" else (False, "")
        name = lambda r: self.relation_names.get(r, str(r))  # noqa: E731
        route = {
            "source": ("derived" if passed else "abstain" if policy == "precision" else None),
            "reason": reason, "predictor": pred.source,
            "encoder": None if enc is not None else self._encoder_error,
            "chain": [name(r) for r in pred.chain] if pred.chain else None,
            "vote_share": round(pred.share, 6), "vote_support": round(pred.support, 6),
            "votes": [{"chain": [name(r) for r in v.chain], "weight": round(v.weight, 6),
                       "derivable": v.derivable} for v in pred.votes[:5]],
            "named_relations": sorted(name(r) for r in pred.named),
            "derivable": bool(d is not None and d.derivable),
            "derived": [self.names[e] for e in d.endpoints[:10]] if d is not None else [],
            "consistency": cons.to_dict() if cons is not None else None,
            "flagged": bool(cons is not None and not cons.ok),
            "gate": {"name": policy, **gate.to_dict(), "passed": passed},
            "masked_question": masked,
        }
        return assessment, route, passed

    def _derived(self, base: dict, assessment: relknow.Assessment | None,
                 timings: dict) -> Answer:
        """The answer of a passed gate (the derived endpoints, no LLM call), or the abstention
        of policy precision (``assessment`` None)."""
        route = base["route"]
        if assessment is None:
            return self._empty(base, "abstained", f"abstained: {route['reason']}", timings)
        d = assessment.derivation
        return replace(
            self._empty(base, "ok", f"derived from the graph: {route['reason']}", timings),
            answers=[self.names[e] for e in d.endpoints], answer_ids=list(d.endpoints),
            triples=[{"s": self.names[s], "r": self.relation_names.get(r, str(r)),
                      "o": self.names[o], "score": 1.0, "granularity": None, "cost": 0,
                      "line": ""} for s, r, o in d.facts],
            candidates=[{"id": e, "name": self.names[e], "walks": w}
                        for e, w in zip(d.endpoints[:10], d.walks[:10])])

    def _ground(self, items: list[str], candidates: list[dict]) -> tuple[list[str], list]:
        """LLM answers → entity names and ids. An item naming a candidate or any entity keeps
        its text; an item that only *mentions* a candidate ("The capital is Berlin.") becomes
        that candidate (the longest name found in it); anything else stays, id None."""
        names, ids = [], []
        for item in items:
            key = normalise(item)
            hit = next((c["id"] for c in candidates if normalise(c["name"]) == key), None)
            if hit is None:
                found = self.linker.lookup(item)
                hit = found[0] if found else None
            if hit is None:
                padded = f" {key} "
                inside = [c for c in candidates if f" {normalise(c['name'])} " in padded]
                if inside:
                    best = max(inside, key=lambda c: len(normalise(c["name"])))
                    item, hit = best["name"], best["id"]
            if item.casefold() not in (n.casefold() for n in names):
                names.append(item)
                ids.append(hit)
        return names, ids

    def _empty(self, base: dict, status: str, message: str, timings: dict) -> Answer:
        return Answer(**base, answers=[], answer_ids=[], status=status, message=message,
                      fallback=False, fallback_reason=None, llm_calls=0,
                      prompt={"system": "", "user": ""},
                      tokens={"prompt": 0, "completion": 0, "knowledge": 0, "naive": 0,
                              "tcr": 1.0, "budget": 0, "overhead": {}},
                      triples=[], candidates=[], encoding={}, timings=timings)

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
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from runtime import ittc, taimr
from runtime.answers import ANSWER_MAX_TOKENS, build_prompt, parse_answers, prompt_overhead
from runtime.config import section
from runtime.contract import Build, Store, StoreError
from runtime.linker import Link, Linker, normalise, vector_fallback
from runtime.llm import LLM, LLMError, make_llm
from runtime.tokens import count_tokens

RETRIEVALS = ("taimr", "similarity", "neighbourhood")
ENCODINGS = ("ittc", "uniform")
POLICIES = ("lokg",)
#: Hard limits on a request; beyond them ask() refuses with a QueryError.
MAX_QUESTION_CHARS = 4096
MAX_BUDGET = 131072
MAX_GIVEN_ENTITIES = 32


class QueryError(ValueError):
    """A request the runtime refuses (bad argument); the message names the argument."""


@dataclass
class Answer:
    """Everything about one answered question, JSON-serialisable with :meth:`to_dict`."""

    question: str
    answers: list[str]
    answer_ids: list[int | None]
    status: str  # ok | fallback | no_entity | no_paths
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

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, **kw)


class _PathCache:
    """The published path_cache: one bucket file per ``head % buckets``, a few kept in memory."""

    def __init__(self, directory: Path, buckets: int, keep: int = 64):
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
        table = pq.read_table(path, memory_map=True)
        heads = table.column("head").to_numpy()
        starts = np.flatnonzero(np.r_[True, heads[1:] != heads[:-1]]) if len(heads) else []
        ends = list(starts[1:]) + [len(heads)] if len(heads) else []
        offsets = {int(heads[s]): (int(s), int(e)) for s, e in zip(starts, ends)}
        with self._lock:
            self._loaded[b] = (table, offsets)
            while len(self._loaded) > self.keep:
                self._loaded.popitem(last=False)
        return table, offsets

    def get(self, head: int) -> list[PathRow] | None:
        """The cached paths of ``head``, or None when the head is not in the cache (cold)."""
        table, offsets = self._bucket(head % self.buckets)
        if head not in offsets:
            return None
        start, end = offsets[head]
        rows = table.slice(start, end - start).to_pydict()
        return list(zip(rows["score"], rows["relations"], rows["inverses"], rows["nodes"]))


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
    pairs = np.unique(np.stack([r, o], axis=1), axis=0, return_counts=True)
    (ro, counts) = pairs
    rel = ro[:, 0]
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
        self._fields: dict[int, tuple[str, str, tuple, tuple]] = {}
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
                                                      ent.column("aliases").to_pylist())):
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

    # ---------------------------------------------------------------- optional encoder

    def encoder(self):
        """The store's sentence encoder, or None when the encoder extra is not installed."""
        if self._encoder is None and self._encoder_error is None:
            if self.encoder_spec is None:
                self._encoder_error = "the store has no encoder"
            else:
                try:
                    from runtime.encoder import SentenceEncoder

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
        return path_rows(taimr.top_paths(self.graph, head, **self.path_settings)), "computed"

    def _entity_fields(self, i: int) -> tuple[str, str, tuple, tuple]:
        """(first type, description, aliases, attributes) of an entity, memoised per runtime."""
        fields = self._fields.get(i)
        if fields is None:
            row = self._entities.slice(i, 1).to_pylist()[0]
            types = row["types"] or []
            attributes = tuple((a["key"], a["value"]) for a in row["attributes"] or ())
            fields = self._fields[i] = (types[0] if types else "", row["description"] or "",
                                        tuple(row["aliases"] or ()), attributes)
        return fields

    def _knowledge(self, triples: list[tuple[int, int, int]], scores: list[float],
                   focus: set[int]) -> list[ittc.KnowledgeTriple]:
        fields = {e: self._entity_fields(e) for t in triples for e in (t[0], t[2])}
        out = []
        for rank, ((s, r, o), score) in enumerate(zip(triples, scores)):
            st, sd, sa, sx = fields[s]
            ot, od, oa, ox = fields[o]
            out.append(ittc.KnowledgeTriple(
                subject=self.names[s], relation=self.relation_names.get(r, str(r)),
                object=self.names[o], rank=rank, score=float(score),
                tail_entropy=float(self.tail_entropy[r]) if r < len(self.tail_entropy) else 0.0,
                focus=s in focus or o in focus, subject_type=st, object_type=ot,
                subject_description=sd, object_description=od, subject_aliases=sa,
                object_aliases=oa, subject_attributes=sx, object_attributes=ox))
        return out

    def _retrieve_paths(self, heads: list[int], q_vec: np.ndarray | None, retrieval: str):
        """Candidates (entity, S_topo, cos, S_final, best path) ranked, and cache hits."""
        best: dict[int, tuple[float, int, PathRow]] = {}
        sources = {}
        for h in heads:
            paths, source = self.paths(h)
            sources[h] = source
            for p in paths:
                a = p[3][-1]
                if a in heads:
                    continue
                if a not in best or p[0] > best[a][0]:
                    best[a] = (p[0], h, p)
        lam = float(self.settings["lambda_q"])
        cands = []
        for a, (s_topo, h, p) in best.items():
            cos = float(self.vectors[a] @ q_vec) if q_vec is not None else 0.0
            final = cos if retrieval == "similarity" else s_topo + lam * cos
            cands.append((final, s_topo, cos, a, path_triples(h, p)))
        cands.sort(key=lambda c: (-c[0], c[3]))
        return cands, sources

    def _neighbourhood(self, heads: list[int]) -> list[tuple[int, int, int]]:
        g = self.graph
        out = []
        for h in heads:
            for j in range(g.indptr[h], g.indptr[h + 1]):
                o, r, inv = int(g.targets[j]), int(g.relations[j]), bool(g.inverse[j])
                out.append((o, r, h) if inv else (h, r, o))
        return list(dict.fromkeys(out))

    # ---------------------------------------------------------------- ask

    def ask(self, question: str, *, entities: Sequence[int | str] | None = None,
            budget: int = 2048, llm: str | LLM = "none", policy: str = "lokg",
            retrieval: str = "taimr", encoding: str = "ittc") -> Answer:
        """Answer one question with at most one LLM call; see the module docstring."""
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
        links = self._given(entities) if entities else self.linker.link(question)
        q_vec = None
        if not links and self.vectors is not None:
            q_vec = self.embed_question(question)
            if q_vec is not None:
                links = vector_fallback(question, lambda _: q_vec[None, :], self._search,
                                        min_cosine=float(self.settings["min_link_cosine"]))
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

        # 2. retrieve
        if retrieval != "neighbourhood" and q_vec is None:
            q_vec = self.embed_question(question)
        if retrieval == "similarity" and q_vec is None:
            raise QueryError("retrieval 'similarity' needs the store's encoder "
                             f"({self._encoder_error or 'no entity vectors'})")
        t = lap("embed", t)
        cands, sources = ([], {}) if retrieval == "neighbourhood" else \
            self._retrieve_paths(heads, q_vec, retrieval)
        top = cands[: int(self.settings["max_candidates"])]
        if retrieval == "neighbourhood":
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
        knowledge = self._knowledge(support, scores, focus)
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
                    answers = parsed
                    answer_ids = [self._resolve(a, candidates, heads) for a in parsed]
                    message = f"answered by {reader.name}"
                else:
                    status, fallback_reason = "fallback", "the LLM reply held no answer"
            except LLMError as exc:
                status, fallback_reason = "fallback", f"{exc.kind}: {exc}"
            if status == "fallback":
                message = f"LLM call failed or gave no answer; top retrieval answer returned"
        lap("llm", t)
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

    def _resolve(self, answer: str, candidates: list[dict], heads: list[int]) -> int | None:
        """The entity an LLM answer names: a candidate first, then any entity of the store."""
        key = normalise(answer)
        for c in candidates:
            if normalise(c["name"]) == key:
                return c["id"]
        ids = self.linker.lookup(answer)
        return ids[0] if ids else None

    def _empty(self, base: dict, status: str, message: str, timings: dict) -> Answer:
        return Answer(**base, answers=[], answer_ids=[], status=status, message=message,
                      fallback=False, fallback_reason=None, llm_calls=0,
                      prompt={"system": "", "user": ""},
                      tokens={"prompt": 0, "completion": 0, "knowledge": 0, "naive": 0,
                              "tcr": 1.0, "budget": 0, "overhead": {}},
                      triples=[], candidates=[], encoding={}, timings=timings)

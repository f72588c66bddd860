"""KAPING, ToG and chunk-RAG, the external baselines, on top of an opened LOKG store.

Both read the same graph the runtime reads (``Runtime.graph``: canonical triples with inverse
edges, so a topic entity's 1-hop facts include the ones where it is the object), embed with the
store's own sentence encoder (``Runtime.encoder()``; a store without one cannot run them), and
ask the reader with the runtime's fixed prompt (``runtime.prompt``). Knowledge is rendered as
the triples' names (``s | r | o``, the compact ITTC line — both papers verbalise bare triples)
in rank order and cut at the knowledge budget B (``ittc.encode_uniform``), so every baseline is
under the same reader and budget as LOKG. Tokens are cl100k_base over the messages sent and the
replies received, failed calls included with the prompt they sent.

**KAPING** (Baek et al., 2023). The pool is the 1-hop triples of the topic entities, in graph
order (relation id, direction, neighbour id) entity by entity, cut at
:data:`KAPING_POOL` = 200; each triple is verbalised as ``subject relation object`` (relation
names with ``_ . /`` as spaces) and embedded as a passage; the :data:`KAPING_TOP_K` = 20 most
similar to the question (cosine, ties by pool order) are the knowledge; one call. Reader
``none`` (and the fallback when the call fails or the reply holds no answer): the endpoint of
the most similar triple that is not a topic entity.

Like the runtime's ``none`` reader (the top-ranked answer of retrieval), every answer
made without the LLM is one entity, so F1 compares like with like across methods.

**ToG** (Sun et al., 2024, the relation-pruning variant ToG-R), width W = 3, depth D = 3. From
the topic entities, each depth (1) lists the relations (with direction) leaving the beam's end
entities, pre-ranked by cosine to the question, the top :data:`TOG_MAX_OPTIONS` shown to the LLM,
which picks up to W (**one call**); (2) follows the picked relations to new entities, keeping the
W paths whose relations are most similar to the question (sum of cosines; ties by the new
entity's cosine, then id) — ToG-R samples entities at random, we rank them to stay
deterministic; (3) asks the reader to answer from the triples of the beam (**one call**, the
runtime's instructions: "If you cannot answer, reply: none"). It stops at the first depth whose
answer is not ``none``; if none comes by depth D the answer is the top beam path's end
entity (status ``beam_answer``). So 2–6 calls per question (ToG proper prunes per entity and
reports 7–10).
When the LLM's relation pick matches no option, or the call fails, the cosine ranking is used
for that step (a failure is counted). Reader ``none``: there is no LLM to prune or reason, so
relations are picked by cosine alone, the search always runs to depth D, and the answer is the
end (not a topic entity) of the path with the highest **mean** relation cosine over every depth
— the mean, not the sum, so that a 1-hop path competes with a 3-hop one. That is a faithful
"ToG without its LLM", not ToG: expect it to be weak.

**chunk-RAG** (dense top-k chunk retrieval, the plain text-RAG most users start from),
on a store built from documents: its ``chunks`` table (and ``documents`` for titles). Each
chunk is one knowledge line, ``title | text`` with whitespace collapsed (the reader's
one-fact-a-line form). Chunks are ranked by cosine between the question
(``encode_queries``) and the chunk text — the build's :data:`CHUNK_VECTORS_FILE` (unit rows in
``chunks`` order) when it has one, else the chunk texts embedded once (``encode_passages``)
when the method is built — ties by table order, then packed greedily into B: whole lines
while they fit, the first that does not is cut at a word boundary to the tokens left, and
packing stops (so k is what B holds, and the knowledge is never over B). One call. Reader
``none``: there is no answer extraction from passages, so the prediction is empty (status
``no_reader``; EM and F1 0) — its context recall is still measured. TCR is undefined (no
naive rendering: T_naive = 0).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from lokg.common.datasets import Question
from lokg.common.metrics import normalise_answer
from lokg.evaluation.context import EvalContext, MethodError
from lokg.evaluation.runner import Method, Prediction
from lokg.runtime.contract import StoreError
from lokg.runtime.tokens import count_joined, count_tokens

KAPING_POOL = 200
KAPING_TOP_K = 20
TOG_WIDTH = 3
TOG_DEPTH = 3
TOG_MAX_OPTIONS = 30
#: A documents build's chunk embeddings: float32 [n_chunks, d], unit rows in ``chunks`` order.
CHUNK_VECTORS_FILE = "chunk_vectors.npy"
#: Cached triple-text vectors per KAPING method (cleared past this size).
_CACHE_LIMIT = 200_000

PRUNE_INSTRUCTIONS = (
    "Pick the relations most useful to answer the question. Reply with up to {width} relation "
    "names copied from the list, one per line, best first, no explanations."
)
_RELATION_SPLIT = re.compile(r"[._/]+")

Triple = tuple[int, int, int]


def relation_text(name: str) -> str:
    """A relation name as words: ``people.person.place_of_birth`` → ``people person place of
    birth``."""
    return " ".join(_RELATION_SPLIT.sub(" ", name).split())


def _encoder(ctx: EvalContext, method: str):
    enc = ctx.runtime.encoder()
    if enc is None:
        raise MethodError(f"{method} needs the store's sentence encoder, which is unavailable "
                          f"({getattr(ctx.runtime, '_encoder_error', None) or 'no encoder'}); "
                          "build the store with the entity_encode stage and install the "
                          "encoder extra")
    return enc


def one_hop(rt, entity: int) -> list[Triple]:
    """The triples touching ``entity``, in graph order (relation, direction, neighbour)."""
    g = rt.graph
    out = []
    for j in range(int(g.indptr[entity]), int(g.indptr[entity + 1])):
        o, r = int(g.targets[j]), int(g.relations[j])
        out.append((o, r, entity) if bool(g.inverse[j]) else (entity, r, o))
    return out


def _knowledge(rt, triples: Sequence[Triple], focus: set[int]):
    from lokg.runtime.ittc import KnowledgeTriple

    return [KnowledgeTriple(subject=rt.names[s], relation=rt.relation_names.get(r, str(r)),
                            object=rt.names[o], rank=rank,
                            tail_entropy=float(rt.tail_entropy[r]), focus=s in focus or o in focus)
            for rank, (s, r, o) in enumerate(triples)]


@dataclass
class _Reading:
    """One reader call: parsed answers (None: the call failed) and what it cost."""

    answers: list[str] | None
    prompt: dict
    prompt_tokens: int
    completion_tokens: int
    ms: float


def _read(ctx: EvalContext, knowledge: str, question: str, system: str | None = None) -> _Reading:
    """One call to the reader with the runtime's prompt (or another system message)."""
    from lokg.runtime.prompt import ANSWER_MAX_TOKENS, INSTRUCTIONS, build_prompt, parse_answers, \
        prompt_tokens
    from lokg.runtime.llm import LLMError
    from lokg.runtime.tokens import count_tokens

    prompt = build_prompt(knowledge, question, instructions=system or INSTRUCTIONS)
    sent = prompt_tokens(prompt)
    started = time.perf_counter()
    try:
        reply = ctx.llm.complete(prompt.user, system=prompt.system, max_tokens=ANSWER_MAX_TOKENS)
    except LLMError:
        return _Reading(None, prompt.to_dict(), sent, 0, (time.perf_counter() - started) * 1e3)
    return _Reading(parse_answers(reply.text), prompt.to_dict(), sent, count_tokens(reply.text),
                    (time.perf_counter() - started) * 1e3)


def _top_end(rt, triples: Sequence[Triple], topics: set[int]) -> list[str]:
    """The name of the first endpoint of ranked triples that is not a topic entity (or [])."""
    for s, _, o in triples:
        for e in (o, s):
            if e not in topics:
                return [rt.names[e]]
    return []


def _prediction(ctx: EvalContext, rt, readings: list[_Reading], answers: list[str], status: str,
                encodings: list, triples: Sequence[Triple], timings: dict, details: dict
                ) -> Prediction:
    return Prediction(
        answers=answers, status=status, llm_calls=ctx.llm.calls, failed_calls=ctx.llm.failed,
        prompt_tokens=sum(r.prompt_tokens for r in readings),
        completion_tokens=sum(r.completion_tokens for r in readings),
        knowledge_tokens=sum(e.tokens for e in encodings),
        naive_tokens=sum(e.naive_tokens for e in encodings),
        prompts=[r.prompt for r in readings],
        triples=[{"s": rt.names[s], "r": rt.relation_names.get(r, str(r)), "o": rt.names[o]}
                 for s, r, o in triples],
        timings={k: round(v, 3) for k, v in timings.items()},
        error="; ".join(ctx.llm.errors) or None, details={"build_id": rt.build_id, **details},
        knowledge="".join(e.text for e in encodings))


# --------------------------------------------------------------------------------------------
# KAPING


class _TripleVectors:
    """Passage vectors of verbalised triples, cached across questions (cleared when the cache
    would pass ``_CACHE_LIMIT``)."""

    def __init__(self, rt, enc):
        self.rt, self.enc, self.cache = rt, enc, {}

    def __call__(self, pool: list[Triple]) -> np.ndarray:
        missing = [t for t in pool if t not in self.cache]
        if missing:
            if len(self.cache) + len(missing) > _CACHE_LIMIT:
                self.cache.clear()
            names, relations = self.rt.names, self.rt.relation_names
            texts = [f"{names[s]} {relation_text(relations.get(r, str(r)))} {names[o]}"
                     for s, r, o in missing]
            self.cache.update(zip(missing, self.enc.encode_passages(texts)))
        return np.stack([self.cache[t] for t in pool])


def _reader_or(ctx: EvalContext, knowledge: str, question: str, fallback: list[str],
               timings: dict) -> tuple[list, list[str], str]:
    """(readings, answers, status): the reader's answers, else ``fallback`` (status
    ``fallback`` when the reader named none; ``ok`` with no reader)."""
    if not ctx.llm.calls_model:
        return [], fallback, "ok"
    reading = _read(ctx, knowledge, question)
    timings["llm"] = reading.ms
    if reading.answers:
        return [reading], reading.answers, "ok"
    return [reading], fallback, "fallback"


def kaping(ctx: EvalContext) -> Method:
    """KAPING under the context's reader and budget (module docstring)."""
    from lokg.runtime.ittc import encode_uniform

    rt = ctx.runtime
    enc = _encoder(ctx, "kaping")
    vectors = _TripleVectors(rt, enc)

    def run(question: Question) -> Prediction:
        ctx.llm.reset()
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        topics, links, status = ctx.topic_ids(rt, question)
        timings["link"] = (time.perf_counter() - t0) * 1e3
        details = {"linked": links}
        if status is not None:
            return _prediction(ctx, rt, [], [], status, [], [], timings, details)
        t = time.perf_counter()
        pool = list(dict.fromkeys(t for h in topics for t in one_hop(rt, h)))[:KAPING_POOL]
        if not pool:
            return _prediction(ctx, rt, [], [], "no_paths", [], [], timings, details)
        q_vec = enc.encode_queries([question.question])[0]
        sims = vectors(pool) @ q_vec
        top = [pool[i] for i in np.argsort(-sims, kind="stable")[:KAPING_TOP_K]]
        timings["retrieve"] = (time.perf_counter() - t) * 1e3
        t = time.perf_counter()
        encoding = encode_uniform(_knowledge(rt, top, set(topics)), ctx.budget, level="compact")
        timings["encode"] = (time.perf_counter() - t) * 1e3
        readings, answers, status = _reader_or(ctx, encoding.text, question.question,
                                               _top_end(rt, top, set(topics)), timings)
        timings["total"] = (time.perf_counter() - t0) * 1e3
        details["pool"] = len(pool)
        return _prediction(ctx, rt, readings, answers, status, [encoding],
                           [top[e.index] for e in encoding.triples if e.granularity], timings,
                           details)

    return run


# --------------------------------------------------------------------------------------------
# ToG


@dataclass(frozen=True)
class _Path:
    nodes: tuple[int, ...]  # topic entity first, end entity last
    triples: tuple[Triple, ...]
    rel_score: float  # sum of the cosines of its relations to the question
    end_score: float  # cosine of its end entity to the question

    @property
    def mean(self) -> float:
        return self.rel_score / len(self.triples) if self.triples else float("-inf")


def _options(rt, beam: list[_Path]) -> dict[tuple[int, bool], list[tuple[_Path, int]]]:
    """(relation, inverse) → the (path, neighbour) steps it offers from the beam's ends."""
    g = rt.graph
    found: dict[tuple[int, bool], list[tuple[_Path, int]]] = {}
    for path in beam:
        end = path.nodes[-1]
        for j in range(int(g.indptr[end]), int(g.indptr[end + 1])):
            target = int(g.targets[j])
            if target not in path.nodes:
                found.setdefault((int(g.relations[j]), bool(g.inverse[j])), []).append(
                    (path, target))
    return found


@dataclass
class _Search:
    """One question's ToG search state: the beam, every path kept, the reader's calls."""

    topics: list[int]
    q_vec: np.ndarray
    beam: list[_Path]
    seen: list[_Path]
    readings: list[_Reading]
    encodings: list
    timings: dict
    answers: list[str] | None = None

    def read(self, reading: _Reading) -> _Reading:
        self.readings.append(reading)
        self.timings["llm"] += reading.ms
        return reading

    def support(self) -> list[Triple]:
        return list(dict.fromkeys(t for p in self.beam for t in p.triples))


class _ToG:
    """ToG-R under the context's reader and budget (module docstring)."""

    def __init__(self, ctx: EvalContext):
        self.ctx, self.rt = ctx, ctx.runtime
        self.enc = _encoder(ctx, "tog")
        rel_ids = sorted(self.rt.relation_names)
        self.rel_vectors = dict(zip(rel_ids, self.enc.encode_passages(
            [relation_text(self.rt.relation_names[r]) for r in rel_ids]))) if rel_ids else {}

    def label(self, option: tuple[int, bool]) -> str:
        name = self.rt.relation_names.get(option[0], str(option[0]))
        return f"{name} (reverse)" if option[1] else name

    def entity_cos(self, q_vec: np.ndarray, entity: int) -> float:
        return float(self.rt.vectors[entity] @ q_vec) if self.rt.vectors is not None else 0.0

    def __call__(self, question: Question) -> Prediction:
        ctx, rt = self.ctx, self.rt
        ctx.llm.reset()
        t0 = time.perf_counter()
        topics, links, status = ctx.topic_ids(rt, question)
        details: dict = {"linked": links, "depths": []}
        if status is not None:
            return _prediction(ctx, rt, [], [], status, [], [], {"llm": 0.0}, details)
        search = _Search(topics, self.enc.encode_queries([question.question])[0],
                         [_Path((h,), (), 0.0, 0.0) for h in topics][:TOG_WIDTH], [], [], [],
                         {"llm": 0.0})
        for _ in range(TOG_DEPTH):
            if not self.deepen(search, question.question, details) or search.answers:
                break
        answers, status = self.final_answers(search)
        search.timings["total"] = (time.perf_counter() - t0) * 1e3
        return _prediction(ctx, rt, search.readings, answers, status, search.encodings,
                           search.support(), search.timings, details)

    def deepen(self, search: _Search, question: str, details: dict) -> bool:
        """One depth: prune the relations, grow the beam, ask the reader; False when no
        relation leaves the beam."""
        steps = _options(self.rt, search.beam)
        if not steps:
            return False
        cos = {o: float(self.rel_vectors[o[0]] @ search.q_vec) for o in steps}
        ranked = sorted(steps, key=lambda o: (-cos[o], o))
        picked = self.prune(search, question, ranked)
        grown = [_Path(path.nodes + (target,),
                       path.triples + (((target, o[0], path.nodes[-1]) if o[1]
                                        else (path.nodes[-1], o[0], target)),),
                       path.rel_score + cos[o], self.entity_cos(search.q_vec, target))
                 for o in picked for path, target in steps[o]]
        grown.sort(key=lambda p: (-p.rel_score, -p.end_score, p.nodes[-1], p.nodes))
        search.beam = grown[:TOG_WIDTH]
        search.seen.extend(search.beam)
        details["depths"].append({"relations": [self.label(o) for o in picked],
                                  "ends": [self.rt.names[p.nodes[-1]] for p in search.beam]})
        if self.ctx.llm.calls_model:
            self.reason(search, question)
        return True

    def prune(self, search: _Search, question: str, ranked: list) -> list:
        """The LLM's pick of up to W relations, or the cosine's top W without one (or when
        its reply names none of the options)."""
        if not self.ctx.llm.calls_model:
            return ranked[:TOG_WIDTH]
        shown = ranked[:TOG_MAX_OPTIONS]
        names = ", ".join(self.rt.names[h] for h in search.topics)
        listing = "".join(f"- {self.label(o)}\n" for o in shown)
        reading = search.read(_read(self.ctx, f"Topic entities: {names}\nRelations:\n{listing}",
                                    question, PRUNE_INSTRUCTIONS.format(width=TOG_WIDTH)))
        by_label = {normalise_answer(self.label(o)): o for o in shown}
        chosen = [by_label[k] for k in (normalise_answer(a) for a in reading.answers or [])
                  if k in by_label]
        return list(dict.fromkeys(chosen))[:TOG_WIDTH] if chosen else ranked[:TOG_WIDTH]

    def reason(self, search: _Search, question: str) -> None:
        from lokg.runtime.ittc import encode_uniform

        encoding = encode_uniform(_knowledge(self.rt, search.support(), set(search.topics)),
                                  self.ctx.budget, level="compact")
        search.encodings.append(encoding)
        reading = search.read(_read(self.ctx, encoding.text, question))
        if reading.answers:
            search.answers = reading.answers

    def final_answers(self, search: _Search) -> tuple[list[str], str]:
        """The reader's answer, else the beam's top end (flagged ``beam_answer``) — or, with
        no reader, the end of the path with the best mean relation cosine."""
        if search.answers is not None:
            return search.answers, "ok"
        if self.ctx.llm.calls_model:
            ends = [p.nodes[-1] for p in search.beam]
            status = "beam_answer" if search.seen else "no_paths"
        else:
            ranked = sorted(search.seen, key=lambda p: (-p.mean, -p.end_score, len(p.nodes),
                                                        p.nodes))
            ends = [p.nodes[-1] for p in ranked]
            status = "ok" if search.seen else "no_paths"
        return [self.rt.names[e] for e in ends if e not in search.topics][:1], status


def tog(ctx: EvalContext) -> Method:
    """ToG-R under the context's reader and budget (module docstring)."""
    return _ToG(ctx)


# --------------------------------------------------------------------------------------------
# chunk-RAG


def passage_line(title: str, text: str) -> str:
    """A chunk as one knowledge line, ``title | text``, whitespace collapsed and newline-ended,
    so no token spans two lines and the packed text costs the sum of its lines."""
    body = " ".join(text.split())
    title = " ".join(title.split())
    return f"{title} | {body}\n" if title else f"{body}\n"


@dataclass(frozen=True)
class Packing:
    """The packed knowledge: its text and tokens, how many ranked lines it holds (the last
    one cut when ``cut``)."""

    text: str
    tokens: int
    count: int
    cut: bool


def _cut(line: str, room: int) -> str:
    """The longest word prefix of ``line`` (newline-ended) within ``room`` tokens, or ""."""
    words = line.rstrip("\n").split(" ")
    lo, hi = 0, len(words)  # invariant: words[:lo] fits; the count grows with the prefix
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(" ".join(words[:mid]) + "\n") <= room:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]) + "\n" if lo else ""


def pack_passages(lines: Iterable[str], budget: int) -> Packing:
    """Ranked lines into ``budget`` tokens: whole while they fit, then the next one cut."""
    kept, used = [], 0
    for line in lines:
        cost = count_tokens(line)
        if used + cost > budget:
            cut = _cut(line, budget - used)
            if cut:
                kept.append(cut)
            return Packing("".join(kept), count_joined(kept), len(kept), bool(cut))
        kept.append(line)
        used += cost
    return Packing("".join(kept), count_joined(kept), len(kept), False)


def _chunks(rt) -> tuple[list[str], list[str], list[str], list[str]]:
    """(chunk ids, doc ids, texts, knowledge lines) of the build's chunks, in table order."""
    try:
        table = rt.build.read("chunks", columns=["chunk_id", "doc_id", "text"])
    except StoreError as exc:
        raise MethodError(f"chunk-rag needs a store built from documents (ingest format docs): "
                          f"{exc}") from None
    chunk_ids, doc_ids, texts = (table.column(c).to_pylist() for c in ("chunk_id", "doc_id",
                                                                       "text"))
    if not texts:
        raise MethodError(f"{rt.build.table_path('chunks')}: the store has no chunks")
    titles = {}
    if "documents" in rt.build.manifest.get("tables", {}):
        docs = rt.build.read("documents", columns=["doc_id", "title"])
        titles = dict(zip(docs.column("doc_id").to_pylist(), docs.column("title").to_pylist()))
    lines = [passage_line(titles.get(d) or "", t or "") for d, t in zip(doc_ids, texts)]
    return chunk_ids, doc_ids, texts, lines


def _chunk_vectors(rt, texts: list[str], enc) -> np.ndarray:
    """The build's chunk vectors when it has them (checked against the chunks and the
    encoder), else the chunk texts embedded now."""
    path = rt.build.path / CHUNK_VECTORS_FILE
    if not path.is_file():
        return np.asarray(enc.encode_passages(texts), dtype=np.float32)
    vectors = np.load(path, mmap_mode="r")
    if vectors.shape != (len(texts), enc.dim):
        raise MethodError(f"{path}: shape {vectors.shape}, expected ({len(texts)}, {enc.dim}): "
                          "one row per chunk of the chunks table, of the store's encoder")
    return vectors


def chunk_rag(ctx: EvalContext) -> Method:
    """Dense top-k chunks packed into B under the context's reader (module docstring)."""
    rt = ctx.runtime
    enc = _encoder(ctx, "chunk-rag")
    chunk_ids, doc_ids, texts, lines = _chunks(rt)
    vectors = _chunk_vectors(rt, texts, enc)

    def run(question: Question) -> Prediction:
        ctx.llm.reset()
        t0 = time.perf_counter()
        sims = np.asarray(vectors @ enc.encode_queries([question.question])[0])
        ranked = np.argsort(-sims, kind="stable")
        packing = pack_passages((lines[i] for i in ranked), ctx.budget)
        timings = {"retrieve": (time.perf_counter() - t0) * 1e3}
        readings, answers, status = [], [], "no_reader"
        if ctx.llm.calls_model:
            reading = _read(ctx, packing.text, question.question)
            readings.append(reading)
            timings["llm"] = reading.ms
            answers = reading.answers or []
            status = "ok" if answers else "no_answer"
        timings["total"] = (time.perf_counter() - t0) * 1e3
        used = [{"chunk_id": chunk_ids[i], "doc_id": doc_ids[i], "score": round(float(sims[i]), 6)}
                for i in ranked[:packing.count]]
        return Prediction(
            answers=answers, status=status, llm_calls=ctx.llm.calls, failed_calls=ctx.llm.failed,
            prompt_tokens=sum(r.prompt_tokens for r in readings),
            completion_tokens=sum(r.completion_tokens for r in readings),
            knowledge_tokens=packing.tokens, prompts=[r.prompt for r in readings],
            timings={k: round(v, 3) for k, v in timings.items()},
            error="; ".join(ctx.llm.errors) or None,
            details={"build_id": rt.build_id, "chunks": used, "cut": packing.cut},
            knowledge=packing.text)

    return run

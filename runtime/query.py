"""The query runtime: ``Runtime.open(store).ask(question, budget=...)`` → an auditable Answer.

One question goes through four steps and makes at most one LLM call; ``ask`` is their chain,
each step a part with one job:

1. **link** (runtime/linker.py): caller-given ids or keys, else exact/normalised name match,
   else the vector fallback when the store's encoder is installed;
2. **plan** (runtime/planning.py): on stores with relation knowledge, what it decides for the
   question, once, before retrieval: it may be the answer itself (a passed gate, or policy
   precision's abstention, runtime/reading.py ``DerivedAnswer``); otherwise every later step
   reads what it decided (the compact context, the query-relation term, the boosted facts);
3. **retrieve** (runtime/retrieval.py): the ranked candidate answers and the candidate set;
4. **encode** (runtime/context.py): the candidate set as ITTC knowledge under the budget B;
5. **read** (runtime/reading.py): one call to the chosen backend (``none``: no call, the
   top-ranked candidate is the answer), and the Answer.

What every step looks up — the build's tables, graph, linker, path cache, vectors and the
question encoder — is the opened build (runtime/opened.py), which a Runtime is. The question is
embedded at most once per form, the masked form (relation knowledge) and the plain one (the
semantic term) in one encoder batch.

Bad input never surfaces as a traceback: invalid arguments raise :class:`QueryError` (a
ValueError whose message names the argument, runtime/request.py), and questions the store
cannot answer (nothing linked, no path) return a well-formed Answer whose ``status`` says why.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from lokg.runtime import object_store, overlay
from lokg.runtime.answer_record import Answer
from lokg.runtime.config import DEFAULT_BUDGET
from lokg.runtime.query_settings import QuerySettings
from lokg.runtime.context import ContextEncoder
from lokg.runtime.linker import FALLBACK, Link, spelled_topics, vector_fallback
from lokg.runtime.llm import LLM
from lokg.runtime.opened import OpenedBuild, open_build
from lokg.runtime.planning import Planner
from lokg.runtime.reading import DerivedAnswer, Reader, read_answer
from lokg.runtime.request import MAX_GIVEN_ENTITIES, QueryError, Request, Timer, checked_request
from lokg.runtime.retrieval import Retriever

__all__ = ["QueryError", "Runtime"]

NO_ENTITY = ("no entity of the store was found in the question; pass entity ids to ask about "
             "a specific entity")
NO_FACTS = "the linked entities have no facts in the store"


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


class Runtime(OpenedBuild):
    """A published build, opened once, that answers questions: ``ask`` chains the steps."""

    #: False when a pin could not be written (a read-only store or replica): unprotected.
    pinned: bool = True

    @classmethod
    def open(cls, store_root: str | Path, *, build_id: str | None = None, verify: bool = True,
             pins_required: bool = True, **settings) -> Runtime:
        """Resolve CURRENT (or ``build_id``) once, pin it, verify the manifest, load the build.

        The pin (runtime/pins.py) keeps retention from deleting the build while this Runtime
        exists; :meth:`close` (or the Runtime's collection) releases it. Raises StoreError
        (naming the file) for anything that is not a complete, intact build. An ``s3://``
        ``store_root`` is served from its verified local cache (runtime/object_store.py).
        ``settings`` override the ``query`` section of the config defaults. Not
        ``pins_required`` (a read-only replica): an object pin that cannot be written does not
        fail the open, and ``pinned`` is False (a local store's pin never fails the open).
        """
        started = time.perf_counter()
        unknown = set(settings) - set(QuerySettings.rules())
        if unknown:
            raise QueryError(f"unknown runtime settings: {sorted(unknown)}")
        build, held = open_build(store_root, build_id, verify, pins_required)
        try:
            config = build.manifest.get("config") or {}
            runtime = cls(build, {**QuerySettings.merged(config), **settings}, 0.0)
        except BaseException:
            object_store.release(*held)
            raise
        runtime._release = weakref.finalize(runtime, object_store.release, *held)
        runtime.pinned = all(h is not None for h in held)
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

    # ---------------------------------------------------------------- ask

    @_logging_feedback
    def ask(self, question: str, *, entities: Sequence[int | str] | None = None,
            budget: int = DEFAULT_BUDGET, llm: str | LLM = "none", policy: str | None = None,
            retrieval: str = "taimr", encoding: str = "ittc", relation_weight: float | None = None,
            chain_boost: bool | None = None, source_sentences: bool = True,
            passage_items: int | None = None) -> Answer:
        """Answer one question with at most one LLM call (module docstring). ``policy`` (default
        ``route`` with relation knowledge, else ``lokg``): ``precision`` answers derived where its
        gate passes, else abstains; ``route`` too, else reads the chain's compact context (else
        the LOKG context). ``relation_weight``, ``chain_boost``, ``passage_items``: the settings
        (None: the store's); ``source_sentences``: restored sentences as the verbose lines."""
        timer = Timer()
        req = checked_request(self, question, budget, llm, policy, retrieval, encoding,
                              relation_weight, chain_boost, source_sentences, passage_items)
        timer.mark()
        links, linked_vec = self._link(question, entities)
        timer.lap("link")
        base = self._common_fields(req, links)
        heads = list(dict.fromkeys(link.id for link in links))
        if not heads:
            return Answer.empty("no_entity", NO_ENTITY, timer.done(), budget=req.budget, **base)
        topics = spelled_topics(question, links, self.surface_forms)
        plan, batch_vec = Planner(self).plan(req, heads, topics, linked_vec)
        if plan.route is not None:
            timer.lap("relknow")
        base["route"] = plan.route
        if plan.final:
            return DerivedAnswer(self).answer(req, base, plan, heads, timer, linked_vec, batch_vec)
        retriever = Retriever(self)
        q_vec = retriever.question_vector(req, plan, linked_vec, batch_vec)
        timer.lap("embed")
        found = retriever.retrieve(req, heads, q_vec, plan)
        timer.lap("retrieve")
        if not found.triples:
            return Answer.empty("no_paths", NO_FACTS, timer.done(), budget=req.budget, **base)
        knowledge, enc = ContextEncoder(self).encode(req, heads, found, plan)
        timer.lap("encode")
        reading = Reader(self).read(req, enc, found.candidates, plan)
        timer.lap("llm")
        return read_answer(self, req, base, plan, found, (knowledge, enc), reading, timer.done())

    def _common_fields(self, req: Request, links: list[Link]) -> dict:
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
            q_vec = self.embed(None, question)[1]
            if q_vec is not None:
                links = vector_fallback(question, lambda _: q_vec[None, :], self.search,
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
        for e in entities:
            if isinstance(e, bool):
                unknown.append(e)
            elif isinstance(e, (int, np.integer)):
                (links.append(Link(int(e), str(e), "given", 1.0))
                 if 0 <= e < self.n_entities else unknown.append(e))
            elif isinstance(e, str):
                key_id = self.entity_ids().get(e)
                (links.append(Link(key_id, e, "given", 1.0))
                 if key_id is not None else unknown.append(e))
            else:
                unknown.append(e)
        if unknown:
            raise QueryError(f"entities: unknown entity ids or keys {unknown[:5]!r} "
                             f"(ids are 0..{self.n_entities - 1} in build {self.build_id})")
        return links

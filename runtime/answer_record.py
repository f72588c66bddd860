"""The Answer record: everything about one answered question, as ``Runtime.ask`` returns it.

Its own module because its fields are the runtime's public output — the HTTP service declares
them as its response model, the evaluation stores them, the CLI prints them — while the query
pipeline that fills them changes on its own (runtime/query.py and its parts). Prompts and the
parsing of LLM replies are runtime/prompt.py.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


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
    #: the sources of the triples used (stores built from documents): triple (its line),
    #: title, doc_id, chunk_id, sentence_id, sentence (runtime/provenance.py)
    citations: list[dict] = field(default_factory=list)
    #: the passages ITTC emitted beside the triples (query.passage_items), their lines first in
    #: the knowledge: chunk_id, doc_id, title, granularity (sentences | passage), rank, score,
    #: cost, covers (triples held), line; each cites its sentences (basis "passage")
    passages: list[dict] = field(default_factory=list)

    @classmethod
    def empty(cls, status: str, message: str, timings: dict, *, budget: int, **common) -> Answer:
        """An answer with nothing read (no entity, no paths, an abstention): no call, no prompt,
        no knowledge; ``budget`` is the one asked for, so the audit line reports it even when
        none of it was spent; ``common`` are the fields every outcome shares (question, …)."""
        return cls(**common, answers=[], answer_ids=[], status=status, message=message,
                   fallback=False, fallback_reason=None, llm_calls=0,
                   prompt={"system": "", "user": ""},
                   tokens={"prompt": 0, "completion": 0, "knowledge": 0, "naive": 0,
                           "tcr": 1.0, "budget": budget, "overhead": {}},
                   triples=[], candidates=[], encoding={}, timings=timings)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, **kw)

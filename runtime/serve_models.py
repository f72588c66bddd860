"""The HTTP service's request and response models (runtime/server.py): ``Runtime.ask``'s
options with its limits, so every client mistake is a 422 naming the field."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from lokg.runtime.answer_record import Answer
from lokg.runtime.config import DEFAULT_BUDGET, ENCODINGS, MAX_BUDGET, POLICIES, RETRIEVALS
from lokg.runtime.request import MAX_GIVEN_ENTITIES, MAX_QUESTION_CHARS

MAX_BATCH = 64
MAX_KEY_CHARS = 1024

EntityRef = StrictInt | Annotated[StrictStr, Field(min_length=1, max_length=MAX_KEY_CHARS)]


class AskRequest(BaseModel):
    """One question and the options of ``Runtime.ask``, with its limits."""

    model_config = ConfigDict(extra="forbid")

    question: Annotated[StrictStr, Field(min_length=1, max_length=MAX_QUESTION_CHARS)]
    entities: Annotated[list[EntityRef] | None, Field(max_length=MAX_GIVEN_ENTITIES)] = None
    budget: Annotated[StrictInt, Field(ge=1, le=MAX_BUDGET)] = DEFAULT_BUDGET
    llm: Annotated[StrictStr, Field(max_length=64)] = "none"
    policy: Literal[POLICIES] | None = None  # route on a store with relation knowledge, else lokg
    retrieval: Literal[RETRIEVALS] = "taimr"
    encoding: Literal[ENCODINGS] = "ittc"
    source_sentences: bool = True  # restored source sentences as ITTC's verbose granularity


class BatchRequest(BaseModel):
    """Several questions answered in order from one build."""

    model_config = ConfigDict(extra="forbid")

    requests: Annotated[list[AskRequest], Field(min_length=1, max_length=MAX_BATCH)]


class BatchItem(BaseModel):
    """One batch result: the Answer, or why this item was refused (422)."""

    ok: bool
    answer: Answer | None = None
    status: int | None = None
    detail: str | None = None


class BatchResponse(BaseModel):
    build_id: str
    results: list[BatchItem]

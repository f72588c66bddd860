"""The ``openai`` extraction backend: one chunk of text -> entities and triples, by any
OpenAI-compatible chat endpoint (vLLM, llama.cpp server, Ollama, hosted APIs).

The HTTP call is :class:`runtime.llm.openai.OpenAICompatible` (a timeout per attempt, bounded
retries on transport errors, 429 and 5xx, Retry-After, the key never logged nor echoed). This
module adds what extraction needs on top of it: a structured prompt asking for one JSON object,
a parser that tolerates a ```json fence, a validator, and up to ``retries`` further attempts
when a reply is not JSON or fails validation. Each such retry tells the model what was wrong,
so that even a deterministic server (temperature 0) can answer differently. A chunk whose reply
stays malformed, or whose endpoint stays unreachable, raises :class:`ChunkExtractionError`: the
stage quarantines that chunk and goes on with the others.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Mapping

from lokg.common.stage import StageError
from lokg.runtime.errors import LokgError
from lokg.runtime.llm.base import Completion, LLMConfigError, LLMError
from lokg.runtime.llm.openai import MAX_RETRIES, OpenAICompatible
from lokg.text.extractors import ChunkExtractionError

log = logging.getLogger("lokg.triple_extract")

#: Bump when the parsing or validation rules change what a reply yields (the fingerprint hashes
#: the prompt texts themselves, so editing a prompt already invalidates cached extractions).
PROMPT_VERSION = 1

SYSTEM_PROMPT = """\
You extract a knowledge graph from one passage of text.

Reply with one JSON object and nothing else, in this format:
{"entities": [{"name": "...", "type": "...", "description": "..."}],
 "triples": [["subject", "relation", "object"]]}

"entities": the named entities the passage mentions (people, organisations, places, works,
events, dates...). "name" is the entity's fullest name as the passage writes it; "type" a short
lower-case category such as person, organisation, city, country, film, book or date;
"description" one short phrase, taken from the passage, saying who or what it is.

"triples": the facts the passage states, each as [subject, relation, object], all three strings.
The subject is the name of one of the entities; the object is an entity name or a literal value
(a date, a number, a short phrase); the relation is a short phrase such as "born in",
"directed by" or "capital of". Replace pronouns by the names they stand for. Add nothing the
passage does not state."""

USER_TEMPLATE = "Passage:\n{text}"

RETRY_NOTE = ("\n\nYour previous reply to this passage was unusable ({reason}). Reply with the "
              "JSON object only, in the format described.")

#: LLMError kinds meaning the endpoint could not be reached or did not answer in time.
UNREACHABLE = frozenset({"connect", "connection", "timeout", "deadline"})

_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_SHOWN = 80  # characters of a bad item quoted in a reason


class MalformedReply(LokgError, ValueError):
    """A reply that is no usable extraction: ``problem`` says how ("is not JSON", "fails
    validation"), the message the detail; the extractor retries, then quarantines the chunk."""

    def __init__(self, problem: str, detail: str):
        super().__init__(detail)
        self.problem = problem


def _clean(text: str) -> str:
    """Whitespace runs to one space, so "born\\n in" and "born in" are one relation phrase."""
    return " ".join(text.split())


def _entity(item) -> dict | None:
    """An entity object with a non-empty string name, else None (dropped)."""
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        return None
    name = _clean(item["name"])
    if not name:
        return None
    extra = {key: item.get(key) for key in ("type", "description")}
    return {"name": name, **{k: _clean(v) if isinstance(v, str) else "" for k, v in extra.items()}}


def _triple(item) -> list[str] | None:
    """Three non-empty strings, else None (dropped: a numeric object, a pair, an object)."""
    if not isinstance(item, list) or len(item) != 3 or not all(isinstance(p, str) for p in item):
        return None
    parts = [_clean(p) for p in item]
    return parts if all(parts) else None


def _kept(data: dict, key: str, convert: Callable) -> list:
    """The well-formed items of list ``key``; a list none of whose items is well-formed means
    the model ignored the format, which a retry may fix."""
    items = data.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        raise MalformedReply("fails validation", f'"{key}" is a {type(items).__name__}, not a list')
    kept = [x for x in map(convert, items) if x is not None]
    if items and not kept:
        raise MalformedReply("fails validation", f'none of the {len(items)} "{key}" is well-formed '
                             f"(the first: {json.dumps(items[0])[:_SHOWN]})")
    if len(kept) < len(items):
        log.debug("dropped %d malformed %s of %d", len(items) - len(kept), key, len(items))
    return kept


def parse_reply(text: str) -> tuple[list[dict], list[list[str]]]:
    """(entities, triples) of a reply, its ill-formed items dropped; MalformedReply if it is not
    a JSON object (fenced or not) or its lists are unusable."""
    match = _FENCE.search(text)
    try:
        data = json.loads(match.group(1) if match else text)
    except (ValueError, RecursionError) as exc:
        raise MalformedReply("is not JSON", str(exc)) from None
    if not isinstance(data, dict):
        raise MalformedReply("fails validation",
                             f"expected a JSON object, got a {type(data).__name__}")
    return _kept(data, "entities", _entity), _kept(data, "triples", _triple)


def cost(usage: Mapping, cfg: Mapping) -> float:
    """What ``usage`` cost at the config's prices (currency units per 1M tokens)."""
    return (usage.get("prompt_tokens", 0) * cfg["prompt_price"]
            + usage.get("completion_tokens", 0) * cfg["completion_price"]) / 1e6


def _fingerprint(model: str, max_tokens: int) -> str:
    """Everything that changes a reply: model, prompt texts and version, the token limit (not
    the URL: the same model elsewhere answers the same, so its cached extractions stay valid)."""
    what = json.dumps([PROMPT_VERSION, model, max_tokens, SYSTEM_PROMPT, USER_TEMPLATE,
                       RETRY_NOTE])
    return f"openai-p{PROMPT_VERSION}-{hashlib.sha256(what.encode()).hexdigest()[:16]}"


class OpenAIExtractor:
    """Entities and triples of one chunk from an OpenAI-compatible endpoint (module docstring).

    ``retries`` bounds both the HTTP client's further attempts on a transport failure and this
    class's further attempts on a malformed reply. The API key is read from the environment
    variable ``api_key_env`` names; where it is unset (a local server) no key is sent.
    """

    name = "openai"

    def __init__(self, cfg: Mapping):
        self.model = cfg["model"]
        self.max_tokens = cfg["max_completion_tokens"]
        self.retries = cfg["retries"]
        self.concurrency = cfg["concurrency"]
        self.fingerprint = _fingerprint(self.model, self.max_tokens)
        try:  # api_key "" = no key (None would fall back to the runtime's LOKG_LLM_API_KEY)
            self.llm = OpenAICompatible(
                base_url=cfg["base_url"], model=self.model,
                api_key=os.environ.get(cfg["api_key_env"], ""),
                timeout=float(cfg["timeout_s"]), retries=min(self.retries, MAX_RETRIES))
        except LLMConfigError as exc:
            raise StageError(f"triple_extract: {exc}") from None

    def _complete(self, prompt: str, usage: dict) -> Completion:
        """One completion, its tokens added to ``usage``; an LLMError fails the chunk only."""
        try:
            reply = self.llm.complete(prompt, max_tokens=self.max_tokens, system=SYSTEM_PROMPT)
        except LLMError as exc:
            how = "unreachable" if exc.kind in UNREACHABLE else "call failed"
            raise ChunkExtractionError(f"LLM {how}: {exc}", usage=usage) from None
        usage["prompt_tokens"] += reply.prompt_tokens
        usage["completion_tokens"] += reply.completion_tokens
        return reply

    def extract(self, text: str) -> dict:
        """Entities, triples and the tokens spent over every attempt (module docstring)."""
        usage = {"prompt_tokens": 0, "completion_tokens": 0}
        prompt = USER_TEMPLATE.format(text=text)
        attempts = self.retries + 1
        for attempt in range(1, attempts + 1):
            reply = self._complete(prompt, usage)
            try:
                entities, triples = parse_reply(reply.text)
            except MalformedReply as exc:
                problem, detail = exc.problem, str(exc)
                if reply.finish_reason == "length":
                    detail += f" (the reply was cut at max_completion_tokens={self.max_tokens})"
                log.warning("extraction attempt %d/%d: reply %s: %s", attempt, attempts,
                            problem, detail)
                prompt = USER_TEMPLATE.format(text=text) + RETRY_NOTE.format(
                    reason=f"it {problem}: {detail}"[:200])
                continue
            return {"entities": entities, "triples": triples, "usage": usage}
        raise ChunkExtractionError(f"reply {problem} after {attempts} attempts: {detail}",
                                   usage=usage)

"""The LLM interface of the one call per question (the read), its errors and the registry.

Every backend has a ``name`` and ``complete(prompt, *, max_tokens, system="") -> Completion``;
one with ``constrains_choices`` True also takes ``choices=[...]`` and replies with one of them
(the local backend, by a grammar); the runtime validates every other backend's forced-choice
reply itself.
``make_llm(name, **options)`` builds one from the registry: the built-in backends are one module
each (``runtime/llm/none.py``, ``openai.py``, ``local.py``), imported only when asked for, and
``register_backend`` adds more. Every failure of a call — unreachable
server, timeout, HTTP error, unusable response, bad configuration — raises :class:`LLMError`,
so the runtime can catch exactly one type and fall back to the ``none`` answer, flagged.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from lokg.runtime.errors import LokgError


class LLMError(LokgError, RuntimeError):
    """An LLM call (or an LLM backend's set-up) failed; the runtime falls back to ``none``.

    ``kind`` is one of ``config``, ``connect`` (nothing accepted the connection),
    ``connection`` (dropped, reset, truncated), ``timeout``, ``http`` (a non-2xx status),
    ``tls``, ``malformed`` (a 2xx body that is no usable completion) or ``deadline`` (the total
    deadline left no room for another attempt). ``status`` is the last HTTP status (if any),
    ``attempts`` the number of requests made, ``retryable`` whether the last failure was of a
    retryable kind.
    """

    def __init__(self, message: str, *, kind: str, status: int | None = None,
                 attempts: int = 0, retryable: bool = False):
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.attempts = attempts
        self.retryable = retryable


class LLMConfigError(LLMError, ValueError):
    """A backend cannot be built or called as asked (unknown name, missing URL, bad option)."""

    def __init__(self, message: str):
        super().__init__(message, kind="config")


@dataclass(frozen=True)
class Completion:
    """One completion and what it cost."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float  # the whole call: every attempt and every backoff sleep
    model: str  # as the server names it (else as requested)
    attempts: int  # HTTP requests made (0: no call)
    usage_from_server: bool = False  # False: at least one count was taken with cl100k_base
    finish_reason: str | None = None

    def to_dict(self) -> dict:
        return {
            "text": self.text, "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens, "latency_ms": self.latency_ms,
            "model": self.model, "attempts": self.attempts,
            "usage_from_server": self.usage_from_server, "finish_reason": self.finish_reason,
        }


@runtime_checkable
class LLM(Protocol):
    """What the runtime needs from a backend."""

    name: str
    calls_model: bool
    # optional: constrains_choices = True when complete() takes choices=[...] (see module doc)

    def complete(self, prompt: str, *, max_tokens: int, system: str = "") -> Completion:
        """Complete ``prompt`` (the user message) after ``system`` (the instructions)."""
        ...


def check_max_tokens(max_tokens) -> int:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise LLMConfigError(f"max_tokens must be a positive integer; got {max_tokens!r}")
    return max_tokens


#: Backend name → factory, or "module:attribute" of one imported on first use.
BACKENDS: dict[str, Callable[..., LLM] | str] = {
    "none": "lokg.runtime.llm.none:NoLLM",
    "openai": "lokg.runtime.llm.openai:OpenAICompatible",
    "local": "lokg.runtime.llm.local:LocalLlama",
}


def register_backend(name: str, factory: Callable[..., LLM], *, replace: bool = False) -> None:
    """Make ``make_llm(name, **options)`` call ``factory(**options)``."""
    key = name.strip().lower()
    if not key:
        raise ValueError("backend name must be non-empty")
    if key in BACKENDS and not replace and BACKENDS[key] is not factory:
        raise ValueError(f"LLM backend {key!r} is already registered")
    BACKENDS[key] = factory


def available_backends() -> list[str]:
    return sorted(BACKENDS)


def _factory(key: str) -> Callable[..., LLM]:
    factory = BACKENDS[key]
    if isinstance(factory, str):
        module, _, attribute = factory.partition(":")
        factory = getattr(importlib.import_module(module), attribute)
    return factory


def make_llm(name: str, **options) -> LLM:
    """The backend registered as ``name`` (case-insensitive), built with ``options``."""
    key = name.strip().lower() if isinstance(name, str) else name
    if not isinstance(key, str) or key not in BACKENDS:
        raise LLMConfigError(
            f"unknown LLM backend {name!r}; choose one of {', '.join(available_backends())}")
    factory = _factory(key)
    try:
        return factory(**options)
    except TypeError as exc:
        raise LLMConfigError(f"bad options for the {key!r} LLM backend: {exc}") from None

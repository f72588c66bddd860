"""The ``none`` backend, :class:`NoLLM`: no call, the runtime answers from retrieval alone.

Its ``calls_model`` is False so the runtime can skip building a prompt; calling ``complete``
anyway returns an empty completion with ``attempts`` 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lokg.runtime.llm.base import Completion, check_max_tokens


@dataclass
class NoLLM:
    """The ``none`` backend: no model, no call; the runtime answers from retrieval alone."""

    name: str = field(default="none", init=False)
    calls_model: bool = field(default=False, init=False)

    def complete(self, prompt: str, *, max_tokens: int, system: str = "") -> Completion:
        check_max_tokens(max_tokens)
        return Completion(text="", prompt_tokens=0, completion_tokens=0, latency_ms=0.0,
                          model="none", attempts=0, usage_from_server=False)

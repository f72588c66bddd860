"""LLM backends of the one call per question: the interface and registry (``base``) and one
module per backend (``none``, ``openai``, ``local``), imported when first asked for."""

from lokg.runtime.llm.base import (
    BACKENDS,
    LLM,
    Completion,
    LLMConfigError,
    LLMError,
    available_backends,
    make_llm,
    register_backend,
)

__all__ = ["BACKENDS", "LLM", "Completion", "LLMConfigError", "LLMError", "available_backends",
           "make_llm", "register_backend"]

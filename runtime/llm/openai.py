"""The ``openai`` backend, :class:`OpenAICompatible`, talks to any OpenAI-compatible endpoint (vLLM,
llama.cpp server, Ollama, hosted APIs) with the standard library only (``http.client``), so the
runtime stays thin. It POSTs ``{base_url}/chat/completions`` with the model, a system message
(the fixed instructions) and a user message (knowledge + question), ``max_tokens`` and
``temperature`` 0. Base URL, model and API key come from the arguments, else from
``LOKG_LLM_BASE_URL``, ``LOKG_LLM_MODEL``, ``LOKG_LLM_API_KEY``. The key is sent as a Bearer
header only when set; it never appears in a repr, a log line or an error message (a server
that echoes it back is redacted). HTTP(S) proxies are not used: LOKG talks to the endpoint
directly.

Why the call is bounded, and how:

* ``timeout`` is a wall-clock limit per attempt (connect, send, wait, read — a non-streaming
  completion arrives in one piece after generation, so a separate read timeout would add
  nothing). ``connect_timeout`` further bounds the TCP/TLS connect. Socket timeouts alone only
  bound each ``recv``, so a server that trickles one byte at a time could hold an attempt
  forever; a per-attempt watchdog shuts the socket down at the attempt's deadline.
* Up to ``retries`` further attempts follow a *retryable* failure: connection errors
  (refused, reset, closed without a response, a truncated body), timeouts, HTTP 429 and 5xx.
  Other 4xx (bad request, auth, unknown model), redirects and TLS certificate failures are
  deterministic and fail at once. A complete 2xx response that is not JSON, or has no
  ``choices``, also fails at once (**no retry on garbage**): it means a wrong base URL, a proxy
  page or an incompatible server, and the same request would get the same page. A body cut
  short by the connection is a connection error and is retried.
* Before retry ``i`` (0-based) the client sleeps
  ``min(max_backoff, backoff·2^i·(1 + jitter·u))``, u uniform in [0, 1) from a
  ``random.Random(seed)`` of its own (seeded: reproducible). A 429 or 503 with
  ``Retry-After`` (seconds, or an HTTP date) sleeps at least that long; if the server asks for
  longer than ``max_backoff`` or than the time left, the client gives up at once instead of
  hammering it early.
* A total ``deadline`` (default ``timeout·(retries+1) + retries·max_backoff``, the worst case
  of the rules above) caps the whole call: no attempt starts, and no sleep begins, that would
  end past it; each attempt's own limit is cut to the time left. (DNS resolution is the one
  step the socket layer cannot time out; use an IP or a local resolver where that matters.)

Token counts come from the server's ``usage`` when it reports them; a count it omits is taken
with cl100k_base (:func:`runtime.tokens.count_tokens`) over the message texts sent and the text
received (``Completion.usage_from_server`` says which). ``latency_ms`` is the whole call,
retries and sleeps included.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import os
import random
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from lokg.runtime import __version__
from lokg.runtime.llm.base import Completion, LLMConfigError, LLMError, check_max_tokens
from lokg.runtime.llm.http_post import AttemptFailed, Target, post
from lokg.runtime.llm.openai_reply import classify, http_error, parse_reply
from lokg.runtime.tokens import count_tokens

log = logging.getLogger("lokg.llm")

ENV_BASE_URL = "LOKG_LLM_BASE_URL"
ENV_MODEL = "LOKG_LLM_MODEL"
ENV_API_KEY = "LOKG_LLM_API_KEY"

DEFAULT_TIMEOUT = 60.0
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_RETRIES = 2
MAX_RETRIES = 10
DEFAULT_BACKOFF = 0.5
DEFAULT_MAX_BACKOFF = 8.0
DEFAULT_JITTER = 0.25
#: A larger response body is refused (an answer list is a few hundred bytes).
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024


def _positive(name: str, value, *, allow_zero: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise LLMConfigError(f"{name} must be a number of seconds; got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or number < 0 or (
            number == 0 and not allow_zero):
        bound = "≥ 0" if allow_zero else "> 0"
        raise LLMConfigError(f"{name} must be finite and {bound}; got {value!r}")
    return number


def _nonneg_int(value) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


@dataclass
class OpenAICompatible:
    """An OpenAI-compatible ``/chat/completions`` endpoint (see the module docstring)."""

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout: float = DEFAULT_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    backoff: float = DEFAULT_BACKOFF
    max_backoff: float = DEFAULT_MAX_BACKOFF
    jitter: float = DEFAULT_JITTER
    deadline: float | None = None  # total seconds for one call (None: the worst case, above)
    seed: int | None = None  # seeds the jitter
    temperature: float = 0.0
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES

    name: str = field(default="openai", init=False)
    calls_model: bool = field(default=True, init=False)

    def __post_init__(self):
        self._resolve_endpoint()
        self._check_policy()
        self._rng = random.Random(self.seed)
        self._rng_lock = threading.Lock()

    def _resolve_endpoint(self) -> None:
        """Base URL, model and key from the arguments or the environment, the URL split once."""
        base_url = self.base_url if self.base_url is not None else os.environ.get(ENV_BASE_URL)
        model = self.model if self.model is not None else os.environ.get(ENV_MODEL)
        key = self.api_key if self.api_key is not None else os.environ.get(ENV_API_KEY)
        if not base_url or not str(base_url).strip():
            raise LLMConfigError(
                f"the openai backend needs a base URL: pass base_url= or set {ENV_BASE_URL} "
                "(e.g. http://127.0.0.1:8080/v1 for a llama.cpp server, "
                "https://api.openai.com/v1 for OpenAI)")
        if not model or not str(model).strip():
            raise LLMConfigError(
                f"the openai backend needs a model name: pass model= or set {ENV_MODEL}")
        self.model = str(model).strip()
        self.api_key = str(key) if key else None  # "" counts as unset
        self.base_url = str(base_url).strip().rstrip("/")
        if self.base_url.endswith("/chat/completions"):
            self.base_url = self.base_url[: -len("/chat/completions")]
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise LLMConfigError(
                f"base URL must be http(s)://host[:port][/path]; got {self.base_url!r}")
        try:
            port = parts.port
        except ValueError:
            raise LLMConfigError(f"base URL has an invalid port: {self.base_url!r}") from None
        if parts.query or parts.fragment or parts.username or parts.password:
            raise LLMConfigError(
                "base URL must not carry a query, fragment or credentials (use api_key / "
                f"{ENV_API_KEY} for the key); got {parts.scheme}://{parts.hostname}…")
        self._target = Target(parts.scheme == "https", parts.hostname, port,
                              (parts.path.rstrip("/") or "") + "/chat/completions", self.url)

    def _check_policy(self) -> None:
        """Timeouts, retries, back-off, jitter, deadline, body cap and temperature, each checked
        and normalised (a bad one is a config error naming it, never a late surprise)."""
        self.timeout = _positive("timeout", self.timeout)
        self.connect_timeout = min(_positive("connect_timeout", self.connect_timeout),
                                   self.timeout)
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or not (
                0 <= self.retries <= MAX_RETRIES):
            raise LLMConfigError(
                f"retries must be an integer in [0, {MAX_RETRIES}]; got {self.retries!r}")
        self.backoff = _positive("backoff", self.backoff, allow_zero=True)
        self.max_backoff = _positive("max_backoff", self.max_backoff, allow_zero=True)
        jitter = _positive("jitter", self.jitter, allow_zero=True)
        if jitter > 1:
            raise LLMConfigError(f"jitter must be in [0, 1]; got {self.jitter!r}")
        self.jitter = jitter
        if self.deadline is not None:
            self.deadline = _positive("deadline", self.deadline)
        if isinstance(self.max_response_bytes, bool) or not isinstance(
                self.max_response_bytes, int) or self.max_response_bytes < 1:
            raise LLMConfigError(
                f"max_response_bytes must be a positive integer; got {self.max_response_bytes!r}")
        self.temperature = _positive("temperature", self.temperature, allow_zero=True)

    # ---- policy ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The endpoint POSTed to."""
        return f"{self.base_url}/chat/completions"

    @property
    def max_call_seconds(self) -> float:
        """The most one ``complete`` call can take (the total deadline)."""
        worst = self.timeout * (self.retries + 1) + self.retries * self.max_backoff
        return min(self.deadline, worst) if self.deadline is not None else worst

    def retry_delay(self, retry: int, retry_after: float | None = None) -> float | None:
        """Seconds to sleep before retry ``retry`` (0-based); None = do not retry (the server's
        ``retry_after`` exceeds ``max_backoff``)."""
        if retry_after is not None and retry_after > self.max_backoff:
            return None
        with self._rng_lock:
            u = self._rng.random()
        delay = min(self.max_backoff, self.backoff * (2.0 ** retry) * (1.0 + self.jitter * u))
        if retry_after is not None:
            delay = max(delay, retry_after)
        return delay

    # ---- the call -------------------------------------------------------------------------

    def _redact(self, text: str) -> str:
        if self.api_key and len(self.api_key) >= 4:
            text = text.replace(self.api_key, "***")
        return text

    def _headers(self, body: bytes) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": f"lokg/{__version__}",
            "Content-Length": str(len(body)),
        }
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _request_body(self, prompt: str, system: str, max_tokens: int) -> bytes:
        messages = []
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prompt})
        payload = {
            "model": self.model, "messages": messages, "max_tokens": max_tokens,
            "temperature": self.temperature, "stream": False,
        }
        # ensure_ascii keeps lone surrogates encodable (as \\ud8xx escapes).
        return json.dumps(payload).encode("ascii")

    def complete(self, prompt: str, *, max_tokens: int, system: str = "") -> Completion:
        """One chat completion, retried and bounded as the module docstring describes."""
        if not isinstance(prompt, str) or not isinstance(system, str):
            raise LLMConfigError("prompt and system must be strings")
        max_tokens = check_max_tokens(max_tokens)
        body = self._request_body(prompt, system, max_tokens)
        headers = self._headers(body)
        started = time.monotonic()
        call_deadline = started + self.max_call_seconds
        attempts = 0
        failed: AttemptFailed | None = None
        for retry in range(self.retries + 1):
            if retry and not self._waited_for_retry(retry, failed, call_deadline):
                break
            until = min(time.monotonic() + self.timeout, call_deadline)
            if until <= time.monotonic():
                break
            attempts += 1
            try:
                text, usage, model, finish = self._answer(body, headers, until)
            except AttemptFailed as error:
                failed = error
                if not error.error.retryable:
                    break
                continue
            return self._completion(prompt, system, text, usage, model, finish,
                                    started=started, attempts=attempts)
        last = failed.error if failed is not None else LLMError(
            f"LLM call to {self.url} could not start within its "
            f"{self.max_call_seconds:.2f} s deadline", kind="deadline")
        last.attempts = attempts
        raise last

    def _waited_for_retry(self, retry: int, failed: AttemptFailed, call_deadline: float
                          ) -> bool:
        """Sleep the back-off before retry ``retry`` (1-based); False, with the reason added to
        the last error, when the server's Retry-After or the deadline leaves no retry."""
        last, retry_after = failed.error, failed.retry_after
        delay = self.retry_delay(retry - 1, retry_after)
        if delay is None:
            last.args = (f"{last.args[0]}; the server asked to retry after "
                         f"{retry_after:.1f} s, beyond max_backoff={self.max_backoff} s, "
                         "so LOKG gave up",)
            return False
        if delay >= call_deadline - time.monotonic():
            last.args = (f"{last.args[0]}; no time left for a retry within the "
                         f"{self.max_call_seconds:.2f} s deadline",)
            return False
        log.warning("LLM attempt %d/%d failed (%s); retrying in %.2f s", retry,
                    self.retries + 1, last.kind if last.status is None
                    else f"HTTP {last.status}", delay)
        time.sleep(delay)
        return True

    def _answer(self, body: bytes, headers: dict[str, str], until: float
                ) -> tuple[str, dict, str | None, str | None]:
        """One attempt's parsed answer; every failure is an :class:`AttemptFailed`."""
        try:
            status, resp_headers, data = post(self._target, body, headers, until,
                                              connect_timeout=self.connect_timeout,
                                              max_bytes=self.max_response_bytes)
        except (OSError, http.client.HTTPException) as exc:
            raise AttemptFailed(classify(exc, self.url, self._redact)) from None
        if not 200 <= status < 300:
            raise http_error(status, resp_headers, data, self.url, self._redact)
        return parse_reply(data, status, self.url, self._redact)

    def _completion(self, prompt: str, system: str, text: str, usage: dict,
                    model: str | None, finish: str | None, *, started: float,
                    attempts: int) -> Completion:
        """The answer with its token counts: the server's, else cl100k_base over what was sent
        and received."""
        prompt_tokens = _nonneg_int(usage.get("prompt_tokens"))
        completion_tokens = _nonneg_int(usage.get("completion_tokens"))
        from_server = prompt_tokens is not None and completion_tokens is not None
        if prompt_tokens is None:
            prompt_tokens = count_tokens(system) + count_tokens(prompt)
        if completion_tokens is None:
            completion_tokens = count_tokens(text)
        return Completion(
            text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            latency_ms=(time.monotonic() - started) * 1000.0, model=model or self.model,
            attempts=attempts, usage_from_server=from_server, finish_reason=finish)

"""What the ``openai`` backend (runtime/llm/openai.py) makes of a reply: the answer of a 2xx
body, or the failure of an attempt — classified as retryable or not, and said in words that
name the endpoint and never the API key (``redact``)."""

from __future__ import annotations

import email.utils
import http.client
import json
import math
import socket
import ssl
import time
from collections.abc import Callable

from lokg.runtime.llm.base import LLMError
from lokg.runtime.llm.http_post import AttemptFailed

#: HTTP statuses worth another attempt.
RETRY_STATUSES = frozenset({429, *range(500, 600)})
_SNIPPET = 200

Redact = Callable[[str], str]


def snippet(body: bytes, redact: Redact) -> str:
    """The start of a body, for a message."""
    text = body[:_SNIPPET].decode("utf-8", "replace")
    return redact(repr(text) + ("…" if len(body) > _SNIPPET else ""))


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date); None if absent/invalid."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def classify(exc: BaseException, url: str, redact: Redact) -> LLMError:
    """A connection-level failure as an LLMError: timeouts, refusals and resets retryable,
    TLS certificates and invalid URLs not."""
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return LLMError(f"LLM request to {url} timed out ({exc})", kind="timeout",
                        retryable=True)
    if isinstance(exc, ConnectionRefusedError):
        return LLMError(f"cannot connect to the LLM at {url}: connection refused "
                        "(is the server running?)", kind="connect", retryable=True)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return LLMError(f"TLS certificate of {url} rejected: {exc}", kind="tls")
    if isinstance(exc, socket.gaierror):
        return LLMError(f"cannot resolve the LLM host of {url}: {exc}", kind="connect",
                        retryable=True)
    if isinstance(exc, http.client.InvalidURL):
        return LLMError(f"invalid LLM URL {url}: {exc}", kind="config")
    name = type(exc).__name__
    return LLMError(redact(f"LLM connection to {url} failed: {name}: {exc}"),
                    kind="connection", retryable=True)


def _error_detail(body: bytes, redact: Redact) -> str:
    """The server's own error message when the body carries one, else the body's start."""
    detail = ""
    try:
        data = json.loads(body)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict):
            err = err.get("message") or err.get("type") or err
        if err is None and isinstance(data, dict):
            err = data.get("message") or data.get("detail")
        if err is not None:
            detail = str(err)[:_SNIPPET]
    except (ValueError, RecursionError):
        pass
    return detail or (snippet(body, redact) if body else "(empty body)")


def http_error(status: int, headers, body: bytes, url: str, redact: Redact) -> AttemptFailed:
    """A non-2xx answer: 429 and 5xx retryable (with the server's Retry-After), the rest not."""
    if 300 <= status < 400:
        where = headers.get("Location", "?")
        message = (f"LLM endpoint {url} answered HTTP {status} (redirect to "
                   f"{where}); set the base URL to the final location")
    else:
        message = f"LLM endpoint {url} answered HTTP {status}: {_error_detail(body, redact)}"
    retry_after = None
    if status in (429, 503):
        retry_after = parse_retry_after(headers.get("Retry-After"))
    return AttemptFailed(LLMError(redact(message), kind="http", status=status,
                                  retryable=status in RETRY_STATUSES), retry_after)


def _content(first: dict, bad: Callable[[str], AttemptFailed]) -> str:
    """The text of ``choices[0]``: its message's content (text or content parts), or a legacy
    /completions ``text``."""
    message = first.get("message")
    if isinstance(message, dict):
        content = message.get("content")
    elif "text" in first:  # a legacy /completions-shaped answer
        content = first.get("text")
    else:
        raise bad("choices[0] has neither a message nor a text")
    if content is None:
        return ""
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    if not isinstance(content, str):
        raise bad("the message content is not text")
    return content


def parse_reply(body: bytes, status: int, url: str, redact: Redact
                ) -> tuple[str, dict, str | None, str | None]:
    """A 2xx body's (text, usage, model, finish reason); a body that is not a chat completion
    is an :class:`AttemptFailed` that is not retried (the same request gets the same page)."""
    def bad(why: str) -> AttemptFailed:
        return AttemptFailed(LLMError(
            f"LLM endpoint {url} returned HTTP {status} but {why}; body starts "
            f"{snippet(body, redact)}. Check that the base URL points at an OpenAI-compatible "
            "API (usually ending in /v1)", kind="malformed", status=status))

    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise bad("the body is not JSON") from None
    if not isinstance(data, dict):
        raise bad("the body is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        if data.get("error") is not None:
            raise bad("the body is an error object")
        raise bad("the response has no choices")
    first = choices[0]
    if not isinstance(first, dict):
        raise bad("choices[0] is not an object")
    content = _content(first, bad)
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    model = data.get("model") if isinstance(data.get("model"), str) else None
    finish = first.get("finish_reason")
    return content, usage, model, finish if isinstance(finish, str) else None

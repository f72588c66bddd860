"""One bounded HTTP POST of the ``openai`` backend (runtime/llm/openai.py), standard library only.

Socket timeouts alone only bound each ``recv``, so a server that trickles one byte at a time
could hold an attempt forever; a per-attempt watchdog shuts the socket down at the attempt's
deadline, and the body is read in chunks, each bounded by the time left, refused past a size.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from typing import NamedTuple

from lokg.runtime.errors import LokgError
from lokg.runtime.llm.base import LLMError


class AttemptFailed(LokgError):
    """One attempt failed; ``error`` is what to raise if it is the last one (it never leaves
    the client)."""

    def __init__(self, error: LLMError, retry_after: float | None = None):
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after


class Target(NamedTuple):
    """Where the POST goes: the URL split once."""

    https: bool
    host: str
    port: int | None
    path: str
    url: str  # as written in messages


def _left_before(until: float, fired: threading.Event, doing: str,
                 sock: socket.socket) -> None:
    """Bound the socket's next operation by the attempt's time left, or give up if none is."""
    left = until - time.monotonic()
    if fired.is_set() or left <= 0:
        raise TimeoutError(f"attempt deadline reached {doing}")
    sock.settimeout(left)


def _connection(target: Target, connect_timeout: float) -> http.client.HTTPConnection:
    if target.https:
        return http.client.HTTPSConnection(target.host, target.port, timeout=connect_timeout,
                                           context=ssl.create_default_context())
    return http.client.HTTPConnection(target.host, target.port, timeout=connect_timeout)


def _start_watchdog(seconds: float, fired: threading.Event,
                    held: list[socket.socket]) -> threading.Timer:
    """The attempt's hard deadline, whatever the server trickles: after ``seconds`` set
    ``fired`` and shut the sockets in ``held`` down, which wakes a blocked recv."""

    def watchdog():
        fired.set()
        for sock in held:
            try:  # the plain-socket shutdown (also under TLS): wakes a blocked recv
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(seconds, watchdog)
    timer.daemon = True
    timer.start()
    return timer


def post(target: Target, body: bytes, headers: dict[str, str], until: float, *,
         connect_timeout: float, max_bytes: int) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One request, finished (or abandoned) by monotonic time ``until``: (status, headers,
    body). Connection failures raise as OSError or HTTPException (a TimeoutError once the
    deadline fired); a body over ``max_bytes`` is an :class:`AttemptFailed`."""
    remaining = until - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("no time left for the attempt")
    conn = _connection(target, min(connect_timeout, remaining))
    fired = threading.Event()
    # http.client drops conn.sock once a response says it will close the connection (the
    # response's file object keeps the socket open), so hold our own reference.
    held: list[socket.socket] = []
    timer = _start_watchdog(remaining, fired, held)
    response: http.client.HTTPResponse | None = None
    try:
        conn.connect()
        sock = conn.sock
        held.append(sock)
        _left_before(until, fired, "while connecting", sock)
        conn.request("POST", target.path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.headers, _read_capped(
            response, sock, until, fired, target.url, max_bytes)
    except (OSError, http.client.HTTPException) as exc:
        if fired.is_set() and not isinstance(exc, TimeoutError):
            raise TimeoutError("attempt deadline reached") from exc
        raise
    finally:
        timer.cancel()
        if response is not None:
            response.close()
        conn.close()


def _read_capped(response: http.client.HTTPResponse, sock: socket.socket, until: float,
                 fired: threading.Event, url: str, max_bytes: int) -> bytes:
    """The whole body, each read bounded by the time left, refused past ``max_bytes``; a body
    shorter than its Content-Length is an IncompleteRead."""
    chunks: list[bytes] = []
    size = 0
    while True:
        _left_before(until, fired, "while reading the response", sock)
        chunk = response.read1(65536)
        if not chunk:
            break
        size += len(chunk)
        if size > max_bytes:
            raise AttemptFailed(LLMError(f"response from {url} exceeds {max_bytes} bytes",
                                         kind="malformed", status=response.status))
        chunks.append(chunk)
    if fired.is_set():
        raise TimeoutError("attempt deadline reached while reading the response")
    if isinstance(response.length, int) and response.length > 0:
        raise http.client.IncompleteRead(b"".join(chunks), response.length)
    return b"".join(chunks)

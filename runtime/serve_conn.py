"""The HTTP service's connections: a deadline for each request head and body, and a rate-limited
log of the event loop's errors (``accept()`` failing when descriptors run out).

uvicorn closes a kept-alive connection that stays idle ``timeout_keep_alive`` seconds after a
response, but a connection that never sends a request, or sends its head a byte at a time,
holds a descriptor for ever, and so does one that sends its head but trickles the body:
enough of them and the process can accept nothing, and asyncio logs a traceback for every
failed ``accept()``. :class:`RequestDeadline` closes a connection whose request head is not
complete within the same number of seconds of its opening (or of its previous response), or
whose body is not complete within as many seconds of its head; :func:`quiet_loop_errors` logs
the loop's errors at most once per ``LOG_EVERY_S`` with a count of those left out. Imports
uvicorn: only ``lokg serve`` loads it.
"""
from __future__ import annotations

import asyncio
import logging
import time

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("lokg.server")

#: At most one loop error is logged per this many seconds.
LOG_EVERY_S = 10.0


class RequestDeadline(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is not complete within
    ``timeout_keep_alive`` seconds (``lokg serve --idle-timeout``) of its opening or of its
    next byte after a response, or whose body (``Content-Length`` or chunked) is not complete within as
    many seconds of the head: a client trickling either holds a descriptor that long at most."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline = None
        self._arm("head")

    def _arm(self, part: str) -> None:
        # the head is complete when the cycle changes; the body when the cycle has no more
        self._waiting, self._watched = part, self.cycle
        self._deadline = self.loop.call_later(self.timeout_keep_alive, self._timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and (self.cycle is None or self.cycle.response_complete):
            self._arm("head")  # the next request's head starts arriving
        super().data_received(data)
        if self._deadline is None:
            return
        if self.cycle is not self._watched:  # a head is complete: its body gets the same time
            self._disarm()
            if self.cycle.more_body:
                self._arm("body")
        elif self._waiting == "body" and not self.cycle.more_body:
            self._disarm()

    def _timed_out(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.debug("closing %s: its request %s did not arrive within %.1f s", self.client,
                      self._waiting, self.timeout_keep_alive)
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def quiet_loop_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Log the loop's unhandled errors (a failing ``accept()`` above all) at most once per
    ``LOG_EVERY_S``, with how many were left out since the last one logged."""
    state = {"next": 0.0, "dropped": 0}

    def handler(loop, context) -> None:
        now = time.monotonic()
        if now < state["next"]:
            state["dropped"] += 1
            return
        exc = context.get("exception")
        log.error("%s%s (%d similar errors not logged in the last %.0f s)",
                  context.get("message", "event loop error"), f": {exc!r}" if exc else "",
                  state["dropped"], LOG_EVERY_S)
        state["next"], state["dropped"] = now + LOG_EVERY_S, 0

    loop.set_exception_handler(handler)


def connection_options(idle_timeout: float) -> dict:
    """uvicorn's options for the connection deadlines above."""
    return {"http": RequestDeadline, "timeout_keep_alive": idle_timeout}

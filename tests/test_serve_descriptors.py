"""Issue 51 D6: descriptor exhaustion. ``lokg serve`` in a child process with a low descriptor
limit and more stalled connections than the limit: the server closes them as they time out
(or the clients do), then /healthz and /v1/ask answer again, and the log stays a few lines
(the event loop's accept() errors rate-limited, runtime/serve_conn.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lokg.testing.serving import (answers, closed_by_server, served_process, stalled_sockets,
                                  wait_for)
from lokg.testing.stores import make_store

#: The log may not grow past this many lines (the probe saw 217k tracebacks in 16 s).
MAX_LOG_LINES = 200


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("exhausted")
    make_store(root, build_id="b1")
    return root / "store"


def all_closed_by_server(sockets, timeout: float) -> bool:
    """Whether the server closes every socket within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    for sock in sockets:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        if not closed_by_server(sock):
            return False
    return True


def exhausted_then_recovered(store: Path, log: Path, *, nofile: int, stalled: int,
                             server_closes: bool) -> float:
    """``stalled`` silent connections to ``lokg serve`` limited to ``nofile`` descriptors,
    closed by the server's idle timeout (0.5 s) or, after a second, by the client; the seconds
    until /healthz and /v1/ask both answer again (the server still running)."""
    with served_process(store, log, nofile=nofile, idle_timeout=0.5) as (proc, client):
        sockets = stalled_sockets(client.port, stalled)
        try:
            if server_closes:
                assert all_closed_by_server(sockets, timeout=30)
            else:
                time.sleep(1.0)
        finally:
            for sock in sockets:
                sock.close()
        started = time.monotonic()
        wait_for(lambda: answers(client.port, "/healthz") and answers(client.port, "/v1/ask"),
                 timeout=20, what="/healthz and /v1/ask after the stalled connections")
        assert proc.poll() is None
        return time.monotonic() - started


@pytest.mark.parametrize("server_closes", [True, False], ids=["timed-out", "client-closed"])
def test_more_stalled_connections_than_descriptors_neither_stop_nor_flood(store, tmp_path,
                                                                         server_closes):
    log = tmp_path / "serve.log"
    exhausted_then_recovered(store, log, nofile=64, stalled=100, server_closes=server_closes)
    lines = log.read_text(errors="replace").splitlines()
    assert len(lines) < MAX_LOG_LINES, lines[:20]
    assert any("accept" in line for line in lines)  # the limit was reached, and logged


@pytest.mark.slow
def test_a_thousand_stalled_connections_on_128_descriptors(store, tmp_path):
    """The probe's case, larger: 1,000 stalled sockets against 128 descriptors."""
    log = tmp_path / "serve.log"
    exhausted_then_recovered(store, log, nofile=128, stalled=1000, server_closes=True)
    lines = log.read_text(errors="replace").splitlines()
    assert len(lines) < MAX_LOG_LINES, lines[:20]

"""The HTTP service served by uvicorn in a thread on loopback, or ``lokg serve`` in a child
process (with a descriptor limit); a keep-alive client; stalled connections."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

#: The toy film store's 2-hop question (lokg.testing.stores).
QUESTION = "Who directed the sequel of The Long Road?"


class Connection(http.client.HTTPConnection):
    """A keep-alive connection with TCP_NODELAY: without it, Nagle's algorithm and delayed ACKs
    add milliseconds (up to 40) to each request on loopback."""

    def connect(self):
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, timeout: float = 10.0, what: str = "condition"):
    """``predicate()``'s first true value, polled every 20 ms; fails after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Client:
    """One keep-alive connection; ``call`` returns (status, headers, JSON or text)."""

    def __init__(self, port: int, token: str | None = None, timeout: float = 30):
        self.port, self.token, self.timeout = port, token, timeout
        self.conn = Connection("127.0.0.1", port, timeout=timeout)

    def raw(self, method: str, path: str, body: bytes | None = None,
            headers: dict | None = None) -> tuple[int, dict, bytes]:
        headers = dict(headers or {})
        if self.token and "Authorization" not in headers:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            self.conn.request(method, path, body=body, headers=headers)
            resp = self.conn.getresponse()
        except (http.client.HTTPException, OSError):  # the server closed a kept-alive socket
            self.conn.close()
            self.conn = Connection("127.0.0.1", self.port, timeout=self.timeout)
            self.conn.request(method, path, body=body, headers=headers)
            resp = self.conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()

    def call(self, method: str, path: str, payload=None, headers: dict | None = None):
        body = None
        if payload is not None:
            body = json.dumps(payload).encode()
            headers = {"Content-Type": "application/json", **(headers or {})}
        status, head, data = self.raw(method, path, body, headers)
        is_json = head.get("content-type", "").startswith("application/json")
        return status, head, json.loads(data) if is_json else data.decode()

    def ask(self, **payload):
        return self.call("POST", "/v1/ask", {"question": QUESTION, **payload})


@contextmanager
def serving(store: Path | str | dict, *, ready: bool = True, **options):
    """create_app(...) served by uvicorn in a thread on a free loopback port, with
    ``lokg serve``'s connection deadlines (``idle_timeout``); a Client (once /readyz says 200,
    unless ``ready`` is False). ``store``: one root, or {name: root} for several stores."""
    import uvicorn

    from lokg.runtime.serve_conn import connection_options
    from lokg.runtime.server import DEFAULT_IDLE_TIMEOUT, ServeSettings, create_app

    idle_timeout = options.pop("idle_timeout", DEFAULT_IDLE_TIMEOUT)
    roots = {"store": "", "stores": tuple((n, str(r)) for n, r in store.items())} \
        if isinstance(store, dict) else {"store": str(store)}
    app = create_app(ServeSettings(**roots, poll_interval=options.pop("poll", 0.05), **options))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on",
                                           **connection_options(idle_timeout)))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, what="uvicorn start")
        client = Client(sock.getsockname()[1], options.get("token"))
        if ready:
            wait_for(lambda: client.call("GET", "/readyz")[0] == 200, what="/readyz")
        yield client
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@contextmanager
def served_process(store: Path | str, log: Path, *, nofile: int | None = None,
                   idle_timeout: float = 1.0, timeout: float = 120.0):
    """``lokg serve --store STORE`` in a child process on a free loopback port, its output in
    ``log``, at most ``nofile`` descriptors open in it (RLIMIT_NOFILE, set in the child); the
    child and a Client once /readyz says 200. The child is stopped when the block ends."""
    from lokg.testing import REPO

    def limit() -> None:
        if nofile is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    port = free_port()
    argv = [sys.executable, "-m", "lokg.runtime.server", "--store", str(store), "--port",
            str(port), "--idle-timeout", str(idle_timeout), "--llm-backend", "none"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=limit)
    try:
        wait_for(lambda: proc.poll() is not None or answers(port, "/readyz"), timeout,
                 "lokg serve's /readyz")
        if proc.poll() is not None:
            raise RuntimeError(f"lokg serve exited with code {proc.returncode}: "
                               f"{Path(log).read_text(errors='replace')[-2000:]}")
        yield proc, Client(port)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def answers(port: int, path: str, timeout: float = 2.0) -> bool:
    """Whether GET ``path`` (POST /v1/ask: the toy store's question) on a new connection gives
    200 within ``timeout`` s now; a refused, reset or timed-out connection is a no."""
    client = Client(port, timeout=timeout)
    try:
        if path == "/v1/ask":
            return client.ask()[0] == 200
        return client.call("GET", path)[0] == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        client.conn.close()


def stalled_sockets(port: int, count: int) -> list[socket.socket]:
    """``count`` connections to ``port`` that send nothing; the kernel's backlog completes them
    whether or not the server can accept them."""
    return [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the peer closed ``sock`` (an EOF or a reset; a timeout is a no)."""
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False

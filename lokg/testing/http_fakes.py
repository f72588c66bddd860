"""A scripted OpenAI-compatible HTTP server on loopback, and the body of a good reply."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def ok_body(text="Paris", usage=True, model="test-model"):
    """A chat completion's JSON body: ``text`` as the reply, with token usage unless not."""
    body = {
        "id": "cmpl-1", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
    }
    if usage:
        body["usage"] = {"prompt_tokens": 42, "completion_tokens": 3, "total_tokens": 45}
    return body


class _ScriptedHandler(BaseHTTPRequestHandler):
    """Answers each POST with the next action of its :class:`FakeServer`'s script."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    @property
    def fake(self) -> "FakeServer":
        return self.server.fake

    def do_POST(self):
        action = self.record_request()
        act = getattr(self, f"act_{action[0]}", None)
        if act is None:  # pragma: no cover
            raise AssertionError(action[0])
        act(action)

    def record_request(self) -> tuple:
        """Record the request; return the script's action for it (the last one repeats)."""
        length = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(length)
        self.fake.requests.append({
            "path": self.path, "headers": dict(self.headers.items()),
            "body": json.loads(raw), "time": time.monotonic(),
        })
        i = len(self.fake.requests) - 1
        return self.fake.script[min(i, len(self.fake.script) - 1)]

    def act_json(self, action):
        _, status, obj, *extra = action
        self.reply(status, json.dumps(obj).encode(), extra[0] if extra else {})

    def act_raw(self, action):
        _, status, data, *extra = action
        self.reply(status, data, extra[0] if extra else {})

    def act_hang(self, action):
        """Accept, read, never answer."""
        self.fake.stop.wait(action[1])
        self.close_connection = True

    def act_close(self, action):
        """Drop the connection without a response."""
        self.close_connection = True

    def act_truncate(self, action):
        """Promise more than is sent, then drop."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b'{"choices": [')
        self.wfile.flush()
        self.close_connection = True

    def act_trickle(self, action):
        """Headers one byte at a time, forever."""
        data = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000
        for byte in data:
            if self.fake.stop.wait(action[1]):
                break
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:
                break
        self.close_connection = True

    def reply(self, status, data, headers):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


class FakeServer:
    """Scripted replies, one per request; the last one repeats. Records every request."""

    def __init__(self):
        self.script: list[tuple] = []
        self.requests: list[dict] = []
        self.stop = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _ScriptedHandler)
        self.httpd.daemon_threads = True
        self.httpd.fake = self
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

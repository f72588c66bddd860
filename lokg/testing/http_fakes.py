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


class FakeServer:
    """Scripted replies, one per request; the last one repeats. Records every request."""

    def __init__(self):
        self.script: list[tuple] = []
        self.requests: list[dict] = []
        self.stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                server.requests.append({
                    "path": self.path, "headers": dict(self.headers.items()),
                    "body": json.loads(raw), "time": time.monotonic(),
                })
                i = len(server.requests) - 1
                action = server.script[min(i, len(server.script) - 1)]
                kind = action[0]
                if kind == "json":
                    _, status, obj, *extra = action
                    self.reply(status, json.dumps(obj).encode(), extra[0] if extra else {})
                elif kind == "raw":
                    _, status, data, *extra = action
                    self.reply(status, data, extra[0] if extra else {})
                elif kind == "hang":  # accept, read, never answer
                    server.stop.wait(action[1])
                    self.close_connection = True
                elif kind == "close":  # drop the connection without a response
                    self.close_connection = True
                elif kind == "truncate":  # promise more than is sent, then drop
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "1000")
                    self.end_headers()
                    self.wfile.write(b'{"choices": [')
                    self.wfile.flush()
                    self.close_connection = True
                elif kind == "trickle":  # headers one byte at a time, forever
                    data = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000
                    for byte in data:
                        if server.stop.wait(action[1]):
                            break
                        try:
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                        except OSError:
                            break
                    self.close_connection = True
                else:  # pragma: no cover
                    raise AssertionError(kind)

            def reply(self, status, data, headers):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

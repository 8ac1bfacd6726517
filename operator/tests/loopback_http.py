"""HTTP servers on loopback for the tests of the operator's calls to tenants' Pods: a handler base that answers in
one call and logs nothing, and a server served from a thread for the length of a `with`."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Replies(BaseHTTPRequestHandler):
    def reply(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0
            ) -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()

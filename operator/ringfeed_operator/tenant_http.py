"""HTTP to tenants' Pods (a sidecar's ``/status``, a Cassandra node's metrics): every reply is bounded in size and in
time as a whole, so that no Pod of any namespace can hold the operator's threads or run its only replica out of
memory by answering slowly or without end."""

from __future__ import annotations

import http.client
import time
import urllib.parse
from collections.abc import Mapping

CHUNK = 64 * 1024


class ReplyRefused(Exception):
    """The Pod answered too much, too slowly, or not 2xx."""


def request(url: str, *, limit_bytes: int, timeout_s: float, method: str = "GET",
            headers: Mapping[str, str] | None = None, data: bytes | None = None) -> bytes:
    """The body of a 2xx reply to `url` (http only), read within `timeout_s` from the first byte sent and at most
    `limit_bytes` long; ReplyRefused or OSError otherwise."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not an http URL: {url}")
    deadline = time.monotonic() + timeout_s
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout_s)
    try:
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request(method, target, body=data, headers=dict(headers or {}))
        reply = connection.getresponse()
        if not 200 <= reply.status < 300:
            raise ReplyRefused(f"{url}: HTTP {reply.status}")
        declared = reply.getheader("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > limit_bytes:
            raise ReplyRefused(f"{url}: {declared} bytes, more than {limit_bytes} bytes")
        body = bytearray()
        while chunk := reply.read1(min(CHUNK, limit_bytes + 1 - len(body))):  # one receive at a time
            body += chunk
            if len(body) > limit_bytes:
                raise ReplyRefused(f"{url}: more than {limit_bytes} bytes")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReplyRefused(f"{url}: not answered within {timeout_s} s")
            if connection.sock is not None:
                connection.sock.settimeout(remaining)  # each read waits no longer than what is left of the whole
        return bytes(body)
    finally:
        connection.close()

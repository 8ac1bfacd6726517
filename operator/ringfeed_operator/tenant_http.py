"""HTTP to tenants' Pods (a sidecar's ``/status``, a Cassandra node's metrics): every reply is bounded in size and in
time as a whole, so that no Pod of any namespace can hold the operator or run its only replica out of memory by
answering slowly or without end.

One implementation, asynchronous: the TrainingJob timer asks every rank's sidecar from kopf's event loop, so that a
sidecar that never answers holds no thread of the handlers' pool. The synchronous handlers call it through
``request``."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Mapping

import aiohttp

CHUNK = 64 * 1024


class ReplyRefused(Exception):
    """The Pod answered too much, too slowly, or not 2xx."""


async def fetch(url: str, *, limit_bytes: int, timeout_s: float, method: str = "GET",
                headers: Mapping[str, str] | None = None, data: bytes | None = None) -> bytes:
    """The body of a 2xx reply to `url` (http only), read within `timeout_s` from the first byte sent and at most
    `limit_bytes` long; ReplyRefused or OSError otherwise."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not an http URL: {url}")
    # No proxy from the environment, no redirect: the operator talks to the Pod's own address only.
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s), trust_env=False) as session:
        try:
            async with session.request(method, url, headers=dict(headers or {}), data=data,
                                       allow_redirects=False) as reply:
                if not 200 <= reply.status < 300:
                    raise ReplyRefused(f"{url}: HTTP {reply.status}")
                if reply.content_length is not None and reply.content_length > limit_bytes:
                    raise ReplyRefused(f"{url}: {reply.content_length} bytes, more than {limit_bytes} bytes")
                body = bytearray()
                async for chunk in reply.content.iter_chunked(CHUNK):
                    body += chunk
                    if len(body) > limit_bytes:
                        raise ReplyRefused(f"{url}: more than {limit_bytes} bytes")
                return bytes(body)
        except TimeoutError:
            raise ReplyRefused(f"{url}: not answered within {timeout_s} s") from None
        except aiohttp.ClientError as error:  # a connection refused is also an OSError: one kind for the callers
            raise ReplyRefused(f"{url}: {error}") from None


def request(url: str, *, limit_bytes: int, timeout_s: float, method: str = "GET",
            headers: Mapping[str, str] | None = None, data: bytes | None = None) -> bytes:
    """`fetch` from a synchronous handler (a thread of kopf's pool, where no event loop runs)."""
    return asyncio.run(fetch(url, limit_bytes=limit_bytes, timeout_s=timeout_s, method=method, headers=headers,
                             data=data))

"""The operator's connections to the API server. kopf's own session opens a connection for every concurrent request,
without a bound (aiohttp's ``limit=0``), and keeps each one alive with its 256 KiB TLS read buffer: a burst of a few
hundred objects left 400 connections open, 50 MiB of buffers (memory_report, make bench-operator-scale), and a
thousand objects kept the operator above 700 MiB. The same login here, in a session whose pool is bounded: requests
beyond it wait in the operator rather than at the API server."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import aiohttp
import kopf

# Connections for requests; each of kopf's watches holds one more for as long as it streams.
API_REQUESTS = 24
# What the operator watches in each namespace it watches: Datasets, Splits, TrainingJobs, Rings, its Jobs, the ranks'
# Pods. Once: Namespaces (the cache tier's opt-in), and kopf's own watch of the CRDs; namespaced, kopf also watches
# the namespaces it serves.
WATCHED_PER_NAMESPACE = 6
WATCHED_ONCE = 2


def pool_size(watch_namespaces: Sequence[str]) -> int:
    streams = WATCHED_PER_NAMESPACE * max(1, len(watch_namespaces)) + WATCHED_ONCE + (1 if watch_namespaces else 0)
    return API_REQUESTS + streams


class Login:
    """kopf's login handler. kopf refuses credentials it has seen rejected (a 401) instead of trying them again;
    it knows a session by its object, so the same credentials get the same session back."""

    def __init__(self) -> None:
        self._last: tuple[kopf.ConnectionInfo, kopf.AiohttpSession] | None = None

    async def __call__(self, memo: Any, **kwargs: Any) -> kopf.AiohttpSession | None:
        # What kopf's default login reads (the kubernetes client's configuration: in the cluster, the
        # ServiceAccount's token; else the kubeconfig, whose exec plugins may take a while: not on the event loop).
        info = await asyncio.to_thread(kopf.login_via_client, **kwargs)
        if info is None:
            return None
        if self._last is not None and self._last[0] == info:
            return self._last[1]
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=pool_size(memo.config.watch_namespaces), ssl=info.as_ssl_context()),
            headers=info.as_http_headers(), trust_env=info.trust_env)
        context = kopf.AiohttpSession(aiohttp_session=session, server=info.server, priority=info.priority,
                                      default_namespace=info.default_namespace, expiration=info.expiration)
        self._last = (info, context)
        return context

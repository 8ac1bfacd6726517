"""The operator's connections to the API server. kopf's own session opens a connection for every concurrent request,
without a bound (aiohttp's ``limit=0``), and keeps each one alive with its 256 KiB TLS read buffer: a burst of a few
hundred objects left 400 connections open, 50 MiB of buffers (memory_report, make bench-operator-scale), and a
thousand objects kept the operator above 700 MiB. The same login here, in a session whose pool is bounded: requests
beyond it wait in the operator rather than at the API server."""

from __future__ import annotations

from typing import Any

import aiohttp
import kopf

# kopf's watches hold one connection each for as long as they stream (about ten); the requests share the rest.
API_CONNECTIONS = 32


async def login(**kwargs: Any) -> kopf.AiohttpSession | None:
    """What kopf's default login reads (the kubernetes client's configuration: in the cluster, the ServiceAccount;
    else the kubeconfig), in a session of at most API_CONNECTIONS connections."""
    info = kopf.login_via_client(**kwargs)
    if info is None:
        return None
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=API_CONNECTIONS, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(), trust_env=info.trust_env)
    return kopf.AiohttpSession(aiohttp_session=session, server=info.server, priority=info.priority,
                               default_namespace=info.default_namespace, expiration=info.expiration)

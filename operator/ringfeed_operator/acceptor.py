"""A new object's first status, `Ready=False, Accepted` with what it waits for, written as soon as the operator
sees the object.

kopf writes an object's first status only after two PATCHes in turn (its finalizer, then the create handler's
patch), each queued in the operator's connection pool behind the requests of the objects seen before it: in a burst
of a thousand Datasets the first status came after 27 s (p99), a Split's after 67 s (make bench-operator-scale).
Here it is one PATCH from the object's watch event, over connections of its own.

The PATCH tests the resourceVersion the event carried, so it never overwrites a status that a handler wrote in
between: refused, it is dropped, and the object's next event offers it again while its status is still empty. The
race with kopf's own first PATCH (its finalizer, tested the same way) costs the loser one more round, never a write.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime

import aiohttp
import kopf

from ringfeed_operator.api_session import open_session
from ringfeed_operator.metrics import Metrics
from ringfeed_operator.status import Conditions

# Connections of the acceptor's own: a burst is a few new objects a second, each one PATCH.
ACCEPT_CONNECTIONS = 4
REQUEST_TIMEOUT_S = 30
logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Offer:
    kind: str
    resource_version: str
    created: str  # creationTimestamp (RFC 3339, seconds)
    ops: list


def first_status_ops(body: Mapping, next_step: str) -> list | None:
    """The JSON patch of `body`'s status subresource that writes its first status, or None when it has one (a
    condition) or is going away."""
    meta, status = body["metadata"], body.get("status") or {}
    if status.get("conditions") or meta.get("deletionTimestamp"):
        return None
    conditions = Conditions(None, meta.get("generation", 1))
    conditions.set("Ready", False, "Accepted", f"seen by the operator; {next_step}")
    # A status without conditions keeps its other fields; none at all is made whole.
    write = ({"op": "add", "path": "/status/conditions", "value": conditions.as_list()} if status else
             {"op": "add", "path": "/status", "value": {"conditions": conditions.as_list()}})
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}, write]


class Acceptor:
    """Offered every watch event of the kinds it accepts (from kopf's event handlers, which must not wait: an
    object's handlers run one at a time); its workers PATCH the latest offer of each object, one PATCH at a time
    per object."""

    def __init__(self, login: Callable[[], kopf.ConnectionInfo | None] | None = None,
                 connections: int = ACCEPT_CONNECTIONS):
        self._login = login or (lambda: kopf.login_via_client(logger=logger, settings=kopf.OperatorSettings()))
        self._connections = connections
        self._offers: dict[str, Offer] = {}  # status URL path → the latest offer not yet sent
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._workers: list[asyncio.Task] = []
        self._server = ""
        self._session: aiohttp.ClientSession | None = None
        self._login_lock = asyncio.Lock()

    def offer(self, plural: tuple[str, str, str], kind: str, body: Mapping, next_step: str) -> None:
        ops = first_status_ops(body, next_step)
        if ops is None:
            return
        group, version, resource = plural
        meta = body["metadata"]
        path = f"/apis/{group}/{version}/namespaces/{meta['namespace']}/{resource}/{meta['name']}/status"
        if path not in self._offers:
            self._queue.put_nowait(path)
        self._offers[path] = Offer(kind, meta["resourceVersion"], meta.get("creationTimestamp", ""), ops)

    async def start(self, metrics: Metrics) -> None:
        await self._open()
        self._workers = [asyncio.create_task(self._work(metrics), name=f"acceptor-{n}")
                         for n in range(self._connections)]

    async def close(self) -> None:
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def _open(self, refused: aiohttp.ClientSession | None = None) -> None:
        """Log in, or again after `refused` got a 401 (once for all the workers that did)."""
        async with self._login_lock:
            if self._session is not refused:
                return
            info = await asyncio.to_thread(self._login)  # a kubeconfig's exec plugin may take a while
            if info is None:
                raise kopf.LoginError("no credentials for the API server")
            if self._session is not None:
                await self._session.close()
            self._server, self._session = info.server.rstrip("/"), open_session(info, self._connections)

    async def _work(self, metrics: Metrics) -> None:
        while True:
            path = await self._queue.get()
            offer = self._offers.pop(path)
            try:
                result = await self._send(path, offer)
            except (TimeoutError, aiohttp.ClientError, kopf.LoginError) as error:
                # Not retried: kopf's own first status (its reconcile) follows, and the next event offers it again.
                logger.warning("The first status of %s was not written: %s", path, error)
                result = "failed"
            metrics.first_statuses.labels(offer.kind, result).inc()
            if result == "written" and offer.created:
                created = datetime.fromisoformat(offer.created.replace("Z", "+00:00")).timestamp()
                metrics.first_status_seconds.labels(offer.kind).observe(max(0.0, time.time() - created))

    async def _send(self, path: str, offer: Offer) -> str:
        for attempt in range(2):
            session = self._session
            assert session is not None
            async with session.patch(self._server + path, json=offer.ops,
                                           headers={"Content-Type": "application/json-patch+json"},
                                           timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)) as response:
                if response.status == 401 and attempt == 0:
                    await self._open(refused=session)  # a rotated ServiceAccount token: read it again, once
                    continue
                if response.status < 300:
                    return "written"
                if response.status in (404, 409, 422):
                    return "superseded"  # gone, or changed since the event: its status is a handler's to write
                with contextlib.suppress(aiohttp.ClientError):
                    logger.warning("The first status of %s was refused: %s %s", path, response.status,
                                   (await response.text())[:300])
                return "failed"
        return "failed"

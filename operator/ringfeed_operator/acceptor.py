"""A new object's first status, `Ready=False, Accepted` with what it waits for, written as soon as the operator
sees the object.

kopf writes an object's first status only after two PATCHes in turn (its finalizer, then the create handler's
patch), each queued behind the work on the objects seen before it: in a burst of a thousand Datasets the first
status came after 27 s (p99), a Split's after 67 s (make bench-operator-scale). Handed kopf's events instead, the
Splits of a burst of 300 still reached it 5 s late: kopf's event loop is the operator's busiest place. So the
acceptor has its own watches (one per kind and watched namespace) and its own threads and connections, in a process
of its own (acceptor_process.py), and writes each first status in one PATCH.

The PATCH tests the resourceVersion the event carried, so it never overwrites a status that a handler wrote in
between: refused, it is dropped, and the object's next event offers it again while its status is still empty. The
race with kopf's own first PATCH (its finalizer, tested the same way) costs the loser one more round, never a write.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from ringfeed_operator.kube import DATASETS, RINGS, SPLITS, TRAININGJOBS, api_client
from ringfeed_operator.status import Conditions, timestamp

# What becomes of each first status: (the kind's name, written | superseded | failed, seconds from the object's
# creation to its status written, or None).
Report = Callable[[str, str, float | None], None]


@dataclasses.dataclass(frozen=True)
class Kind:
    plural: tuple[str, str, str]  # group, version, plural
    name: str
    next_step: str  # what a new object waits for, in its first status


KINDS = (Kind(DATASETS, "Dataset", "making its tables on the ring"),
         Kind(SPLITS, "Split", "its split Job starts once its Dataset is Ready"),
         Kind(TRAININGJOBS, "TrainingJob", "its ranks start once its Split is computed"),
         Kind(RINGS, "Ring", "making its Cassandra datacenter"))
# Threads that PATCH: a burst creates up to 170 objects a second (bench-operator-scale), and a PATCH takes 50-700 ms
# on a busy API server. With 8, the offers of a burst of 300 waited up to 2.5 s for one; with 16 (~110 PATCHes a
# second), those of 1,000 TrainingJobs made in 10 s waited up to 5 s. Each thread keeps one request in flight, so
# on an API server at full CPU more threads also give first statuses a larger share of it than the reconciles'.
PATCHERS = 32
WATCH_S = 300  # a watch's length before it is started again from where it ended
RETRY_S = (1.0, 30.0)  # after a failed list or watch: the first wait, doubled up to the last
REQUEST_TIMEOUT_S = 30
logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Offer:
    kind: Kind
    namespace: str
    name: str
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
    """Watches the kinds it accepts in `namespaces` (every namespace when empty) and PATCHes each object without a
    status: the latest of its offers made before a thread took it up (an earlier one would only be refused)."""

    def __init__(self, api: client.ApiClient, report: Report, namespaces: Sequence[str] = (),
                 patchers: int = PATCHERS):
        self._custom = client.CustomObjectsApi(api)
        self._report = report
        self._namespaces = tuple(namespaces) or (None,)
        self._patchers = patchers
        self._offers: dict[tuple[str, str, str], Offer] = {}  # (plural, namespace, name) → the latest not yet sent
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[tuple[str, str, str] | None] = queue.SimpleQueue()
        self._stop = threading.Event()

    @classmethod
    def connect(cls, report: Report, namespaces: Sequence[str]) -> Acceptor:
        """An acceptor with a client of its own (the kubernetes client's configuration, loaded): its connections
        never wait behind the handlers', and its pool holds every watch and every PATCH at once."""
        return cls(api_client(len(KINDS) * max(1, len(namespaces)) + PATCHERS), report, namespaces)

    def start(self) -> None:
        # Daemons: a watch ends only with its stream, and the process does not wait for it.
        for kind in KINDS:
            for namespace in self._namespaces:
                threading.Thread(target=self._watch, args=(kind, namespace), daemon=True,
                                 name=f"accept-{kind.name}-{namespace or 'all'}").start()
        for number in range(self._patchers):
            threading.Thread(target=self._patch_offers, daemon=True, name=f"accept-patch-{number}").start()

    def close(self) -> None:
        self._stop.set()
        for _ in range(self._patchers):
            self._queue.put(None)

    def offer(self, kind: Kind, body: Mapping) -> None:
        ops = first_status_ops(body, kind.next_step)
        if ops is None:
            return
        meta = body["metadata"]
        key = (kind.plural[2], meta["namespace"], meta["name"])
        with self._lock:
            new = key not in self._offers
            self._offers[key] = Offer(kind, meta["namespace"], meta["name"], meta.get("creationTimestamp", ""), ops)
        if new:
            self._queue.put(key)

    def _watch(self, kind: Kind, namespace: str | None) -> None:
        group, version, plural = kind.plural
        lister, scope = ((self._custom.list_namespaced_custom_object, (group, version, namespace, plural))
                         if namespace else (self._custom.list_cluster_custom_object, (group, version, plural)))
        resource_version = None  # where the last watch ended; None: list first (start, or the version expired)
        retry_s = RETRY_S[0]
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    listed = cast(dict[str, Any], lister(*scope))
                    for item in listed["items"]:
                        self.offer(kind, item)
                    resource_version = listed["metadata"]["resourceVersion"]
                    retry_s = RETRY_S[0]
                for event in watch.Watch().stream(lister, *scope, resource_version=resource_version,
                                                  timeout_seconds=WATCH_S, allow_watch_bookmarks=True):
                    if event["type"] == "ERROR":  # the version expired
                        resource_version = None
                        break
                    resource_version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.offer(kind, event["object"])
                    if self._stop.is_set():
                        return
            except ApiException as error:
                if error.status != 410:
                    logger.warning("Watching %s for their first status: %s %s; again in %.0f s", plural,
                                   error.status, error.reason, retry_s)
                    self._stop.wait(retry_s)
                    retry_s = min(2 * retry_s, RETRY_S[1])
                resource_version = None
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
                logger.warning("Watching %s for their first status: %s; again in %.0f s", plural, error, retry_s)
                self._stop.wait(retry_s)
                retry_s = min(2 * retry_s, RETRY_S[1])

    def _patch_offers(self) -> None:
        while (key := self._queue.get()) is not None:
            with self._lock:
                offer = self._offers.pop(key)
            result = self._patch(offer)
            waited = None
            if result == "written" and offer.created:
                waited = max(0.0, time.time() - timestamp(offer.created).timestamp())
            self._report(offer.kind.name, result, waited)

    def _patch(self, offer: Offer) -> str:
        group, version, plural = offer.kind.plural
        try:
            self._custom.patch_namespaced_custom_object_status(
                group, version, offer.namespace, plural, offer.name, offer.ops,
                _content_type="application/json-patch+json", _request_timeout=REQUEST_TIMEOUT_S)
            return "written"
        except ApiException as error:
            if error.status in (404, 409, 422):
                return "superseded"  # gone, or changed since the event: its status is a handler's to write
            logger.warning("The first status of %s %s/%s was refused: %s %s", offer.kind.name, offer.namespace,
                           offer.name, error.status, (error.body or "")[:300])
        except (urllib3.exceptions.HTTPError, OSError) as error:
            # Not retried: the reconcile writes a status too, and the object's next event offers this one again.
            logger.warning("The first status of %s %s/%s was not written: %s", offer.kind.name, offer.namespace,
                           offer.name, error)
        return "failed"

"""When each benchmark object was created, first given a status, made Ready (Running for a TrainingJob) and gone:
one watch per kind, across namespaces, on the benchmark's label, each from a process of its own (spawned.py). Times
are this machine's clock on both sides (the create call's start, the watch event's arrival), so they include the
apiserver's delivery, a few milliseconds."""

from __future__ import annotations

import dataclasses
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from kubernetes import client, config, watch

from kubecluster import GROUP, VERSION
from operator_scale.spawned import Spawned

LABEL = "ringfeed.io/bench"
# What an object's events have shown so far, as bits: sent by a watching process when one is new.
SEEN, STATUS, READY, GONE = 1, 2, 4, 8


@dataclasses.dataclass
class Life:
    kind: str
    namespace: str
    name: str
    phase: str  # which part of the run created it: warm-up, create, churn
    created: float  # the create call's start
    returned: float  # its return
    seen: float | None = None  # the first watch event's arrival (in its watching process)
    first_status: float | None = None
    ready: float | None = None
    gone: float | None = None


def has_status(obj: dict) -> bool:
    """The operator wrote something: a condition or the generation it handled."""
    status = obj.get("status") or {}
    return bool(status.get("conditions") or "observedGeneration" in status)


def is_ready(plural: str, obj: dict) -> bool:
    status = obj.get("status") or {}
    if plural == "trainingjobs":
        return status.get("phase") == "Running"
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())


def shown(plural: str, obj: dict, event_type: str) -> int:
    return (SEEN | (STATUS if has_status(obj) else 0) | (READY if is_ready(plural, obj) else 0)
            | (GONE if event_type == "DELETED" else 0))


def watch_kind(kubeconfig: str, plural: str, selector: str, out: Connection) -> None:
    """A watching process: lists then watches `plural`, and sends (uid, arrival time, bits) for each event that
    shows something new of its object."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    custom = client.CustomObjectsApi(client.ApiClient(configuration))
    sent: dict[str, int] = {}

    def note(at: float, obj: dict, event_type: str) -> None:
        uid, bits = obj["metadata"]["uid"], shown(plural, obj, event_type)
        if bits & ~sent.get(uid, 0):
            sent[uid] = sent.get(uid, 0) | bits
            out.send((uid, at, bits))

    version = None  # where the last watch ended; None: list first (start, or the version expired)
    while True:
        try:
            if version is None:
                listed = custom.list_cluster_custom_object(GROUP, VERSION, plural, label_selector=selector)
                at = time.time()
                for item in listed["items"]:
                    note(at, item, "MODIFIED")
                version = listed["metadata"]["resourceVersion"]
            for event in watch.Watch().stream(custom.list_cluster_custom_object, GROUP, VERSION, plural,
                                              label_selector=selector, timeout_seconds=30,
                                              resource_version=version):
                if event["type"] == "ERROR":  # expired: list again
                    version = None
                    break
                version = event["object"]["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    note(time.time(), event["object"], event["type"])
        except client.ApiException:
            version = None  # expired (410 Gone): list again
            time.sleep(0.5)


class Timeline:
    """Lives of the benchmark's objects by uid, fed by a watching process per kind (through a thread each here)."""

    def __init__(self, kubeconfig: Path, plurals: tuple[str, ...], run_id: str):
        self._lock = threading.Condition()
        self.lives: dict[str, Life] = {}
        self._early: dict[str, list[tuple[float, int]]] = {}  # what arrived before the create call returned
        self._watchers = [Spawned(watch_kind, (str(kubeconfig), plural, f"{LABEL}={run_id}"), f"watch-{plural}",
                                  lambda message: self._seen(*message)) for plural in plurals]

    def start(self) -> None:
        for watcher in self._watchers:
            watcher.start()

    def stop(self) -> None:
        for watcher in self._watchers:
            watcher.stop()

    def created(self, plural: str, obj: dict, phase: str, started: float, returned: float) -> None:
        uid = obj["metadata"]["uid"]
        with self._lock:
            self.lives[uid] = Life(plural, obj["metadata"]["namespace"], obj["metadata"]["name"], phase, started,
                                   returned)
            for at, bits in self._early.pop(uid, ()):
                self._record(uid, at, bits)

    def latest(self, plural: str, namespace: str, name: str) -> str:
        """The uid of the last object of that name created."""
        with self._lock:
            return next(uid for uid, life in reversed(self.lives.items())
                        if (life.kind, life.namespace, life.name) == (plural, namespace, name))

    def _seen(self, uid: str, at: float, bits: int) -> None:
        with self._lock:
            if uid in self.lives:
                self._record(uid, at, bits)
            else:
                self._early.setdefault(uid, []).append((at, bits))

    def _record(self, uid: str, at: float, bits: int) -> None:
        life = self.lives[uid]
        if life.seen is None:
            life.seen = at
        if life.first_status is None and bits & STATUS:
            life.first_status = at
        if life.ready is None and bits & READY:
            life.ready = at
        if bits & GONE:
            life.gone = at
        self._lock.notify_all()

    def wait(self, uids: list[str], until: str, timeout_s: float) -> list[str]:
        """Wait until every life of `uids` has its `until` time (ready, gone); → those that have none yet."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                missing = [u for u in uids if getattr(self.lives[u], until) is None]
                left = deadline - time.monotonic()
                if not missing or left <= 0:
                    return missing
                self._lock.wait(min(left, 1.0))

"""When each benchmark object was created, first given a status, made Ready (Running for a TrainingJob) and gone:
one watch per kind, across namespaces, on the benchmark's label. Times are this machine's clock on both sides (the
create call's start, the watch event's arrival), so they include the apiserver's delivery, a few milliseconds."""

from __future__ import annotations

import dataclasses
import threading
import time

from kubernetes import client, watch

from kubecluster import GROUP, VERSION

LABEL = "ringfeed.io/bench"


@dataclasses.dataclass
class Life:
    kind: str
    namespace: str
    name: str
    phase: str  # which part of the run created it: warm-up, create, churn
    created: float  # the create call's start
    returned: float  # its return
    seen: float | None = None  # the first watch event's arrival here
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


class Timeline:
    """Lives of the benchmark's objects by uid, fed by a watch thread per kind."""

    def __init__(self, api: client.ApiClient, plurals: tuple[str, ...], run_id: str):
        self._custom = client.CustomObjectsApi(api)
        self._selector = f"{LABEL}={run_id}"
        self._lock = threading.Condition()
        self.lives: dict[str, Life] = {}
        self._early: dict[str, list[tuple[float, dict, str]]] = {}  # events that beat the create call's return
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._watch, args=(p,), daemon=True) for p in plurals]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()

    def created(self, plural: str, obj: dict, phase: str, started: float, returned: float) -> None:
        uid = obj["metadata"]["uid"]
        with self._lock:
            self.lives[uid] = Life(plural, obj["metadata"]["namespace"], obj["metadata"]["name"], phase, started,
                                   returned)
            for at, body, kind in self._early.pop(uid, ()):
                self._record(uid, plural, at, body, kind)

    def latest(self, plural: str, namespace: str, name: str) -> str:
        """The uid of the last object of that name created."""
        with self._lock:
            return next(uid for uid, life in reversed(self.lives.items())
                        if (life.kind, life.namespace, life.name) == (plural, namespace, name))

    def _watch(self, plural: str) -> None:
        version = None  # where the last watch ended; None: list first (start, or the version expired)
        while not self._stop.is_set():
            try:
                if version is None:
                    listed = self._custom.list_cluster_custom_object(GROUP, VERSION, plural,
                                                                     label_selector=self._selector)
                    for item in listed["items"]:
                        self._seen(plural, time.time(), item, "MODIFIED")
                    version = listed["metadata"]["resourceVersion"]
                for event in watch.Watch().stream(self._custom.list_cluster_custom_object, GROUP, VERSION, plural,
                                                  label_selector=self._selector, timeout_seconds=30,
                                                  resource_version=version):
                    if event["type"] == "ERROR":  # expired: list again
                        version = None
                        break
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self._seen(plural, time.time(), event["object"], event["type"])
                    if self._stop.is_set():
                        return
            except client.ApiException:
                version = None  # expired (410 Gone): list again
                time.sleep(0.5)

    def _seen(self, plural: str, at: float, obj: dict, kind: str) -> None:
        uid = obj["metadata"]["uid"]
        with self._lock:
            if uid in self.lives:
                self._record(uid, plural, at, obj, kind)
            else:
                self._early.setdefault(uid, []).append((at, obj, kind))

    def _record(self, uid: str, plural: str, at: float, obj: dict, kind: str) -> None:
        life = self.lives[uid]
        if life.seen is None:
            life.seen = at
        if life.first_status is None and has_status(obj):
            life.first_status = at
        if life.ready is None and is_ready(plural, obj):
            life.ready = at
        if kind == "DELETED":
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

"""The API server's own pace through the run, as a reference for the operator's: a process of its own writes an
object every PERIOD_S and watches it, and reports how long each write call took and how late its event came back.

Two hearts beat: a ConfigMap, and a TrainingJob's status (a condition of its own, which the operator leaves alone; the
TrainingJob names no Split, so the operator only retries it now and then). When a burst's objects reach the
benchmark's watchers late, they tell the causes apart: the ConfigMap late as well means the API server (or the cores
under it) was behind with everything; only the TrainingJob late means that kind's own delivery was behind (its watch
cache, before any watcher); neither late means the watchers of that kind read too slowly."""

from __future__ import annotations

import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
import urllib3
from kubernetes import client, config, watch

from kubecluster import GROUP, VERSION
from operator_scale.spawned import Spawned

NAME = "ringfeed-bench-heartbeat"
PERIOD_S = 0.25
KINDS = ("configmaps", "trainingjobs")
BEAT_CONDITION = "BenchHeartbeat"


class ConfigMapHeart:
    def __init__(self, api: client.ApiClient, namespace: str):
        self._core, self._namespace = client.CoreV1Api(api), namespace

    def create(self) -> str:
        made = self._core.create_namespaced_config_map(self._namespace, {"metadata": {"name": NAME}})
        return made.metadata.resource_version

    def write(self, count: str) -> None:
        self._core.patch_namespaced_config_map(NAME, self._namespace, {"data": {"beat": count}})

    def events(self, version: str):
        for event in watch.Watch().stream(self._core.list_namespaced_config_map, self._namespace,
                                          resource_version=version, field_selector=f"metadata.name={NAME}",
                                          timeout_seconds=60):
            yield event["object"].metadata.resource_version, (event["object"].data or {}).get("beat")


class TrainingJobHeart:
    def __init__(self, api: client.ApiClient, namespace: str):
        self._custom, self._namespace = client.CustomObjectsApi(api), namespace

    def create(self) -> str:
        manifest = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": NAME},
                    "spec": {"split": {"name": f"{NAME}-absent"}, "suspend": True,
                             "template": {"spec": {"containers": [{"name": "trainer", "image": "none"}]}}}}
        made = self._custom.create_namespaced_custom_object(GROUP, VERSION, self._namespace, "trainingjobs", manifest)
        return made["metadata"]["resourceVersion"]

    def write(self, count: str) -> None:
        condition = {"type": BEAT_CONDITION, "status": "True", "reason": "Beat", "message": count,
                     "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self._custom.patch_namespaced_custom_object_status(GROUP, VERSION, self._namespace, "trainingjobs", NAME,
                                                           {"status": {"conditions": [condition]}})

    def events(self, version: str):
        for event in watch.Watch().stream(self._custom.list_namespaced_custom_object, GROUP, VERSION,
                                          self._namespace, "trainingjobs", resource_version=version,
                                          field_selector=f"metadata.name={NAME}", timeout_seconds=60):
            conditions = (event["object"].get("status") or {}).get("conditions") or ()
            yield event["object"]["metadata"]["resourceVersion"], next(
                (c["message"] for c in conditions if c.get("type") == BEAT_CONDITION), None)


def beat(kubeconfig: str, kind: str, namespace: str, out: Connection) -> None:
    """A heartbeat process: sends (written at, write call seconds, delivery seconds) per beat, times monotonic."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    heart = (ConfigMapHeart if kind == "configmaps" else TrainingJobHeart)(client.ApiClient(configuration), namespace)
    version = heart.create()
    marks: dict[str, dict[str, float]] = {}  # beat → its call's start and return and its event's arrival
    lock = threading.Lock()

    def mark(count: str, **times: float) -> None:
        """Note times of a beat; send it once it has all three (its event may come before its call returns)."""
        with lock:
            beat_marks = marks.setdefault(count, {})
            beat_marks.update(times)
            if len(beat_marks) == 3:
                del marks[count]
                out.send((beat_marks["started"], beat_marks["returned"] - beat_marks["started"],
                          max(0.0, beat_marks["arrived"] - beat_marks["returned"])))

    def write() -> None:
        count = 0
        while True:
            count += 1
            started = time.monotonic()
            try:
                heart.write(str(count))
                mark(str(count), started=started, returned=time.monotonic())
            except (client.ApiException, urllib3.exceptions.HTTPError):  # a beat missed, not the heart stopped
                pass
            time.sleep(max(0.0, started + PERIOD_S - time.monotonic()))

    threading.Thread(target=write, daemon=True).start()
    last = 0
    while True:
        try:
            for event_version, count in heart.events(version):
                version = event_version
                if count is not None and int(count) > last:  # the operator's own writes repeat the last beat
                    last = int(count)
                    mark(count, arrived=time.monotonic())
        except client.ApiException:  # expired (410 Gone): beats from the next on
            version = ""


class Heartbeat:
    """The beats received, by the time they were written (time.monotonic(), as the bursts' marks)."""

    def __init__(self, kubeconfig: Path, kind: str, namespace: str):
        self.beats: list[tuple[float, float, float]] = []
        self._process = Spawned(beat, (str(kubeconfig), kind, namespace), f"heartbeat-{kind}", self.beats.append)

    def start(self) -> None:
        self._process.start()

    def stop(self) -> None:
        self._process.stop()

    def between(self, start: float, end: float) -> dict | None:
        """p50/p99 of the write calls and of their events' delivery for the beats written from `start` to `end`;
        None when none were."""
        inside = [b for b in list(self.beats) if start <= b[0] <= end]
        if not inside:
            return None

        def spread(values: list[float]) -> dict:
            return {f"p{q}": round(float(np.percentile(values, q)), 3) for q in (50, 99)}
        return {"beats": len(inside), "write_call": spread([b[1] for b in inside]),
                "delivery": spread([b[2] for b in inside])}

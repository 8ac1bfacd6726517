"""The API server's own pace through the run, as a reference for the operator's: a process of its own writes a
ConfigMap every PERIOD_S and watches it, and reports how long each write call took and how late its event came back.

When a burst's objects reach the benchmark's watchers late, this tells the two causes apart: a heartbeat late as well
means the API server (or the cores under it) was behind with everything; a heartbeat on time means the delay was in
that kind's own delivery (its watch cache, its watchers)."""

from __future__ import annotations

import multiprocessing
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
from kubernetes import client, config, watch

NAME = "ringfeed-bench-heartbeat"
PERIOD_S = 0.25


def beat(kubeconfig: str, namespace: str, out: Connection) -> None:
    """A heartbeat process: sends (written at, write call seconds, delivery seconds) per beat, times monotonic."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    core = client.CoreV1Api(client.ApiClient(configuration))
    core.create_namespaced_config_map(namespace, {"metadata": {"name": NAME}, "data": {"beat": "0"}})
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
            core.patch_namespaced_config_map(NAME, namespace, {"data": {"beat": str(count)}})
            mark(str(count), started=started, returned=time.monotonic())
            time.sleep(max(0.0, started + PERIOD_S - time.monotonic()))

    threading.Thread(target=write, daemon=True).start()
    version = core.read_namespaced_config_map(NAME, namespace).metadata.resource_version
    while True:
        try:
            for event in watch.Watch().stream(core.list_namespaced_config_map, namespace, resource_version=version,
                                              field_selector=f"metadata.name={NAME}", timeout_seconds=60):
                version = event["object"].metadata.resource_version
                if event["type"] == "MODIFIED":
                    mark(event["object"].data["beat"], arrived=time.monotonic())
        except client.ApiException:  # expired (410 Gone): from now on
            version = core.read_namespaced_config_map(NAME, namespace).metadata.resource_version


class Heartbeat:
    """The beats received, by the time they were written (time.monotonic(), as the bursts' marks)."""

    def __init__(self, kubeconfig: Path, namespace: str):
        spawn = multiprocessing.get_context("spawn")
        self._receiving, sending = spawn.Pipe(duplex=False)
        self._process = spawn.Process(target=beat, args=(str(kubeconfig), namespace, sending), daemon=True,
                                      name="heartbeat")
        self._sending = sending
        self.beats: list[tuple[float, float, float]] = []

    def start(self) -> None:
        self._process.start()
        self._sending.close()  # the child's end: held only there
        threading.Thread(target=self._receive, daemon=True).start()

    def stop(self) -> None:
        self._process.terminate()

    def _receive(self) -> None:
        try:
            while True:
                self.beats.append(self._receiving.recv())
        except EOFError:
            return

    def between(self, start: float, end: float) -> dict | None:
        """p50/p99 of the write calls and of their events' delivery for the beats written from `start` to `end`;
        None when none were."""
        inside = [b for b in list(self.beats) if start <= b[0] <= end]
        if not inside:
            return None
        calls, deliveries = np.array([b[1] for b in inside]), np.array([b[2] for b in inside])
        return {"beats": len(inside),
                "write_call": {"p50": round(float(np.percentile(calls, 50)), 3),
                               "p99": round(float(np.percentile(calls, 99)), 3)},
                "delivery": {"p50": round(float(np.percentile(deliveries, 50)), 3),
                             "p99": round(float(np.percentile(deliveries, 99)), 3)}}

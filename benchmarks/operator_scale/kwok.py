"""Simulated nodes: kwok (run here, outside the cluster, with the admin kubeconfig) makes Node objects annotated
`kwok.x-k8s.io/node: fake` look like healthy nodes and plays the Pods bound to them: Running at once, the ingest and
split Jobs' Pods Succeeded right after (kwok-stages.yaml). Such a Pod costs the apiserver its writes and no CPU of
its own.

The real node is cordoned while the benchmark runs, so that every new Pod (the operator's Jobs, the TrainingJobs'
ranks) lands on a simulated one: the operator's Job manifests carry no tolerations or node selector to aim with (and
adding settings for a benchmark's sake would widen the chart), while the Pods already running there (the operator,
cass-operator) stay where they are.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from kubernetes import client

STAGES = Path(__file__).with_name("kwok-stages.yaml")
FAKE = "kwok.x-k8s.io/node"
# The simulated Pods' addresses (kwok's default range is the cluster's Services', 10.0.0.0/24). No process answers
# there: the cluster's network namespace routes them as unreachable while the benchmark runs, so the operator's
# requests to a simulated sidecar are refused at once, as by a Pod whose sidecar is not listening yet. Without that
# route they were dropped, and each one waited out its timeout (docs/benchmarks.md).
POD_CIDR = "10.245.0.1/16"
POD_ROUTE = "10.245.0.0/16"
NODE_IP = "10.245.255.254"


class SimulatedNodes:
    """`count` Node objects driven by a kwok process; the real node cordoned until `stop`."""

    def __init__(self, core: client.CoreV1Api, kwok: Path, kubeconfig: Path, log: Path, count: int):
        self._core, self._kwok, self._kubeconfig, self._log, self.count = core, kwok, kubeconfig, log, count
        self.names = [f"kwok-{index}" for index in range(count)]
        self._real = [n.metadata.name for n in core.list_node().items if FAKE not in (n.metadata.annotations or {})]
        self._process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60) -> None:
        for name in self.names:
            self._core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": name, "annotations": {FAKE: "fake"}, "labels": {"type": "kwok"}}})
        with open(self._log, "w") as log:
            self._process = subprocess.Popen(
                [str(self._kwok), f"--kubeconfig={self._kubeconfig}", f"--config={STAGES}",
                 "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={FAKE}=fake",
                 f"--cidr={POD_CIDR}", f"--node-ip={NODE_IP}"],
                stdout=log, stderr=subprocess.STDOUT)
        subprocess.run(["ip", "route", "replace", "unreachable", POD_ROUTE], check=True)
        deadline = time.monotonic() + timeout_s
        while self._ready() < self.count:
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kwok: {self._ready()} of {self.count} simulated nodes Ready; see {self._log}")
            time.sleep(0.5)
        for name in self._real:
            self._core.patch_node(name, {"spec": {"unschedulable": True}})

    @property
    def pid(self) -> int:
        assert self._process is not None, "not started"
        return self._process.pid

    def _ready(self) -> int:
        nodes = self._core.list_node(label_selector="type=kwok").items
        return sum(1 for n in nodes for c in (n.status.conditions or ()) if c.type == "Ready" and c.status == "True")

    def stop(self) -> None:
        """Uncordon the real node, stop kwok, delete the simulated nodes (their Pods go with them)."""
        for name in self._real:
            self._core.patch_node(name, {"spec": {"unschedulable": False}})
        subprocess.run(["ip", "route", "del", "unreachable", POD_ROUTE], check=False)
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        for name in self.names:
            try:
                self._core.delete_node(name)
            except client.ApiException as error:
                if error.status != 404:
                    raise

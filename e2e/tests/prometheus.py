"""A real Prometheus (Debian's package, `make prometheus`) scraping the local cluster for the whole e2e session, with
Ringfeed's rule file loaded as the chart ships it.

Targets are what a Prometheus without the Prometheus Operator scrapes by the `prometheus.io/*` annotations: the
operator's metrics Service (job `ringfeed-operator`), TrainingJob Pods at their loader sidecar's port
(`ringfeed-sidecar`), ingest Job Pods while they run (`ringfeed-ingest`), the Rings' Cassandra Pods at the Management
API agent's port (`cassandra`), the cache tiers' Alluxio masters and workers (`alluxio`), with the namespace, pod and
container labels a Kubernetes scrape configuration adds.
Debian builds Prometheus without Kubernetes service discovery, so `annotated_targets` finds them through the API
server every few seconds and hands them over in a file_sd file; loaders of the test process itself join by
`add_loader` (job `ringfeed-loader`). Prometheus listens on loopback inside the cluster's network namespace, where the
Pod IPs are reachable.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml
from kubernetes import client

from kubecluster import CACHE, CHART

BINARY = CACHE / "prometheus" / "usr" / "bin" / "prometheus"
PROMTOOL = BINARY.with_name("promtool")
RULES = CHART / "files" / "monitoring" / "rules.yaml"
SCRAPE_INTERVAL_S = 5
SCRAPE = "prometheus.io/scrape"


def lint(exposition: str) -> str:
    """`promtool check metrics` on an exposition: its complaints (naming, units, help, types), empty when none."""
    result = subprocess.run([str(PROMTOOL), "check", "metrics"], input=exposition, capture_output=True, text=True,
                            check=False)
    return (result.stdout + result.stderr).strip() if result.returncode else ""


def configuration(targets: Path) -> dict:
    """Two scrape configurations over the discovered targets, each target's `job` label from the file: the operator's
    with honor_labels (its series name the namespace of their object: kept, not renamed exported_namespace), the
    others without (Cassandra's agent sets an `instance` label of its own)."""
    def scrape(name: str, operator: bool) -> dict:
        return {"job_name": name, "honor_labels": operator,
                "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "5s"}],
                "relabel_configs": [
                    {"source_labels": ["job"], "regex": "ringfeed-operator", "action": "keep" if operator else "drop"},
                    {"source_labels": ["__path"], "regex": "(.+)", "target_label": "__metrics_path__"}]}

    return {
        "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s", "evaluation_interval": f"{SCRAPE_INTERVAL_S}s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [scrape("operator", True), scrape("pods", False)],
    }


def annotated_targets(core: client.CoreV1Api) -> list[dict]:
    """file_sd groups of the annotated targets now (see the module documentation)."""
    groups = []
    for service in core.list_service_for_all_namespaces().items:
        annotations, labels = service.metadata.annotations or {}, service.metadata.labels or {}
        if annotations.get(SCRAPE) != "true" or labels.get("app.kubernetes.io/component") != "operator":
            continue
        endpoints = core.read_namespaced_endpoints(service.metadata.name, service.metadata.namespace)
        for subset in endpoints.subsets or ():
            for address in subset.addresses or ():
                groups.append({"targets": [f"{address.ip}:{annotations['prometheus.io/port']}"],
                               "labels": {"job": "ringfeed-operator", "namespace": service.metadata.namespace,
                                          "pod": address.target_ref.name if address.target_ref else ""}})
    for pod in core.list_pod_for_all_namespaces().items:
        annotations, labels = pod.metadata.annotations or {}, pod.metadata.labels or {}
        if annotations.get(SCRAPE) != "true" or pod.status.phase != "Running" or not pod.status.pod_ip:
            continue
        if labels.get("app.kubernetes.io/component") == "trainer":
            job = "ringfeed-sidecar"
        elif labels.get("app.kubernetes.io/component") == "ingest":
            job = "ringfeed-ingest"
        elif labels.get("ringfeed.io/ring"):
            job = "cassandra"
        elif labels.get("app.kubernetes.io/component") in ("cache-master", "cache-worker"):
            job = "alluxio"
        else:
            continue
        port = annotations.get("prometheus.io/port", "")
        containers = [*(pod.spec.init_containers or ()), *pod.spec.containers]
        container = next((c.name for c in containers for p in c.ports or () if str(p.container_port) == port), "")
        groups.append({"targets": [f"{pod.status.pod_ip}:{port}"],
                       "labels": {"job": job, "namespace": pod.metadata.namespace, "pod": pod.metadata.name,
                                  "container": container, "__path": annotations.get("prometheus.io/path", "")}})
    return groups


class Prometheus:
    def __init__(self, folder: Path, api: client.ApiClient):
        self.folder = folder
        self.targets = folder / "targets.json"
        self._write_targets([])
        self._loaders: list[dict] = []
        (folder / "prometheus.yml").write_text(yaml.safe_dump(configuration(self.targets), sort_keys=False))
        with socket.socket() as probe:  # a free loopback port
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "prometheus.log"
        self.started = time.time()
        self._process = subprocess.Popen(
            [str(BINARY), f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1d"],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2):
                    break
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Prometheus did not start:\n{self.log.read_text()[-3000:]}") from None
                time.sleep(0.5)
        self._core = client.CoreV1Api(api)
        self._stopping = threading.Event()
        self._discovery = threading.Thread(target=self._discover, name="prometheus-discovery", daemon=True)
        self._discovery.start()

    def _write_targets(self, groups: list[dict]) -> None:
        temporary = self.targets.with_suffix(".tmp")
        temporary.write_text(json.dumps(groups))
        os.replace(temporary, self.targets)  # Prometheus never reads half a file

    def _discover(self) -> None:
        while not self._stopping.wait(3):
            try:
                self._write_targets([*annotated_targets(self._core), *self._loaders])
            except Exception:  # noqa: BLE001  (the API server restarting: the last targets stay)
                continue

    def add_loader(self, address: str, **labels: str) -> None:
        """Scrape a loader of the test process at `address` (host:port) from now on (job ringfeed-loader)."""
        self._loaders.append({"targets": [address], "labels": {"job": "ringfeed-loader", **labels}})

    def api(self, path: str, **parameters) -> dict:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(parameters)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                reply = json.loads(response.read())
        except urllib.error.HTTPError as error:  # a bad query: 400 with the reason
            reply = json.loads(error.read())
        if reply.get("status") != "success":
            raise ValueError(f"{reply.get('errorType')}: {reply.get('error')}")
        return reply["data"]

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[dict]:
        return self.api("query_range", query=expr, start=start, end=end, step=step_s)["result"]

    def stop(self) -> None:
        self._stopping.set()
        self._discovery.join(timeout=10)
        self._process.terminate()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
